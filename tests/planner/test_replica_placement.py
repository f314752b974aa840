"""Where the replica placer puts one replica of an autoscaled order (activities.replica_placement): pure."""

from __future__ import annotations

from typing import Any

import pytest

from activities.replica_placement import (
    NoPlace,
    ReplicaPlacement,
    UnreadableClaimError,
    allocation_status,
    consumed,
    memory_of,
    place_replica,
    replica_request,
)
from planner.inventory import (
    CapacityRange,
    CapacityRequestPolicy,
    Device,
    DeviceAllocation,
    DeviceClass,
    InventorySnapshot,
    Node,
    Taint,
)
from tests.planner.helpers import cel, device

D = "gpu.deckhouse.io"
CLASS = "t4"
HOLDER = "ns/llm"
MEMORY_POLICY = CapacityRequestPolicy(default="16Gi", validRange=CapacityRange(min="1Gi", step="1Mi"))
SHARE_POLICY = CapacityRequestPolicy(default="0", validRange=CapacityRange(min="0", step="1"))


def t4(name: str, node: str, *held: DeviceAllocation, shareable: bool = True) -> Device:
    d = device(name, node, "Tesla T4", "turing", 16, shareable=shareable, allocations=held)
    capacity: dict[str, str | int] = {f"{D}/memory": "16Gi", f"{D}/sharePercent": 100} if shareable else {}
    policies = {f"{D}/memory": MEMORY_POLICY, f"{D}/sharePercent": SHARE_POLICY} if shareable else {}
    return d.model_copy(
        update={
            "attributes": {**d.attributes, "uuid": f"GPU-{node}-{name}"},
            "capacity": capacity,
            "capacityPolicies": policies,
        }
    )


def share(holder: str, mib: int) -> DeviceAllocation:
    return DeviceAllocation(holder=holder, sharePercent=0, memoryMiB=mib)


def snapshot(*devices: Device, nodes: list[Node] | None = None) -> InventorySnapshot:
    names = sorted({d.node for d in devices})
    return InventorySnapshot(
        devices=list(devices),
        deviceClasses=[DeviceClass(name=CLASS, selectors=[cel(productName="Tesla T4")])],
        nodes=nodes if nodes is not None else [Node(name=n, cpuMilli=64000, memoryMiB=262144) for n in names],
    )


def steered_claim(planned: list[str], memory: str | None = "4Gi") -> dict[str, Any]:
    """A claim as a steered order's template makes it: ``planned`` (uuid pin), then ``any`` (the kind)."""

    def sub(name: str, selector: str) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": name,
            "deviceClassName": CLASS,
            "allocationMode": "ExactCount",
            "count": 1,
            "selectors": [{"cel": {"expression": selector}}],
        }
        if memory is not None:
            out["capacity"] = {"requests": {f"{D}/memory": memory}}
        return out

    pin = " || ".join(f'device.attributes["{D}"].uuid == "{u}"' for u in planned) or "false"
    kind = f'device.attributes["{D}"].productName == "Tesla T4"'
    return {
        "metadata": {"name": "llm-0-gpu-abcde", "namespace": "ns"},
        "spec": {"devices": {"requests": [{"name": "gpu", "firstAvailable": [sub("planned", pin), sub("any", kind)]}]}},
    }


def pod(cpu: str = "4", memory: str = "16Gi", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "llm-0", "namespace": "ns"},
        "spec": {"containers": [{"name": "engine", "resources": {"requests": {"cpu": cpu, "memory": memory}}}], **spec},
    }


def placed(outcome: ReplicaPlacement | NoPlace) -> tuple[str, tuple[str, ...], str]:
    assert isinstance(outcome, ReplicaPlacement), outcome
    return outcome.node, outcome.devices, outcome.request


def test_the_planned_place_is_taken_when_it_has_room() -> None:
    snap = snapshot(t4("gpu-0", "a"), t4("gpu-1", "a", share("ns/other", 8192)), t4("gpu-0", "b"))
    request = replica_request(steered_claim(["GPU-b-gpu-0"]), pod(), HOLDER, [("b", "gpu-0")])
    assert placed(place_replica(snap, request)) == ("b", ("gpu-0",), "gpu/planned")


def test_a_taken_planned_place_gives_the_tightest_fit_of_the_kind() -> None:
    # The planned card is full (another order's 14 GiB); of the rest, the card already shared is the
    # tightest fit: the empty cards stay whole.
    snap = snapshot(
        t4("gpu-0", "a", share("ns/other", 14 * 1024)),
        t4("gpu-1", "a"),
        t4("gpu-0", "b", share("ns/third", 8 * 1024)),
    )
    request = replica_request(steered_claim(["GPU-a-gpu-0"]), pod(), HOLDER, [("a", "gpu-0")])
    assert placed(place_replica(snap, request)) == ("b", ("gpu-0",), "gpu/any")


def test_another_orders_planned_place_is_never_taken() -> None:
    # The snapshot holds another order's planned place (a reservation: an allocation of that holder)
    # on the only whole card; the replica goes to no card rather than onto it.
    whole = DeviceAllocation(holder="ns/other")
    snap = snapshot(t4("gpu-0", "a", whole, shareable=False))
    claim = steered_claim([], memory=None)
    outcome = place_replica(snap, replica_request(claim, pod(), HOLDER))
    assert isinstance(outcome, NoPlace)
    assert "any (t4): none of 1 device(s) has room for 1 more" in outcome.message


def test_the_orders_own_reservation_is_lent_to_its_replica() -> None:
    # The planned card holds the order's own reservation (its planned place, no claim allocated yet):
    # the replica it was made for takes it; without the loan the card is full.
    snap = snapshot(t4("gpu-0", "a", share(HOLDER, 12 * 1024)), t4("gpu-1", "a"))
    preferred = [("a", "gpu-0")]
    lent = replica_request(steered_claim(["GPU-a-gpu-0"], "12Gi"), pod(), HOLDER, preferred, lend=1)
    assert placed(place_replica(snap, lent)) == ("a", ("gpu-0",), "gpu/planned")
    kept = replica_request(steered_claim(["GPU-a-gpu-0"], "12Gi"), pod(), HOLDER, preferred, lend=0)
    assert placed(place_replica(snap, kept)) == ("a", ("gpu-1",), "gpu/any")


def test_a_node_that_cannot_take_the_pod_is_passed_over() -> None:
    nodes = [
        Node(name="a", cpuMilli=8000, memoryMiB=262144, requestedCpuMilli=6000),
        Node(name="b", cpuMilli=64000, memoryMiB=262144, taints=[Taint(key="gpu", effect="NoSchedule")]),
        Node(name="c", cpuMilli=64000, memoryMiB=262144),
    ]
    snap = snapshot(t4("gpu-0", "a"), t4("gpu-0", "b"), t4("gpu-0", "c"), nodes=nodes)
    request = replica_request(steered_claim(["GPU-a-gpu-0"]), pod(cpu="4"), HOLDER, [("a", "gpu-0")])
    assert placed(place_replica(snap, request)) == ("c", ("gpu-0",), "gpu/any")
    tolerating = pod(cpu="4", tolerations=[{"key": "gpu", "operator": "Exists"}])
    request = replica_request(steered_claim(["GPU-b-gpu-0"]), tolerating, HOLDER, [("b", "gpu-0")])
    assert placed(place_replica(snap, request)) == ("b", ("gpu-0",), "gpu/planned")
    only_a = snapshot(t4("gpu-0", "a"), nodes=nodes[:1])
    outcome = place_replica(only_a, replica_request(steered_claim([]), pod(cpu="4"), HOLDER))
    assert isinstance(outcome, NoPlace)
    assert "1 node(s) with room on the devices cannot take the pod" in outcome.message


def test_no_device_of_the_class_says_so() -> None:
    snap = snapshot(t4("gpu-0", "a")).model_copy(update={"deviceClasses": []})
    outcome = place_replica(snap, replica_request(steered_claim([]), pod(), HOLDER))
    assert isinstance(outcome, NoPlace)
    assert "DeviceClass t4 is not in the cluster" in outcome.message


def test_one_snapshot_gives_one_answer() -> None:
    devices = [t4(f"gpu-{i}", n) for n in ("b", "a", "c") for i in range(3)]
    request = replica_request(steered_claim([]), pod(), HOLDER)
    answers = {placed(place_replica(snapshot(*order), request)) for order in (devices, devices[::-1])}
    assert answers == {("a", ("gpu-0",), "gpu/any")}


def test_the_allocation_is_what_the_dra_allocator_writes() -> None:
    snap = snapshot(t4("gpu-0", "a"), t4("gpu-1", "b", shareable=False))
    request = replica_request(steered_claim(["GPU-a-gpu-0"], "4000Mi"), pod(), HOLDER, [("a", "gpu-0")])
    placement = place_replica(snap, request)
    assert isinstance(placement, ReplicaPlacement)
    status = allocation_status(placement, memory_of(placement, request), ["share-1"])
    (result,) = status["allocation"]["devices"]["results"]
    assert result == {
        "request": "gpu/planned",
        "driver": D,
        "pool": "a",
        "device": "gpu-0",
        "shareID": "share-1",
        # The memory request as the device's policy rounds it (1Mi steps), the share's default.
        "consumedCapacity": {f"{D}/memory": "4000Mi", f"{D}/sharePercent": "0"},
    }
    term = status["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]
    assert term == {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]}
    # A card that cannot be shared: the whole device, no share id, nothing consumed by capacity.
    assert consumed(snap.devices[1], None) == {}


def test_the_memory_request_is_rounded_up_to_the_policy_minimum() -> None:
    assert consumed(t4("gpu-0", "a"), memory_of_text("512Mi")) == {f"{D}/memory": "1024Mi", f"{D}/sharePercent": "0"}


def memory_of_text(text: str) -> Any:
    from planner.quantity import Quantity

    return Quantity.parse(text)


def test_a_claim_of_another_shape_is_refused() -> None:
    claim = steered_claim([])
    claim["spec"]["devices"]["requests"].append({"name": "second", "exactly": {"deviceClassName": CLASS}})
    with pytest.raises(UnreadableClaimError, match="exactly one"):
        replica_request(claim, pod(), HOLDER)
    claim = steered_claim([])
    claim["spec"]["devices"]["requests"][0]["firstAvailable"][0]["allocationMode"] = "All"
    with pytest.raises(UnreadableClaimError, match="exact count"):
        replica_request(claim, pod(), HOLDER)


def test_the_pod_demand_counts_every_container() -> None:
    body = pod(cpu="4", memory="16Gi")
    body["spec"]["containers"].append({"name": "front", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}})
    request = replica_request(steered_claim([]), body, HOLDER)
    assert (request.pod.cpuMilli, request.pod.memoryMiB) == (4100, 16 * 1024 + 128)
