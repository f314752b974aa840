"""The plan is what the cluster does: an order whose every replica the plan placed is pinned to the
planned nodes and devices."""

from __future__ import annotations

import json
from typing import Any

from activities.builders.claim import (
    ANNOTATION_PLANNED_PLACEMENTS,
    build_claim_template,
    chosen_subrequest,
    claim_template_spec_differs,
    kind_selector,
    pinned,
    steered,
)
from activities.builders.statefulset import build_statefulset
from inference_api.plan import LaunchPlan, ReplicaPlacement
from planner.inventory import Device
from planner.planning import device_selector
from tests import factories as f

SELECTOR = 'device.attributes["gpu.deckhouse.io"].uuid == "GPU-1"'


def _plan(**update: object) -> LaunchPlan:
    return f.plan(share=30, memory_request_mib=24576).model_copy(
        update={"nodeName": "gpu-h100-0", "deviceNames": ["gpu-1"], "deviceSelector": SELECTOR, **update}
    )


def _exactly(claim: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = claim["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    return found


def test_one_replica_is_pinned_to_the_planned_node_and_devices() -> None:
    one = f.inputs(the_class=f.cluster_local_none(), the_plan=_plan())
    assert pinned(one)
    assert _exactly(build_claim_template(one))["selectors"] == [{"cel": {"expression": SELECTOR}}]
    affinity = build_statefulset(one)["spec"]["template"]["spec"]["affinity"]
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-h100-0"]}]}]


def test_every_planned_replica_is_pinned_to_the_planned_nodes_and_devices() -> None:
    placements = [
        ReplicaPlacement(nodeName="gpu-h100-0", deviceNames=["gpu-1"]),
        ReplicaPlacement(nodeName="gpu-h100-1", deviceNames=["gpu-0"]),
        ReplicaPlacement(nodeName="gpu-h100-0", deviceNames=["gpu-1"]),
    ]
    union = 'device.attributes["gpu.deckhouse.io"].uuid in ["GPU-1", "GPU-2"]'
    fixed = f.service_class(scalingPolicy={"minReplicas": 3, "maxReplicas": 3})
    three = f.inputs(the_class=fixed, the_plan=_plan(replicaPlacements=placements, deviceSelector=union))
    assert pinned(three)
    template = build_claim_template(three)
    assert _exactly(template)["selectors"] == [{"cel": {"expression": union}}]
    recorded = json.loads(template["metadata"]["annotations"][ANNOTATION_PLANNED_PLACEMENTS])
    assert recorded == [{"node": p.nodeName, "devices": p.deviceNames} for p in placements]
    affinity = build_statefulset(three)["spec"]["template"]["spec"]["affinity"]
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-h100-0", "gpu-h100-1"]}]}
    ]
    # A preemption ceiling lowers the replicas: the planned set still covers them, and the places
    # beyond the ceiling are given back (not reserved).
    lowered = f.inputs(the_class=fixed, the_plan=three.plan, replica_ceiling=2)
    assert pinned(lowered)
    kept = json.loads(build_claim_template(lowered)["metadata"]["annotations"][ANNOTATION_PLANNED_PLACEMENTS])
    assert kept == recorded[:2]
    # Fewer placements than replicas: pinning would leave the unplanned replica nowhere to go, so the
    # order is steered: the planned devices first, then any of the same kind.
    short = f.inputs(the_class=fixed, the_plan=_plan(replicaPlacements=placements[:2], deviceSelector=union))
    assert not pinned(short)
    assert steered(short)
    planned, anywhere = _alternatives(build_claim_template(short))
    assert planned["selectors"] == [{"cel": {"expression": union}}]
    assert anywhere["selectors"] != planned["selectors"]
    preferred = build_statefulset(short)["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in preferred
    recorded_short = json.loads(build_claim_template(short)["metadata"]["annotations"][ANNOTATION_PLANNED_PLACEMENTS])
    assert recorded_short == recorded[:2]


def _alternatives(claim: dict[str, Any]) -> list[dict[str, Any]]:
    request = claim["spec"]["spec"]["devices"]["requests"][0]
    assert "exactly" not in request
    assert request["name"] == "gpu"
    subs: list[dict[str, Any]] = request["firstAvailable"]
    return subs


def test_an_autoscaled_order_tries_its_planned_devices_first_then_any_of_the_same_kind() -> None:
    many = f.inputs(the_class=f.service_class(scalingPolicy={"minReplicas": 1, "maxReplicas": 3}), the_plan=_plan())
    assert not pinned(many)
    assert steered(many)
    template = build_claim_template(many)
    planned, anywhere = _alternatives(template)
    # The first replica lands where planned: the pin is the first alternative the allocator tries.
    assert planned == {
        "name": "planned",
        "deviceClassName": many.plan.deviceClass,
        "allocationMode": "ExactCount",
        "count": 1,
        "selectors": [{"cel": {"expression": SELECTOR}}],
        "capacity": {"requests": {"gpu.deckhouse.io/memory": "24576Mi"}},
    }
    # A replica the autoscaler adds has somewhere to go: the class's devices of the same product and
    # placement, with the same count and memory (so the share in status holds wherever it lands).
    assert anywhere["name"] == "any"
    assert {k: v for k, v in anywhere.items() if k not in ("name", "selectors")} == {
        k: v for k, v in planned.items() if k not in ("name", "selectors")
    }
    (kind,) = anywhere["selectors"]
    assert kind == {"cel": {"expression": kind_selector(many.plan)}}
    assert json.dumps(many.plan.acceleratorProductName) in kind["cel"]["expression"]
    # The planned replica is recorded (the inventory reserves it until a claim of the order is allocated).
    recorded = json.loads(template["metadata"]["annotations"][ANNOTATION_PLANNED_PLACEMENTS])
    assert recorded == [{"node": "gpu-h100-0", "devices": ["gpu-1"]}]
    # Its pods prefer the planned node, and may go elsewhere.
    affinity = build_statefulset(many)["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    assert affinity == {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 100,
                "preference": {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-h100-0"]}]},
            }
        ]
    }
    assert chosen_subrequest("gpu/planned") == "planned"
    assert chosen_subrequest("gpu") is None


def test_an_autoscaled_order_without_a_device_selector_is_left_to_the_class() -> None:
    many = f.inputs(
        the_class=f.service_class(scalingPolicy={"minReplicas": 1, "maxReplicas": 3}),
        the_plan=_plan(deviceSelector=None),
    )
    exactly = _exactly(build_claim_template(many))
    assert "selectors" not in exactly
    assert "annotations" not in build_claim_template(many)["metadata"]


def test_a_changed_alternative_replaces_the_immutable_template() -> None:
    autoscaled = f.service_class(scalingPolicy={"minReplicas": 1, "maxReplicas": 3})
    old = build_claim_template(f.inputs(the_class=autoscaled, the_plan=_plan()))
    moved = build_claim_template(
        f.inputs(the_class=autoscaled, the_plan=_plan(deviceSelector=SELECTOR.replace("GPU-1", "GPU-2")))
    )
    assert claim_template_spec_differs(old, moved)
    assert not claim_template_spec_differs(old, old)
    # A template from before (one exact request) differs from the prioritized list.
    pinned_one = build_claim_template(f.inputs(the_class=f.cluster_local_none(), the_plan=_plan()))
    assert claim_template_spec_differs(pinned_one, old)


def test_a_plan_without_a_device_selector_pins_the_node_only() -> None:
    one = f.inputs(the_class=f.cluster_local_none(), the_plan=_plan(deviceSelector=None))
    assert "selectors" not in _exactly(build_claim_template(one))
    assert "affinity" in build_statefulset(one)["spec"]["template"]["spec"]


def test_a_new_device_selector_replaces_the_immutable_template() -> None:
    old = build_claim_template(f.inputs(the_class=f.cluster_local_none(), the_plan=_plan()))
    new = build_claim_template(
        f.inputs(the_class=f.cluster_local_none(), the_plan=_plan(deviceSelector=SELECTOR.replace("GPU-1", "GPU-2")))
    )
    assert claim_template_spec_differs(old, new)
    assert not claim_template_spec_differs(old, old)


def test_the_selector_names_the_devices_by_the_unique_attribute_they_publish() -> None:
    a = Device(name="gpu-0", node="n", attributes={"uuid": "GPU-a"})
    b = Device(name="gpu-1", node="n", attributes={"gpu.deckhouse.io/uuid": "GPU-b"})
    assert device_selector([a]) == 'device.attributes["gpu.deckhouse.io"].uuid == "GPU-a"'
    assert device_selector([a, b]) == 'device.attributes["gpu.deckhouse.io"].uuid in ["GPU-a", "GPU-b"]'
    assert device_selector([a, Device(name="gpu-2", node="n")]) is None


def test_the_kind_selector_picks_devices_of_the_planned_product_placement_and_memory() -> None:
    """Judged by the planner's CEL evaluator (as the allocator judges the expression): other products,
    placement types and partition sizes are not chosen."""
    from inference_api.types import PlacementType
    from planner.cel_selectors import matches
    from planner.inventory import DeviceClass
    from tests.planner.helpers import H100, T4, device

    whole = _plan(placementMode=PlacementType.WHOLE_DEVICE, acceleratorMemoryGiB=80)
    kind = kind_selector(whole)
    assert kind is not None
    cls = DeviceClass(name="kind", selectors=[kind])
    h100 = device("gpu-0", "n", H100, "hopper", 80, shareable=True)
    published = h100.model_copy(update={"attributes": {**h100.attributes, "placement": "WholeDevice", "memoryGiB": 80}})
    assert matches(cls, h100)
    assert matches(cls, published)
    assert not matches(cls, device("gpu-1", "n", T4, "turing", 16, shareable=True))
    part = published.model_copy(update={"attributes": {**published.attributes, "placement": "Partition"}})
    assert not matches(cls, part)
    # A partition plan: partitions of the same size only.
    mig = _plan(placementMode=PlacementType.PARTITION, acceleratorMemoryGiB=40)
    mig_cls = DeviceClass(name="mig", selectors=[kind_selector(mig) or ""])
    forty = part.model_copy(update={"attributes": {**part.attributes, "memoryGiB": 40}})
    ten = part.model_copy(update={"attributes": {**part.attributes, "memoryGiB": 10}})
    assert matches(mig_cls, forty)
    assert not matches(mig_cls, ten)
    assert kind_selector(_plan(acceleratorProductName="unknown")) is None
