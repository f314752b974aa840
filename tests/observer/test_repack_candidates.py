"""Which serving orders the observer's repack asks to move (worker/observer/repack.py)."""

from __future__ import annotations

from typing import Any

import pytest

from inference_api.types import InferenceServiceClass
from planner.inventory import Device, DeviceAllocation, InventorySnapshot
from planner.moves import Move
from tests import factories as f
from tests.planner.helpers import device
from worker.observer.repack import (
    consolidating_moves,
    parsed_classes,
    repack_candidates,
    stranded,
)

SHARED = {"allowedSharingModes": ["Shared"], "allowedPlacementTypes": ["WholeDevice"], "minSharePercent": 25}


def a_class(**spec: Any) -> InferenceServiceClass:
    return f.service_class(**({"acceleratorPolicy": SHARED, "updatePolicy": {"strategy": "RollingUpdate"}} | spec))


def order(
    name: str = "o",
    *,
    share: int = 100,
    phase: str = "Ready",
    ready: str = "True",
    workload_reason: str = "WorkloadApplied",
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-06T00:00:00Z"
    return {
        "metadata": meta,
        "spec": {"inferenceServiceClassName": "a-class"},
        "status": {
            "phase": phase,
            "resolved": {"sharePercent": share},
            "conditions": [
                {"type": "Ready", "status": ready, "reason": "ProbeSucceeded"},
                {"type": "WorkloadReady", "status": "True", "reason": workload_reason},
            ],
        },
    }


def test_a_serving_order_on_a_whole_device_under_a_class_that_could_share_is_a_candidate() -> None:
    assert stranded(order(), a_class())


@pytest.mark.parametrize(
    ("the_order", "why"),
    [
        (order(share=25), "already on a share"),
        (order(phase="Pending", ready="False"), "not serving"),
        (order(ready="False"), "not Ready"),
        (order(deleting=True), "being deleted"),
        (order(workload_reason="WorkloadMoving"), "already moving"),
    ],
)
def test_orders_that_could_not_move_now_are_not_asked(the_order: dict[str, Any], why: str) -> None:
    assert not stranded(the_order, a_class()), why


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ({"acceleratorPolicy": None}, "no acceleratorPolicy: a whole dedicated device"),
        ({"acceleratorPolicy": SHARED | {"allowedSharingModes": ["Dedicated"]}}, "Dedicated only"),
        ({"acceleratorPolicy": SHARED | {"minSharePercent": 100}}, "a floor of a whole device"),
        ({"updatePolicy": {"strategy": "RollingUpdate", "moves": "Never"}}, "moves: Never"),
        ({"updatePolicy": {"strategy": "OnDelete"}}, "OnDelete"),
        ({"scalingPolicy": {"minReplicas": 1, "maxReplicas": 3}}, "autoscaled: the HPA owns replicas"),
    ],
)
def test_classes_that_forbid_or_cannot_give_a_smaller_place_are_not_asked(spec: dict[str, Any], why: str) -> None:
    assert not stranded(order(), a_class(**spec)), why


def test_an_order_whose_class_is_gone_is_not_asked() -> None:
    assert not stranded(order(), None)


def test_a_pass_asks_at_most_its_limit_in_a_stable_order() -> None:
    classes = parsed_classes([a_class().model_dump(mode="json", exclude_none=True)])
    orders = [order("c"), order("a", share=50), order("b"), order("d")]
    picked = repack_candidates(orders, classes, limit=2)
    assert [o["metadata"]["name"] for o in picked] == ["b", "c"]


def test_a_class_that_does_not_parse_is_left_out() -> None:
    assert parsed_classes([{"metadata": {"name": "broken"}, "spec": {"modelPolicy": 3}}]) == {}


# ------------------------------------------------------------------ consolidating moves


def t4(node: str, *holders: tuple[str, int]) -> Device:
    """A shareable T4 of ``node`` holding (holder, percent) shares."""
    return device(
        "gpu-0",
        node,
        "Tesla T4",
        "turing",
        16,
        shareable=True,
        allocations=[DeviceAllocation(holder=h, sharePercent=p, memoryMiB=16 * 1024 * p // 100) for h, p in holders],
    )


def test_a_share_alone_on_its_card_is_asked_onto_a_card_in_use_and_its_card_comes_free() -> None:
    snapshot = InventorySnapshot(devices=[t4("a", ("ns/x", 25)), t4("b", ("ns/y", 50)), t4("c")])
    orders = [order("x", share=25), order("y", share=50)]
    moves, freed = consolidating_moves(snapshot, orders, {"a-class": a_class()}, limit=4)
    assert moves == (Move("ns/x", "a/gpu-0", "b/gpu-0"),)
    assert freed == ("a/gpu-0",)


@pytest.mark.parametrize(
    ("the_order", "why"),
    [
        (order("x", share=100), "a whole device: the smaller-place move's, not a consolidation"),
        (order("x", share=25, ready="False"), "not Ready"),
        (order("x", share=25, deleting=True), "being deleted"),
        (order("x", share=25, workload_reason="WorkloadMoving"), "already moving"),
    ],
)
def test_orders_that_may_not_move_now_are_not_consolidated(the_order: dict[str, Any], why: str) -> None:
    snapshot = InventorySnapshot(devices=[t4("a", ("ns/x", 25)), t4("b", ("ns/y", 50))])
    moves, _ = consolidating_moves(snapshot, [the_order, order("y", share=50)], {"a-class": a_class()}, limit=4)
    # y's card holds 50 and x's 25: only y could move (onto a), and does when x may not move.
    assert [m.holder for m in moves] == ["ns/y"], why


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ({"updatePolicy": {"strategy": "RollingUpdate", "moves": "Never"}}, "moves: Never"),
        ({"updatePolicy": {"strategy": "OnDelete"}}, "OnDelete"),
        ({"scalingPolicy": {"minReplicas": 1, "maxReplicas": 3}}, "autoscaled: the HPA owns replicas"),
    ],
)
def test_classes_whose_update_policy_forbids_the_move_are_not_consolidated(spec: dict[str, Any], why: str) -> None:
    snapshot = InventorySnapshot(devices=[t4("a", ("ns/x", 25)), t4("b", ("ns/y", 50))])
    moves, freed = consolidating_moves(
        snapshot, [order("x", share=25), order("y", share=50)], {"a-class": a_class(**spec)}, 4
    )
    assert (moves, freed) == ((), ()), why


def test_a_holder_that_is_no_order_of_the_observer_never_moves() -> None:
    # ns/tenant holds a claim of its own (no order): its card is never emptied, and it moves nowhere.
    snapshot = InventorySnapshot(devices=[t4("a", ("ns/tenant", 10)), t4("b", ("ns/y", 50))])
    moves, freed = consolidating_moves(snapshot, [order("y", share=50)], {"a-class": a_class()}, limit=4)
    assert moves == (Move("ns/y", "b/gpu-0", "a/gpu-0"),)
    assert freed == ("b/gpu-0",)


def test_the_moves_of_a_pass_are_bounded() -> None:
    cards = [t4(f"n{i}", (f"ns/o{i}", 10)) for i in range(6)] + [t4("full", ("ns/big", 50))]
    orders = [order(f"o{i}", share=10) for i in range(6)]
    moves, freed = consolidating_moves(InventorySnapshot(devices=cards), orders, {"a-class": a_class()}, limit=2)
    assert len(moves) == 2
    assert len(freed) == 2
    # A freed card never receives a share in the same pass: each move can be made before it breaks.
    assert not {m.target for m in moves} & set(freed)
    assert {m.source for m in moves} == set(freed)
