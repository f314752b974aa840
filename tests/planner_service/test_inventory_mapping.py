"""build_snapshot: API objects (plain dicts, as the server returns them) → the planner's snapshot."""

from __future__ import annotations

import json
from typing import Any

from activities.builders.common import LABEL_ORDER
from activities.inventory import build_nodes, build_snapshot, claim_holder, claim_key, order_pod_names, pod_requests
from devstack.cluster.inventory import (
    device_class_object,
    load_inventory,
    physical_gpu_object,
    resource_slice_object,
)
from inference_api.types import PlacementType
from planner.cel_selectors import select_devices
from planner.inventory import DeviceAllocation, DeviceClass
from worker.observer.informer import Resource, Watched
from worker.observer.inventory import InventoryInformers, slim_pod

D = "gpu.deckhouse.io"
ORDER_LABEL = "ai.deckhouse.io/inference-service"


def sim_objects() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    inv = load_inventory()
    classes = [device_class_object(c) for c in inv.device_classes]
    slices = [resource_slice_object(n) for n in inv.nodes if n.devices]
    gpus = [physical_gpu_object(g) for g in inv.physical_gpus]
    return classes, slices, gpus


def claim(
    name: str,
    namespace: str,
    results: list[dict[str, Any]],
    labels: dict[str, str] | None = None,
    owner_pod: str | None = None,
    reserved_for: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    if owner_pod:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": owner_pod, "uid": "u"}]
    status: dict[str, Any] = {"allocation": {"devices": {"results": results}}}
    if reserved_for:
        status["reservedFor"] = [{"resource": "pods", "name": reserved_for, "uid": "u"}]
    return {"metadata": meta, "status": status}


def result(pool: str, device: str, **consumed: str) -> dict[str, Any]:
    out: dict[str, Any] = {"request": "gpu", "driver": D, "pool": pool, "device": device}
    if consumed:
        out["consumedCapacity"] = {f"{D}/{k}": v for k, v in consumed.items()}
    return out


def test_the_simulated_inventory_maps_to_devices_the_selectors_judge_like_the_twin() -> None:
    inv = load_inventory()
    classes, slices, gpus = sim_objects()
    snap = build_snapshot(classes, slices, [], gpus, {})
    assert {(d.node, d.name) for d in snap.devices} == {(d.node, d.name) for d in inv.devices}
    by_key = {(d.node, d.name): d for d in snap.devices}
    for sim in inv.devices:
        d = by_key[(sim.node, sim.name)]
        assert d.productName == sim.product_name
        assert d.hardwareFamily == sim.hardware_family
        assert d.memoryMiB == sim.memory_gib * 1024
        assert d.placement == PlacementType(sim.placement)
        assert d.migProfile == sim.mig_profile
        assert d.allowMultipleAllocations == sim.shareable
        assert d.pool == sim.node
        assert d.attributes == sim.attributes  # every published attribute, for the selectors
        assert d.capacity[f"{D}/memory"] == f"{sim.memory_gib}Gi"
        assert d.allocations == []
    assert [c.name for c in snap.deviceClasses] == sorted(c.name for c in inv.device_classes)
    for dc in snap.deviceClasses:
        chosen = select_devices(dc, snap.devices)
        assert chosen.decidable, chosen.error
        assert {(d.node, d.name) for d in chosen.devices} == {(d.node, d.name) for d in inv.devices_of_class(dc.name)}


def test_allocations_consumed_capacity_and_holders() -> None:
    classes, slices, gpus = sim_objects()
    claims = [
        # Made from the order's template: the claim carries the order label.
        claim(
            "llm-a-claim-x",
            "team",
            [result("gpu-h100-0", "gpu-0", memory="24Gi", sharePercent="0")],
            labels={ORDER_LABEL: "llm-a"},
        ),
        # No label on the claim, and no pod was given it: its owner pod names nobody (anyone may
        # write a claim's ownerReferences); the pod it is reserved for does.
        claim(
            "pod-b-gpu-y",
            "team",
            [result("gpu-h100-0", "gpu-0", memory="30Gi", sharePercent="40")],
            owner_pod="llm-b-0",
            reserved_for="llm-b-0",
        ),
        # A claim nobody labels: itself.
        claim("plain", "other", [result("gpu-h100-0", "gpu-4")], reserved_for="somepod"),
        # Shared device, nothing recorded: all of it.
        claim("legacy", "other", [result("gpu-t4-0", "gpu-1")]),
        # Admin access observes without taking; another driver's device is not ours.
        claim("observer", "other", [{**result("gpu-t4-0", "gpu-2"), "adminAccess": True}]),
        claim("nic", "other", [{**result("gpu-t4-0", "gpu-3"), "driver": "nic.example.com"}]),
    ]
    given = {claim_key("team", "llm-a-claim-x"): "llm-a", ("team", "llm-b-0"): "llm-b"}
    snap = build_snapshot(classes, slices, claims, gpus, given)
    by_key = {d.key: d for d in snap.devices}
    assert by_key["gpu-h100-0/gpu-0"].allocations == [
        DeviceAllocation(holder="team/llm-a", sharePercent=0, memoryMiB=24 * 1024),
        DeviceAllocation(holder="team/llm-b", sharePercent=40, memoryMiB=30 * 1024),
    ]
    assert by_key["gpu-h100-0/gpu-4"].allocations == [DeviceAllocation(holder="other/plain")]
    assert by_key["gpu-t4-0/gpu-1"].allocations == [DeviceAllocation(holder="other/legacy")]
    assert by_key["gpu-t4-0/gpu-2"].allocations == []
    assert by_key["gpu-t4-0/gpu-3"].allocations == []


def test_claim_holder_is_the_order_that_was_given_it_then_the_one_it_is_reserved_for_then_the_claim() -> None:
    c = claim("c", "ns", [], owner_pod="p1", reserved_for="p2")
    assert claim_holder(c, {}) == "ns/c"
    assert claim_holder(c, {("ns", "p2"): "order-2"}) == "ns/order-2"
    # Its owner reference alone names nobody: a tenant may write it.
    assert claim_holder(c, {("ns", "p1"): "order-1"}) == "ns/c"
    assert claim_holder(c, {claim_key("ns", "c"): "order-1", ("ns", "p2"): "order-2"}) == "ns/order-1"
    assert claim_holder(c, {claim_key("elsewhere", "c"): "order-1"}) == "ns/c"
    # Before, a claim's own order label was believed: a tenant's claim booked against an order.
    labelled = claim("c", "ns", [], labels={ORDER_LABEL: "mine"}, owner_pod="p1")
    assert claim_holder(labelled, {("ns", "p1"): "order-1"}) == "ns/c"


def test_the_claims_an_orders_pod_was_given_are_the_orders() -> None:
    order_ref = {"apiVersion": "ai.deckhouse.io/v1alpha1", "kind": "InferenceService", "name": "llm", "uid": "o1"}
    controller = [{**order_ref, "controller": True}]
    sts = {"metadata": {"name": "llm", "namespace": "ns", "uid": "sts-1", "ownerReferences": controller}}
    given = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "llm-0-gpu-x1"}]}
    pod: dict[str, Any] = {
        "metadata": {
            "name": "llm-0",
            "namespace": "ns",
            "labels": {ORDER_LABEL: "llm"},
            "ownerReferences": [{"kind": "StatefulSet", "name": "llm", "uid": "sts-1", "controller": True}],
        },
        "status": given,
    }
    tenants: dict[str, Any] = {**pod, "metadata": {**pod["metadata"], "name": "mine-0", "ownerReferences": []}}
    tenants["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "forged"}]}
    assert order_pod_names([pod, tenants], [sts]) == {("ns", "llm-0"): "llm", claim_key("ns", "llm-0-gpu-x1"): "llm"}


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    _, slices, _ = sim_objects()
    (t4,) = [s for s in slices if s["spec"]["nodeName"] == "gpu-t4-0"]
    old = {**t4, "metadata": {"name": "old"}, "spec": {**t4["spec"], "devices": [{"name": "gone"}]}}
    new = {**t4, "spec": {**t4["spec"], "pool": {**t4["spec"]["pool"], "generation": 2}}}
    snap = build_snapshot([], [old, new], [], [], {})
    assert sorted(d.name for d in snap.devices) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]


def test_physical_gpus_fill_what_a_slice_leaves_out_and_name_a_partitions_parent() -> None:
    slice_ = {
        "metadata": {"name": "n1-gpu"},
        "spec": {
            "driver": D,
            "nodeName": "n1",
            "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": "gpu-0", "attributes": {"index": {"int": 0}, "version": {"version": "1.2.3"}}},
                {
                    "name": "gpu-0-mig-0",
                    "attributes": {"physicalGPU": {"string": "n1-gpu-0"}, "migProfile": {"string": "3g.40gb"}},
                    "capacity": {"memory": {"value": "40Gi"}},
                },
            ],
        },
    }
    gpu = {
        "metadata": {"name": "n1-gpu-0"},
        "status": {
            "nodeName": "n1",
            "index": 0,
            "productName": "NVIDIA H100 80GB HBM3",
            "memoryMiB": 81920,
            "hardwareFamily": "hopper",
        },
    }
    snap = build_snapshot([], [slice_], [], [gpu], {})
    whole, part = snap.devices
    assert (whole.productName, whole.hardwareFamily, whole.memoryMiB) == ("NVIDIA H100 80GB HBM3", "hopper", 81920)
    assert whole.placement == PlacementType.WHOLE_DEVICE
    assert whole.parentDevice is None
    assert whole.attributes["version"] == "1.2.3"
    assert part.placement == PlacementType.PARTITION
    assert part.migProfile == "3g.40gb"
    assert part.memoryMiB == 40 * 1024  # the partition's own capacity, not the card's
    assert part.productName == "NVIDIA H100 80GB HBM3"
    assert part.parentDevice == "gpu-0"


def test_device_class_selectors_are_the_cel_expressions() -> None:
    obj = {
        "metadata": {"name": "x"},
        "spec": {"selectors": [{"cel": {"expression": "true"}}, {"cel": {"expression": "device.driver == 'a'"}}]},
    }
    snap = build_snapshot([obj], [], [], [], {})
    assert snap.deviceClasses == [DeviceClass(name="x", selectors=["true", "device.driver == 'a'"])]


def test_a_pod_status_change_rebuilds_nothing() -> None:
    """What the planner reads of a pod or a node did not change: the snapshot is not rebuilt."""
    informers = InventoryInformers([Resource("Pod", lambda **_: None), Resource("Node", lambda **_: None)])
    assert informers.judge_nodes
    for kind in informers.informers:
        informers.informers[kind].synced = True
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "n", "uid": "u", "resourceVersion": "1"},
        "spec": {"nodeName": "a", "containers": [{"resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": "Pending"},
    }
    informers.deliver(Watched("Pod", "ADDED", pod))
    version = informers.version
    running: dict[str, Any] = {
        **pod,
        "metadata": {**pod["metadata"], "resourceVersion": "2"},
        "status": {"phase": "Running"},
    }
    informers.deliver(Watched("Pod", "MODIFIED", {**running, "status": {"phase": "Pending", "podIP": "10.0.0.1"}}))
    assert informers.version == version
    informers.deliver(
        Watched("Pod", "MODIFIED", {**running, "metadata": {**running["metadata"], "resourceVersion": "3"}})
    )
    assert informers.version == version + 1  # the phase is read (a finished pod holds nothing)
    informers.deliver(Watched("Pod", "DELETED", running))
    assert informers.version == version + 2
    node: dict[str, Any] = {
        "metadata": {"name": "a", "uid": "n", "resourceVersion": "1"},
        "status": {
            "allocatable": {"cpu": "4"},
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "t1"}],
        },
    }
    informers.deliver(Watched("Node", "ADDED", node))
    version = informers.version
    heartbeat = {
        **node,
        "metadata": {**node["metadata"], "resourceVersion": "2"},
        "status": {**node["status"], "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "t2"}]},
    }
    informers.deliver(Watched("Node", "MODIFIED", heartbeat))
    assert informers.version == version
    (built,) = informers.snapshot().nodes or []
    assert (built.name, built.cpuMilli, built.requestedCpuMilli) == ("a", 4000, 0)


def test_a_slim_pod_keeps_what_the_nodes_are_judged_by() -> None:
    pod: dict[str, Any] = {
        "metadata": {
            "name": "p",
            "namespace": "n",
            "uid": "u",
            "resourceVersion": "7",
            "labels": {"app": "x"},
            "annotations": {"big": "x" * 1000},
        },
        "spec": {
            "nodeName": "a",
            "overhead": {"cpu": "250m"},
            "containers": [
                {
                    "name": "c",
                    "image": "i",
                    "env": [{"name": "E", "value": "v"}],
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2"}},
                }
            ],
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "3"}}}],
        },
        "status": {"phase": "Running", "podIP": "10.0.0.1"},
    }
    slim = slim_pod(pod)
    assert build_nodes([], [slim]) == build_nodes([], [pod])
    assert pod_requests(slim["spec"]) == pod_requests(pod["spec"]) == (3250, 1024)
    assert "annotations" not in slim["metadata"]
    assert "env" not in str(slim)
    assert slim_pod({**pod, "metadata": {**pod["metadata"], "labels": {LABEL_ORDER: "o"}}})["metadata"]["labels"] == {
        LABEL_ORDER: "o"
    }


def _template(placements: list[dict[str, Any]], memory: str | None = "4Gi", order: str = "llm") -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": "h100", "count": 1}
    if memory is not None:
        exactly["capacity"] = {"requests": {"gpu.deckhouse.io/memory": memory}}
    return {
        "metadata": {
            "name": f"{order}-claim",
            "namespace": "ns",
            "labels": {LABEL_ORDER: order},
            "annotations": {"ai.deckhouse.io/planned-placements": json.dumps(placements)},
            # The order's own template: its controller is the order (what the worker's apply writes).
            "ownerReferences": [
                {
                    "apiVersion": "ai.deckhouse.io/v1alpha1",
                    "kind": "InferenceService",
                    "name": order,
                    "uid": f"uid-{order}",
                    "controller": True,
                }
            ],
        },
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }


def test_a_forged_template_reserves_nothing() -> None:
    """A template labelled as an order's with planned placements, but not the order's own (no controller
    reference to it, another name, another order's reference): the label is not believed."""
    from activities.inventory import planned_reservations
    from planner.inventory import Device
    from worker.observer.inventory import with_reservations

    cards = [Device(name=f"gpu-{i}", node="n", memoryMiB=81920) for i in range(8)]
    placements = [{"node": "n", "devices": [f"gpu-{i}" for i in range(8)]}]
    mine = _template(placements)
    no_owner = {**mine, "metadata": {k: v for k, v in mine["metadata"].items() if k != "ownerReferences"}}
    renamed = {**mine, "metadata": {**mine["metadata"], "name": "grab-everything"}}
    other_order = _template(placements, order="other")
    other_order["metadata"]["labels"] = {LABEL_ORDER: "llm"}
    not_controller = {
        **mine,
        "metadata": {
            **mine["metadata"],
            "ownerReferences": [{**mine["metadata"]["ownerReferences"][0], "controller": False}],
        },
    }
    assert len(planned_reservations([mine], cards)) == 8
    for forged in (no_owner, renamed, other_order, not_controller):
        assert planned_reservations([forged], cards) == []
        assert with_reservations([], [forged]) == []


def test_a_pinned_orders_template_reserves_the_placements_no_claim_holds_yet() -> None:
    from activities.inventory import planned_reservations
    from planner.inventory import Device

    shared = [Device(name=f"gpu-{i}", node="n", memoryMiB=81920, allowMultipleAllocations=True) for i in range(2)]
    whole = Device(name="gpu-2", node="n", memoryMiB=81920)
    placements = [{"node": "n", "devices": ["gpu-0"]}, {"node": "n", "devices": ["gpu-1"]}]
    found = planned_reservations([_template(placements)], [*shared, whole])
    assert [(r.key, r.allocation) for r in found] == [
        ("n/gpu-0", DeviceAllocation(holder="ns/llm", sharePercent=0, memoryMiB=4096, reserved=True)),
        ("n/gpu-1", DeviceAllocation(holder="ns/llm", sharePercent=0, memoryMiB=4096, reserved=True)),
    ]
    # One replica allocated where planned: the other placement alone is reserved.
    held = shared[0].model_copy(
        update={"allocations": [DeviceAllocation(holder="ns/llm", sharePercent=0, memoryMiB=4096)]}
    )
    assert [r.key for r in planned_reservations([_template(placements)], [held, shared[1]])] == ["n/gpu-1"]
    # Both replicas stacked on gpu-0 (the allocator may): nothing more is reserved.
    stacked = held.model_copy(update={"allocations": held.allocations * 2})
    assert planned_reservations([_template(placements)], [stacked, shared[1]]) == []
    # A whole device is held whole; a template without the annotation reserves nothing.
    (one,) = planned_reservations([_template([{"node": "n", "devices": ["gpu-2"]}], memory=None)], [whole])
    assert one.allocation == DeviceAllocation(holder="ns/llm", reserved=True)
    bare = _template(placements)
    bare["metadata"]["annotations"] = {}
    assert planned_reservations([bare], shared) == []


def test_the_snapshot_holds_what_a_pinned_template_reserves() -> None:
    from planner.bookings import Booking, OrderClaim, outstanding
    from worker.observer.inventory import with_reservations

    placements = [{"node": "n", "devices": ["gpu-0"]}, {"node": "n", "devices": ["gpu-0"]}]
    pending = OrderClaim(holder="ns/llm", name="llm-0-gpu", deviceClass="h100", memoryMiB=4096)
    other = OrderClaim(holder="ns/other", name="other-0-gpu", deviceClass="h100", memoryMiB=4096)
    counted = with_reservations([pending, other], [_template(placements)])
    # The order's pending claim is the reservation's already; the other order's is still pending.
    assert [c for c in counted if not c.allocated] == [other]
    booking = Booking(
        holder="ns/llm", deviceClass="h100", deviceCount=1, sharePercent=5, memoryMiB=4096, replicas=2, bookedAt=0
    )
    assert outstanding(booking, counted) == 0  # settled: the snapshot holds both placements


def test_the_published_share_policy_is_read_with_each_capacity() -> None:
    from planner.inventory import CapacityRange, CapacityRequestPolicy

    classes, slices, gpus = sim_objects()
    snapshot = build_snapshot(classes, slices, [], gpus, {})
    shared = next(
        d for d in snapshot.devices if d.allowMultipleAllocations and d.placement == PlacementType.WHOLE_DEVICE
    )
    # dev/devstack/cluster/inventory.py publishes memory {default: whole, validRange {min 1Gi, step 1Mi}}.
    memory = shared.capacity_policy("memory")
    assert shared.memoryMiB is not None
    assert memory == CapacityRequestPolicy(
        default=f"{shared.memoryMiB // 1024}Gi", validRange=CapacityRange(min="1Gi", step="1Mi")
    )
    assert shared.capacity_policy("sharePercent") == CapacityRequestPolicy(
        default="0", validRange=CapacityRange(min="0", step="1")
    )
    dedicated = next(d for d in snapshot.devices if not d.allowMultipleAllocations)
    assert dedicated.capacityPolicies == {}
    # validValues too; a policy the planner cannot read is left out, not fatal.
    entry = slices[0]["spec"]["devices"][0]
    entry["capacity"] = {
        f"{D}/memory": {"value": "80Gi", "requestPolicy": {"default": "80Gi", "validValues": ["40Gi", "80Gi"]}},
        f"{D}/other": {"value": "1", "requestPolicy": {"default": "not a quantity"}},
    }
    again = build_snapshot(classes, slices, [], gpus, {})
    first = next(d for d in again.devices if d.name == entry["name"] and d.node == slices[0]["spec"]["nodeName"])
    assert first.capacity_policy("memory") == CapacityRequestPolicy(default="80Gi", validValues=("40Gi", "80Gi"))
    assert first.capacity_policy("other") is None


def _steered_template(placements: list[dict[str, Any]], memory: str = "4Gi") -> dict[str, Any]:
    template = _template(placements, memory)
    exactly = template["spec"]["spec"]["devices"]["requests"][0].pop("exactly")
    template["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"] = [
        {"name": "planned", **exactly, "selectors": [{"cel": {"expression": "true"}}]},
        {"name": "any", **exactly},
    ]
    return template


def test_a_steered_orders_planned_replica_is_reserved_until_a_claim_of_the_order_is_allocated_anywhere() -> None:
    from activities.inventory import planned_reservations
    from planner.inventory import CapacityRange, CapacityRequestPolicy, Device

    values = CapacityRequestPolicy(default="80Gi", validValues=("10Gi", "40Gi", "80Gi"))
    share = CapacityRequestPolicy(default="0", validRange=CapacityRange(min="0", step="1"))
    cards = [
        Device(
            name=f"gpu-{i}",
            node="n",
            memoryMiB=81920,
            allowMultipleAllocations=True,
            capacity={f"{D}/memory": "80Gi", f"{D}/sharePercent": "100"},
            capacityPolicies={f"{D}/memory": values, f"{D}/sharePercent": share},
        )
        for i in range(2)
    ]
    planned = [{"node": "n", "devices": ["gpu-0"]}]
    # The reservation holds what the allocator would consume: 4 GiB rounded up to 10 GiB, share default 0.
    (one,) = planned_reservations([_steered_template(planned)], cards)
    assert (one.key, one.allocation) == (
        "n/gpu-0",
        DeviceAllocation(holder="ns/llm", sharePercent=0, memoryMiB=10240, reserved=True),
    )
    # The allocator chose the "any" subrequest (gpu-1): the planned place is given back.
    elsewhere = cards[1].model_copy(
        update={"allocations": [DeviceAllocation(holder="ns/llm", sharePercent=0, memoryMiB=10240)]}
    )
    assert planned_reservations([_steered_template(planned)], [cards[0], elsewhere]) == []


def test_a_steered_orders_booking_settles_when_its_template_is_seen() -> None:
    from planner.bookings import Booking, outstanding
    from worker.observer.inventory import with_reservations

    counted = with_reservations([], [_steered_template([{"node": "n", "devices": ["gpu-0"]}])])
    booking = Booking(
        holder="ns/llm", deviceClass="h100", deviceCount=1, sharePercent=5, memoryMiB=4096, replicas=1, bookedAt=0
    )
    assert outstanding(booking, counted) == 0  # the template's reservation holds the planned replica


def test_a_slim_node_keeps_its_readiness_and_drops_its_heartbeats() -> None:
    """The planner service's informer keeps Nodes slim: what the planner judges (Ready included) and
    nothing that changes on every heartbeat."""
    from worker.observer.inventory import slim_node

    def node(ready: str, beat: str) -> dict[str, Any]:
        return {
            "metadata": {"name": "gpu-1", "resourceVersion": beat, "labels": {"pool": "gpu"}},
            "spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]},
            "status": {
                "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                "conditions": [
                    {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": beat},
                    {"type": "Ready", "status": ready, "lastHeartbeatTime": beat, "message": "kubelet stopped"},
                ],
            },
        }

    lost, again = slim_node(node("Unknown", "t1")), slim_node(node("Unknown", "t2"))
    assert build_nodes([lost], []) == build_nodes([node("Unknown", "t1")], [])
    assert not build_nodes([lost], [])[0].ready
    assert build_nodes([slim_node(node("True", "t3"))], [])[0].ready
    # A heartbeat changes nothing but the resourceVersion.
    assert {**lost, "metadata": {}} == {**again, "metadata": {}}


def test_a_pod_is_an_orders_only_through_its_statefulset() -> None:
    """A pod labelled as an order's is counted as the order's only when its controller is the order's
    StatefulSet and that StatefulSet's controller is the order (a tenant's labelled pod is no one's)."""
    from activities.inventory import order_pod_names

    order_ref = {"apiVersion": "ai.deckhouse.io/v1alpha1", "kind": "InferenceService", "name": "llm", "uid": "o1"}
    sts = {
        "metadata": {
            "name": "llm",
            "namespace": "ns",
            "uid": "s1",
            "ownerReferences": [{**order_ref, "controller": True}],
        }
    }
    sts_ref = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "llm", "uid": "s1", "controller": True}

    def pod(name: str, *refs: dict[str, Any]) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "namespace": "ns", "labels": {LABEL_ORDER: "llm"}, "ownerReferences": list(refs)}
        }

    pods = [pod("llm-0", sts_ref), pod("forged"), pod("forged-sts", {**sts_ref, "uid": "made-up"})]
    assert order_pod_names(pods, [sts]) == {("ns", "llm-0"): "llm"}
    assert order_pod_names(pods) == {}
