"""A repack (``planner.repack``): moves of shares that free whole devices, each one make-before-break."""

from __future__ import annotations

import random
from collections.abc import Iterable

import pytest

from planner.inventory import Device, DeviceAllocation, InventorySnapshot, Node
from planner.moves import Move
from planner.repack import PodRequests, propose_repack
from tests.planner.helpers import device

T4, A10 = "Tesla T4", "NVIDIA A10"


def share(holder: str, percent: int) -> DeviceAllocation:
    return DeviceAllocation(holder=holder, sharePercent=percent, memoryMiB=16 * 1024 * percent // 100)


def card(node: str, *allocations: DeviceAllocation, name: str = "gpu-0", product: str = T4) -> Device:
    return device(name, node, product, "turing", 16, shareable=True, allocations=allocations)


def cluster(*devices: Device, nodes: Iterable[Node] = ()) -> InventorySnapshot:
    return InventorySnapshot(devices=list(devices), nodes=list(nodes) or None)


def anyone(holder: str) -> bool:
    return True


def test_the_least_used_card_is_emptied_onto_the_fullest_that_takes_its_share() -> None:
    found = propose_repack(
        cluster(card("a", share("ns/x", 25)), card("b", share("ns/y", 50)), card("c", share("ns/z", 70)), card("d")),
        anyone,
    )
    # x (25) fits on b (50 → 75) and not on c (70 → 95 fits too, and leaves less): best fit is c.
    assert found.moves[0] == Move("ns/x", "a/gpu-0", "c/gpu-0")
    # b's 50 no longer fits anywhere in use (c holds 95): b stays; a is freed; d was empty all along.
    assert found.freed == ("a/gpu-0",)
    assert len(found.moves) == 1
    assert "frees 1 device(s): a/gpu-0" in found.message


def test_a_card_that_received_a_share_is_not_emptied_in_the_same_pass() -> None:
    found = propose_repack(cluster(card("a", share("ns/x", 10)), card("b", share("ns/y", 20))), anyone)
    # x moves onto b; b, now a receiver, is never emptied back onto a (freed).
    assert found.moves == (Move("ns/x", "a/gpu-0", "b/gpu-0"),)
    assert found.freed == ("a/gpu-0",)


def test_an_order_that_may_not_move_keeps_its_card_and_its_neighbours() -> None:
    snapshot = cluster(card("a", share("ns/x", 10), share("ns/pinned", 10)), card("b", share("ns/y", 50)))
    found = propose_repack(snapshot, lambda holder: holder != "ns/pinned")
    # a cannot be emptied (pinned stays); b's 50 goes onto a (a receives, 70 %): b is freed.
    assert found.moves == (Move("ns/y", "b/gpu-0", "a/gpu-0"),)
    assert found.freed == ("b/gpu-0",)


def test_shares_move_only_onto_the_same_product() -> None:
    found = propose_repack(cluster(card("a", share("ns/x", 10)), card("b", share("ns/y", 10), product=A10)), anyone)
    assert found.moves == ()
    assert found.freed == ()
    assert found.message.startswith("nothing to repack")


def test_a_share_never_moves_onto_an_empty_card() -> None:
    found = propose_repack(cluster(card("a", share("ns/x", 10)), card("b")), anyone)
    assert found.moves == ()


def test_a_card_is_emptied_whole_or_not_at_all() -> None:
    # a holds 40 + 30; b has room for one of them only (60 + 40 = 100, then 30 does not fit).
    snapshot = cluster(card("a", share("ns/x", 40), share("ns/w", 30)), card("b", share("ns/y", 60)))
    found = propose_repack(snapshot, lambda holder: holder != "ns/y")
    assert found.moves == ()
    # And the half-made attempt left nothing behind: with w gone, x moves onto b.
    snapshot = cluster(card("a", share("ns/x", 40)), card("b", share("ns/y", 60)))
    assert propose_repack(snapshot, lambda holder: holder != "ns/y").moves == (Move("ns/x", "a/gpu-0", "b/gpu-0"),)


def test_a_pod_moves_only_to_a_node_with_room_for_its_cpu_and_memory() -> None:
    devices = (card("a", share("ns/x", 10)), card("b", share("ns/y", 50)))
    pods = {"ns/x": PodRequests(cpuMilli=4000, memoryMiB=8192)}
    tight = [Node(name="a", cpuMilli=8000, memoryMiB=65536), Node(name="b", cpuMilli=8000, requestedCpuMilli=6000)]
    only_x = lambda holder: holder == "ns/x"  # noqa: E731
    assert propose_repack(cluster(*devices, nodes=tight), only_x, pods).moves == ()
    roomy = [Node(name="a", cpuMilli=8000), Node(name="b", cpuMilli=8000, requestedCpuMilli=4000)]
    assert propose_repack(cluster(*devices, nodes=roomy), only_x, pods).freed == ("a/gpu-0",)


def test_two_cards_of_one_node_consolidate_without_judging_its_cpu() -> None:
    # The pod stays on its node: its CPU is not counted twice.
    devices = (card("a", share("ns/x", 10)), card("a", share("ns/y", 50), name="gpu-1"))
    full = [Node(name="a", cpuMilli=8000, requestedCpuMilli=8000)]
    pods = {"ns/x": PodRequests(cpuMilli=4000)}
    assert propose_repack(cluster(*devices, nodes=full), anyone, pods).freed == ("a/gpu-0",)


def test_a_whole_device_or_a_holder_of_several_devices_is_not_moved() -> None:
    whole = DeviceAllocation(holder="ns/whole", sharePercent=100)
    spread = [card("a", share("ns/two", 10)), card("a", share("ns/two", 10), name="gpu-1")]
    found = propose_repack(cluster(card("w", whole), *spread, card("b", share("ns/y", 50))), anyone)
    # Only y's card is emptied (onto the first of the two cards in use that fit it best).
    assert found.moves == (Move("ns/y", "b/gpu-0", "a/gpu-0"),)


def test_max_moves_bounds_a_pass_by_whole_cards() -> None:
    snapshot = cluster(
        card("a", share("ns/a1", 10), share("ns/a2", 10)), card("b", share("ns/b1", 15)), card("c", share("ns/c", 50))
    )
    # Emptying b takes one move, a two: with room for one, only b (a's two would pass the bound).
    found = propose_repack(snapshot, anyone, max_moves=1)
    assert [m.holder for m in found.moves] == ["ns/b1"]
    assert found.freed == ("b/gpu-0",)


@pytest.mark.parametrize("seed", range(40))
def test_every_move_has_room_while_its_source_still_holds_its_share(seed: int) -> None:
    """Random clusters: with every move made and no source released yet (make-before-break), no card
    holds more than 100 % or more than its memory, no node more CPU than it has; a freed card held only
    what moved off it; nothing moved twice."""
    rng = random.Random(seed)
    devices: list[Device] = []
    pods: dict[str, PodRequests] = {}
    nodes = [Node(name=f"n{i}", cpuMilli=32000, requestedCpuMilli=0) for i in range(6)]
    requested = {n.name: 0 for n in nodes}
    for i, node in enumerate(nodes):
        for g in range(rng.randint(1, 4)):
            allocations, used = [], 0
            for k in range(rng.randint(0, 4)):
                percent = rng.choice((5, 10, 20, 25, 30, 50))
                if used + percent > 100:
                    break
                holder = f"ns/o{i}-{g}-{k}"
                pods[holder] = PodRequests(cpuMilli=rng.choice((1000, 2000, 4000)))
                requested[node.name] += pods[holder].cpuMilli
                allocations.append(share(holder, percent))
                used += percent
            product = T4 if rng.random() < 0.7 else A10
            devices.append(card(node.name, *allocations, name=f"gpu-{g}", product=product))
    nodes = [n.model_copy(update={"requestedCpuMilli": min(requested[n.name], 32000)}) for n in nodes]
    snapshot = cluster(*devices, nodes=nodes)
    pinned = {h for h in pods if rng.random() < 0.1}
    found = propose_repack(snapshot, lambda holder: holder not in pinned, pods)

    by_key = {d.key: d for d in snapshot.devices}
    holding = {d.key: {a.holder: a for a in d.allocations} for d in snapshot.devices}
    cpu = {n.name: n.requestedCpuMilli for n in nodes}
    assert len({m.holder for m in found.moves}) == len(found.moves)
    for move in found.moves:
        assert move.holder not in pinned
        allocation = holding[move.source][move.holder]
        holding[move.target][move.holder] = allocation
        source, target = by_key[move.source], by_key[move.target]
        assert source.productName == target.productName
        assert snapshot_held(by_key[move.target])  # onto a card in use
        if source.node != target.node:
            cpu[target.node] += pods[move.holder].cpuMilli
    for key, held in holding.items():
        assert sum(a.sharePercent for a in held.values()) <= 100, key
        assert sum(a.memoryMiB or 0 for a in held.values()) <= 16 * 1024, key
    assert all(cpu[n.name] <= max(32000, n.requestedCpuMilli) for n in nodes if cpu[n.name] > n.requestedCpuMilli)
    moved_off = {m.source for m in found.moves}
    for key in found.freed:
        assert key in moved_off
        assert {a.holder for a in by_key[key].allocations} == {m.holder for m in found.moves if m.source == key}
        assert key not in {m.target for m in found.moves}
    assert set(found.freed) == moved_off


def snapshot_held(device: Device) -> bool:
    return bool(device.allocations)
