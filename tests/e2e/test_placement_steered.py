"""Autoscaled orders obey the plan too, and a share is what the device's share policy allocates, on the
local control plane (kube-scheduler's DRA allocator with DRAPrioritizedList, beta and on in 1.34, and
DRAConsumableCapacity; kwok nodes).

An autoscaled order's claim template is a prioritized list (``firstAvailable``): the planned devices,
then any device of the same kind. Its planned replica lands where planned (the allocation result names
subrequest ``gpu/planned``); a replica the autoscaler adds when the planned device is taken lands on
another device of the kind (``gpu/any``), and the planner's inventory then holds exactly what was
allocated (no planned place reserved a second time). A device publishing a memory ``requestPolicy`` with
``validValues`` gets a claim whose allocated ``consumedCapacity`` is the amount the plan booked.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
from kubernetes.client import ApiClient, CoreV1Api

from activities.builders.claim import build_claim_template
from activities.builders.statefulset import build_statefulset
from activities.inventory import read_inventory
from activities.planner_client import plan_in_process
from devstack.cluster.inventory import DRIVER, KWOK_ANNOTATION, SIMULATED_LABEL
from devstack.cluster.launcher import LocalCluster
from inference_api.plan import LaunchPlan, LaunchPlanRequest, OrderFacts
from inference_api.settings import ModuleSettings
from inference_api.types import AcceleratorPolicy, PlacementType, SharingMode
from planner.quantity import Quantity
from tests import factories as f
from tests.cluster.helpers import dynamic, get, kwok_pod, order_statefulset, pod_running
from tests.polling import wait_until as eventually

pytestmark = pytest.mark.cluster

RESOURCE = "resource.k8s.io/v1"
AUTOSCALED = {"minReplicas": 1, "maxReplicas": 2}
POLICY_NODE = "gpu-policy-e2e-0"
POLICY_CLASS = "policy-e2e-h100"
POLICY_UUID = "GPU-policy-e2e-0"


def _plan(api: ApiClient, model: str, policy: AcceleratorPolicy) -> LaunchPlan:
    request = LaunchPlanRequest(facts=OrderFacts(modelName=model), acceleratorPolicy=policy, className="test")
    outcome = plan_in_process(request, api, settings=ModuleSettings())
    assert outcome.plan is not None, outcome.refusal
    return outcome.plan


def _start(
    local_cluster: LocalCluster, api: ApiClient, namespace: str, name: str, plan: LaunchPlan, replicas: int
) -> list[dict[str, Any]]:
    """The builders' template and pods of an autoscaled order (class 1..2) with ``replicas`` running (the
    autoscaler's count); the allocation result of each replica's claim, in order."""
    inputs = f.inputs(
        the_order=f.order(name=name, namespace=namespace),
        the_class=f.service_class(scalingPolicy=AUTOSCALED),
        the_plan=plan,
    )
    template = build_claim_template(inputs)
    template["metadata"].pop("ownerReferences", None)  # no order object here: the collector would take it
    pod_spec = build_statefulset(inputs)["spec"]["template"]["spec"]
    results = []
    dyn = dynamic(api)
    local_cluster.apply([template])
    pod = kwok_pod(name, namespace, resourceClaims=copy.deepcopy(pod_spec["resourceClaims"]))
    pod["spec"]["containers"][0]["resources"] = {"requests": pod_spec["containers"][0]["resources"]["requests"]}
    for key in ("affinity", "tolerations", "nodeSelector"):
        if key in pod_spec:
            pod["spec"][key] = pod_spec[key]
    # The order's replicas as the module makes them: pods of a StatefulSet the stored order controls (the
    # inventory believes a claim is the order's only along that chain), added one at a time.
    statefulset = order_statefulset(api, namespace, name, pod, replicas=0)
    for i in range(replicas):
        statefulset["spec"]["replicas"] = i + 1
        local_cluster.apply([statefulset])
        running = eventually(
            partial(pod_running, dyn, f"{name}-{i}", namespace), timeout=90, what=f"{name}-{i} Running"
        )
        claim_name = running["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
        claim = get(dyn, RESOURCE, "ResourceClaim", claim_name, namespace)
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert result["pool"] == running["spec"]["nodeName"]
        results.append(result)
    return results


def test_an_autoscaled_orders_replicas_land_where_planned_then_on_a_device_of_the_kind(
    local_cluster: LocalCluster, kube_admin: ApiClient, namespace: str
) -> None:
    t4_whole = AcceleratorPolicy(
        allowedDeviceClasses=["nvidia-t4-mps-physical"], allowedSharingModes=[SharingMode.DEDICATED]
    )
    plan = _plan(kube_admin, "acme/llm-1B", t4_whole)
    assert plan.sharePercent == 100
    assert plan.deviceSelector is not None
    first, second = _start(local_cluster, kube_admin, namespace, "scaled", plan, replicas=2)
    # The planned replica: the planned subrequest, on the planned node and device.
    assert first["request"] == "gpu/planned"
    assert (first["pool"], [first["device"]]) == (plan.nodeName, plan.deviceNames)
    # The replica the autoscaler added: the planned whole device is taken, another T4 of the kind.
    assert second["request"] == "gpu/any"
    assert second["pool"] == plan.nodeName  # the preferred node still had a T4 free
    assert second["device"] != first["device"]
    # The inventory holds what was allocated: two devices, the planned place not reserved again.
    snapshot = read_inventory(kube_admin)
    held = sorted(d.key for d in snapshot.devices for a in d.allocations if a.holder == f"{namespace}/scaled")
    assert held == sorted(f"{r['pool']}/{r['device']}" for r in (first, second))


@pytest.fixture
def policy_device(local_cluster: LocalCluster, kube_admin: ApiClient) -> Iterator[str]:
    """A node with one shareable H100 whose memory requestPolicy takes 10, 40 or 80 GiB, and a
    DeviceClass selecting it alone; removed afterwards (the session's other tests share the cluster)."""
    attributes = {
        "productName": {"string": "NVIDIA H100 80GB HBM3"},
        "hardwareFamily": {"string": "hopper"},
        "memoryGiB": {"int": 80},
        "placement": {"string": "WholeDevice"},
        "sharingMode": {"string": "MPS"},
        "shareable": {"bool": True},
        "uuid": {"string": POLICY_UUID},
    }
    capacity = {
        f"{DRIVER}/memory": {
            "value": "80Gi",
            "requestPolicy": {"default": "80Gi", "validValues": ["10Gi", "40Gi", "80Gi"]},
        },
        f"{DRIVER}/sharePercent": {
            "value": "100",
            "requestPolicy": {"default": "0", "validRange": {"min": "0", "step": "1"}},
        },
    }
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": POLICY_NODE,
            "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {"kubernetes.io/hostname": POLICY_NODE, "type": "kwok", SIMULATED_LABEL: "true"},
        },
        "status": {"capacity": resources, "allocatable": resources},
    }
    slice_ = {
        "apiVersion": RESOURCE,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{POLICY_NODE}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": POLICY_NODE,
            "pool": {"name": POLICY_NODE, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": "gpu-0", "attributes": attributes, "capacity": capacity, "allowMultipleAllocations": True}
            ],
        },
    }
    device_class = {
        "apiVersion": RESOURCE,
        "kind": "DeviceClass",
        "metadata": {"name": POLICY_CLASS},
        "spec": {"selectors": [{"cel": {"expression": f'device.attributes["{DRIVER}"].uuid == "{POLICY_UUID}"'}}]},
    }
    local_cluster.apply([node, slice_, device_class])
    dyn = dynamic(kube_admin)
    try:
        # A new node carries node.kubernetes.io/not-ready:NoSchedule until kwok reports it Ready and the
        # node lifecycle controller lifts it; the planner (rightly) refuses a tainted node until then.
        eventually(
            partial(_listed_and_schedulable, kube_admin),
            timeout=60,
            what="the device listed on a node without taints",
        )
        yield POLICY_NODE
    finally:
        for kind, name in (("DeviceClass", POLICY_CLASS), ("ResourceSlice", f"{POLICY_NODE}-{DRIVER}")):
            dyn.delete(dyn.resources.get(api_version=RESOURCE, kind=kind), name=name)
        CoreV1Api(kube_admin).delete_node(POLICY_NODE)


def _listed_and_schedulable(api: ApiClient) -> bool:
    snapshot = read_inventory(api)
    nodes = [n for n in snapshot.nodes or [] if n.name == POLICY_NODE]
    return any(d.node == POLICY_NODE for d in snapshot.devices) and bool(nodes) and not nodes[0].taints


def test_the_allocated_share_is_what_the_plan_booked_under_the_devices_share_policy(
    local_cluster: LocalCluster, kube_admin: ApiClient, namespace: str, policy_device: str
) -> None:
    shared = AcceleratorPolicy(
        allowedDeviceClasses=[POLICY_CLASS],
        allowedSharingModes=[SharingMode.SHARED],
        allowedPlacementTypes=[PlacementType.WHOLE_DEVICE],
    )
    # The compiled hopper recipe needs 24 GiB: the device takes 10, 40 or 80, so the claim asks 40 GiB.
    plan = _plan(kube_admin, "Qwen/Qwen2.5-32B-Instruct-AWQ", shared)
    assert plan.nodeName == policy_device
    assert plan.memoryRequestMiB == 40 * 1024
    assert plan.sharePercent == 50
    (result,) = _start(local_cluster, kube_admin, namespace, "policed", plan, replicas=1)
    assert result["request"] == "gpu/planned"
    consumed = result["consumedCapacity"]
    assert Quantity.parse(consumed[f"{DRIVER}/memory"]) == Quantity.from_mib(plan.memoryRequestMiB)
    assert Quantity.parse(consumed[f"{DRIVER}/sharePercent"]) == Quantity.parse("0")
    # The planner's inventory reads the allocation as the plan booked it.
    snapshot = read_inventory(kube_admin)
    (device,) = [d for d in snapshot.devices if d.node == policy_device]
    (held,) = device.allocations
    assert (held.holder, held.memoryMiB) == (f"{namespace}/policed", plan.memoryRequestMiB)
