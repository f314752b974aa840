"""The real kube-scheduler allocates DRA claims against the simulated ResourceSlices."""

from __future__ import annotations

import uuid
from functools import partial
from typing import Any

import pytest
from kubernetes.client import ApiClient

from devstack.cluster.inventory import MEMORY_CAPACITY, SHARE_CAPACITY, load_inventory
from devstack.cluster.launcher import LocalCluster
from tests.cluster.helpers import delete, dynamic, exists, get, kwok_pod, pod_running
from tests.polling import stays, wait_until

pytestmark = pytest.mark.cluster

RESOURCE = "resource.k8s.io/v1"


def _claim_template(name: str, namespace: str, device_class: str) -> dict[str, Any]:
    return {
        "apiVersion": RESOURCE,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]}}},
    }


def _shared_claim(name: str, namespace: str, memory: str, share: str) -> dict[str, Any]:
    # Pinned to one device so the test can prove two claims really land on the same card.
    return {
        "apiVersion": RESOURCE,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "nvidia-hopper-s3-shared",
                            "selectors": [{"cel": {"expression": 'device.attributes["gpu.deckhouse.io"].index == 0'}}],
                            "capacity": {"requests": {MEMORY_CAPACITY: memory, SHARE_CAPACITY: share}},
                        },
                    }
                ]
            }
        },
    }


def _allocation(dyn: Any, claim: str, namespace: str) -> dict[str, Any] | None:
    obj = get(dyn, RESOURCE, "ResourceClaim", claim, namespace)
    allocation: dict[str, Any] | None = obj.get("status", {}).get("allocation")
    return allocation


def test_inventory_is_published(kube_admin: ApiClient) -> None:
    inv = load_inventory()
    dyn = dynamic(kube_admin)
    for node in inv.nodes:
        obj = get(dyn, "v1", "Node", node.name)
        ready = [c for c in obj["status"]["conditions"] if c["type"] == "Ready"]
        assert ready, node.name
        assert ready[0]["status"] == "True", node.name
    slices = dyn.get(dyn.resources.get(api_version=RESOURCE, kind="ResourceSlice")).to_dict()["items"]
    published = {(s["spec"]["nodeName"], d["name"]) for s in slices for d in s["spec"]["devices"]}
    assert published == {(d.node, d.name) for d in inv.devices}
    shared = [d for s in slices for d in s["spec"]["devices"] if d.get("allowMultipleAllocations")]
    # The consumable-capacity fields survive only with DRAConsumableCapacity on the apiserver.
    assert shared
    assert all(d["capacity"][MEMORY_CAPACITY].get("requestPolicy") for d in shared)
    gpu = get(dyn, "gpu.deckhouse.io/v1alpha1", "PhysicalGPU", "gpu-h100-mig-0-gpu-0")
    assert gpu["status"]["productName"] == "NVIDIA H100 80GB HBM3"
    assert gpu["status"]["migProfiles"] == ["3g.40gb", "3g.40gb"]
    assert gpu["status"]["memoryMiB"] == 80 * 1024


def test_each_device_class_allocates_a_device_it_selects(
    local_cluster: LocalCluster, kube_admin: ApiClient, namespace: str
) -> None:
    """A pod with a claim from a ResourceClaimTemplate per DeviceClass: bound, Running, allocated
    a device the class's CEL selects (checked against the inventory's Python twin)."""
    inv = load_inventory()
    objects: list[dict[str, Any]] = []
    for dc in inv.device_classes:
        objects.append(_claim_template(dc.name, namespace, dc.name))
        objects.append(
            kwok_pod(
                f"pod-{dc.name}",
                namespace,
                resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": dc.name}],
                container_claims=["gpu"],
            )
        )
    local_cluster.apply(objects)
    dyn = dynamic(kube_admin)
    for dc in inv.device_classes:
        pod_name = f"pod-{dc.name}"
        pod = wait_until(partial(pod_running, dyn, pod_name, namespace), what=f"{pod_name} Running")
        claim_name = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
        allocation = _allocation(dyn, claim_name, namespace)
        assert allocation is not None
        (result,) = allocation["devices"]["results"]
        assert result["driver"] == "gpu.deckhouse.io"
        selectable = {(d.node, d.name) for d in inv.devices_of_class(dc.name)}
        assert (result["pool"], result["device"]) in selectable, dc.name
        assert pod["spec"]["nodeName"] == result["pool"]


def test_shared_device_by_consumable_capacity(
    local_cluster: LocalCluster, kube_admin: ApiClient, namespace: str
) -> None:
    """Two claims of 30Gi/40% share one H100; a third does not fit until one goes away."""
    local_cluster.apply(
        [
            _shared_claim("share-a", namespace, "30Gi", "40"),
            _shared_claim("share-b", namespace, "30Gi", "40"),
            kwok_pod("pod-a", namespace, resourceClaims=[{"name": "gpu", "resourceClaimName": "share-a"}]),
            kwok_pod("pod-b", namespace, resourceClaims=[{"name": "gpu", "resourceClaimName": "share-b"}]),
        ]
    )
    dyn = dynamic(kube_admin)
    results = []
    for pod in ("pod-a", "pod-b"):
        wait_until(partial(pod_running, dyn, pod, namespace), what=f"{pod} Running")
    for claim in ("share-a", "share-b"):
        allocation = _allocation(dyn, claim, namespace)
        assert allocation is not None
        (result,) = allocation["devices"]["results"]
        results.append(result)
    assert {(r["pool"], r["device"]) for r in results} == {("gpu-h100-0", "gpu-0")}
    for r in results:
        assert r["consumedCapacity"] == {MEMORY_CAPACITY: "30Gi", SHARE_CAPACITY: "40"}
        assert r.get("shareID")
    assert results[0]["shareID"] != results[1]["shareID"]

    # 30 + 30 + 30 GiB > 80 GiB: the third claim cannot be placed on gpu-0.
    local_cluster.apply(
        [
            _shared_claim("share-c", namespace, "30Gi", "10"),
            kwok_pod("pod-c", namespace, resourceClaims=[{"name": "gpu", "resourceClaimName": "share-c"}]),
        ]
    )

    def unschedulable() -> bool:
        pod = get(dyn, "v1", "Pod", "pod-c", namespace)
        conds = {c["type"]: c for c in pod.get("status", {}).get("conditions", [])}
        return conds.get("PodScheduled", {}).get("status") == "False"

    wait_until(unschedulable, what="pod-c reported unschedulable")
    stays(
        lambda: not get(dyn, "v1", "Pod", "pod-c", namespace)["spec"].get("nodeName"),
        seconds=3,
        what="pod-c must stay unbound",
    )
    assert _allocation(dyn, "share-c", namespace) is None

    # Freeing one share makes room: the scheduler retries and places the third claim.
    delete(dyn, "v1", "Pod", "pod-a", namespace)
    wait_until(lambda: not exists(dyn, "v1", "Pod", "pod-a", namespace), what="pod-a gone")
    delete(dyn, RESOURCE, "ResourceClaim", "share-a", namespace)
    wait_until(lambda: pod_running(dyn, "pod-c", namespace), timeout=90, what="pod-c Running after share-a freed")
    allocation = _allocation(dyn, "share-c", namespace)
    assert allocation is not None
    assert allocation["devices"]["results"][0]["device"] == "gpu-0"


def test_a_claim_allocated_before_its_pod_is_ungated_is_honoured(
    local_cluster: LocalCluster, kube_admin: ApiClient, namespace: str
) -> None:
    """The mechanism that pins an autoscaled order's replicas: a pod made with a scheduling gate gets its
    claim from the template at once; a claim whose allocation is written by someone else (the module's
    replica placer) before the gate goes is bound as allocated — the scheduler puts the pod on the node
    the allocation names and reserves the claim for it, and allocates nothing else."""

    template = {
        "apiVersion": RESOURCE,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gated", "namespace": namespace},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {
                                "deviceClassName": "nvidia-hopper-s3-shared",
                                "capacity": {"requests": {MEMORY_CAPACITY: "20Gi", SHARE_CAPACITY: "25"}},
                            },
                        }
                    ]
                }
            }
        },
    }
    gate = "ai.deckhouse.io/replica-placement"
    pod = kwok_pod(
        "gated",
        namespace,
        resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "gated"}],
        container_claims=["gpu"],
    )
    pod["spec"]["schedulingGates"] = [{"name": gate}]
    local_cluster.apply([template, pod])
    dyn = dynamic(kube_admin)

    def claim_given() -> str | None:
        statuses = get(dyn, "v1", "Pod", "gated", namespace).get("status", {}).get("resourceClaimStatuses") or []
        return statuses[0].get("resourceClaimName") if statuses else None

    claim_name = wait_until(claim_given, what="the gated pod's claim made from the template")
    claim = get(dyn, RESOURCE, "ResourceClaim", claim_name, namespace)
    assert not claim.get("status", {}).get("allocation")
    node, device = "gpu-h100-0", "gpu-3"
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "gpu",
                        "driver": "gpu.deckhouse.io",
                        "pool": node,
                        "device": device,
                        "shareID": str(uuid.uuid4()),
                        "consumedCapacity": {MEMORY_CAPACITY: "20Gi", SHARE_CAPACITY: "25"},
                    }
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
            },
        }
    }
    resource = dyn.resources.get(api_version=RESOURCE, kind="ResourceClaim")
    resource.status.replace(body=claim, namespace=namespace)
    dyn.resources.get(api_version="v1", kind="Pod").patch(
        name="gated",
        namespace=namespace,
        body=[{"op": "replace", "path": "/spec/schedulingGates", "value": []}],
        content_type="application/json-patch+json",
    )
    running = wait_until(partial(pod_running, dyn, "gated", namespace), what="the ungated pod Running")
    assert running["spec"]["nodeName"] == node
    after = get(dyn, RESOURCE, "ResourceClaim", claim_name, namespace)
    (result,) = after["status"]["allocation"]["devices"]["results"]
    assert (result["pool"], result["device"]) == (node, device)
    assert [r["name"] for r in after["status"].get("reservedFor") or []] == ["gated"]
