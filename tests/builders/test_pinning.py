"""The plan is what the cluster does: an order whose every replica the plan placed is pinned to the
planned nodes and devices."""

from __future__ import annotations

import json
from typing import Any

from activities.builders.claim import (
    ANNOTATION_PLANNED_PLACEMENTS,
    build_claim_template,
    claim_template_spec_differs,
    pinned,
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
    # Fewer placements than replicas: the unplanned replica would have nowhere to go.
    short = f.inputs(the_class=fixed, the_plan=_plan(replicaPlacements=placements[:2], deviceSelector=union))
    assert not pinned(short)
    assert "selectors" not in _exactly(build_claim_template(short))
    assert "affinity" not in build_statefulset(short)["spec"]["template"]["spec"]
    assert "annotations" not in build_claim_template(short)["metadata"]


def test_several_replicas_share_one_template_and_are_left_to_the_scheduler() -> None:
    many = f.inputs(the_class=f.service_class(scalingPolicy={"minReplicas": 1, "maxReplicas": 3}), the_plan=_plan())
    assert not pinned(many)
    assert "selectors" not in _exactly(build_claim_template(many))
    assert "affinity" not in build_statefulset(many)["spec"]["template"]["spec"]


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
