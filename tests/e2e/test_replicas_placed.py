"""Every replica of an autoscaled order is on the device the module chose, on the end-to-end stand (the
real worker and observer, the local control plane's kube-scheduler with its DRA allocator, kwok nodes).

An autoscaled order's pods wait behind the scheduling gate ``ai.deckhouse.io/replica-placement``; the
observer's replica placer allocates each replica's claim on the device it chose and removes the gate
(``worker.observer.replica_placer``). Scaled by hand to three replicas (what the autoscaler does through
the scale subresource), every replica's claim is allocated exactly where the placer recorded on its pod,
the pod is bound to that node, the first replica is on its planned device, and the planner's inventory
holds exactly those allocations for the order.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from kubernetes.client import AppsV1Api

from activities.builders.claim import ANNOTATION_PLANNED_PLACEMENTS
from activities.builders.common import LABEL_ORDER
from activities.inventory import read_inventory
from inference_api.types import CLASSES, GROUP, VERSION
from tests.e2e.stand import DEFAULT_LLM, Stand
from worker.observer.replica_placer import ANNOTATION_REPLICA_PLACEMENT

pytestmark = [pytest.mark.cluster, pytest.mark.temporal]

SMALL = {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}}
REPLICAS = 3


def autoscaled_t4_class(name: str) -> dict[str, Any]:
    """Shares of the whole Tesla T4s, autoscaled 1..3."""
    spec = {
        "modelPolicy": {"allowedEndpointTypes": ["Chat"]},
        "acceleratorPolicy": {
            "allowedSharingModes": ["Shared"],
            "allowedPlacementTypes": ["WholeDevice"],
            "allowedDeviceClasses": ["nvidia-t4-mps-physical"],
            "maxAcceleratorCount": 1,
        },
        "scalingPolicy": {"minReplicas": 1, "maxReplicas": REPLICAS},
        "exposurePolicy": {"type": "ClusterLocal", "authentication": "None"},
        "updatePolicy": {"strategy": "RollingUpdate"},
    }
    return {**DEFAULT_LLM, "metadata": {"name": name}, "spec": spec}


def replicas_placed(stand: Stand, order: str) -> list[dict[str, Any]] | None:
    """Each running replica: its pod's node, the placer's record, its claim's allocation result."""
    pods = stand.core.list_namespaced_pod(stand.namespace, label_selector=f"{LABEL_ORDER}={order}").items
    out = []
    for pod in pods:
        if pod.status.phase != "Running" or not pod.status.resource_claim_statuses:
            return None
        record = (pod.metadata.annotations or {}).get(ANNOTATION_REPLICA_PLACEMENT)
        claim = stand.custom.get_namespaced_custom_object(
            "resource.k8s.io",
            "v1",
            stand.namespace,
            "resourceclaims",
            pod.status.resource_claim_statuses[0].resource_claim_name,
        )
        allocation = (claim.get("status") or {}).get("allocation")
        if not allocation:
            return None
        (result,) = allocation["devices"]["results"]
        reserved = [r["name"] for r in claim["status"].get("reservedFor") or []]
        out.append(
            {
                "pod": pod.metadata.name,
                "node": pod.spec.node_name,
                "gates": pod.spec.scheduling_gates,
                "record": json.loads(record) if record else None,
                "result": result,
                "reservedFor": reserved,
            }
        )
    return out if len(out) == REPLICAS else None


async def test_every_replica_of_an_autoscaled_order_is_where_the_placer_put_it(stand: Stand) -> None:
    class_name = f"e2e-t4-autoscaled-{uuid.uuid4().hex[:6]}"
    stand.custom.create_cluster_custom_object(GROUP, VERSION, CLASSES, autoscaled_t4_class(class_name))
    try:
        stand.create_order("scaled", SMALL, class_name=class_name)
        await stand.until_phase("scaled", "Ready", None, timeout=120)
        template = stand.custom.get_namespaced_custom_object(
            "resource.k8s.io", "v1", stand.namespace, "resourceclaimtemplates", "scaled-claim"
        )
        planned = json.loads(template["metadata"]["annotations"][ANNOTATION_PLANNED_PLACEMENTS])
        assert len(planned) == 1  # an autoscaled order plans (and reserves) one replica
        apps = AppsV1Api(stand.api)
        (statefulset,) = apps.list_namespaced_stateful_set(
            stand.namespace, label_selector=f"{LABEL_ORDER}=scaled"
        ).items
        # What the HorizontalPodAutoscaler does when the queue grows: the scale subresource.
        apps.patch_namespaced_stateful_set_scale(
            statefulset.metadata.name, stand.namespace, {"spec": {"replicas": REPLICAS}}
        )
        await stand.until(
            lambda: replicas_placed(stand, "scaled") is not None, timeout=120, what="three replicas placed and running"
        )
        replicas = replicas_placed(stand, "scaled")
        assert replicas is not None
        for replica in sorted(replicas, key=lambda r: str(r["pod"])):
            record, result = replica["record"], replica["result"]
            print(f"\n{replica['pod']}: placed {record}, allocated {result['pool']}/{result['device']}")
            assert record is not None, f"{replica['pod']} was not placed by the replica placer"
            assert not replica["gates"]
            assert (result["pool"], [result["device"]], result["request"]) == (
                record["node"],
                record["devices"],
                record["request"],
            )
            assert replica["node"] == record["node"]
            assert replica["reservedFor"] == [replica["pod"]]
        first = next(r for r in replicas if str(r["pod"]).endswith("-0"))
        assert (first["record"]["node"], first["record"]["devices"]) == (planned[0]["node"], planned[0]["devices"])
        assert first["record"]["request"] == "gpu/planned"
        # The planner's view holds the three allocations for the order, the planned place not again.
        snapshot = read_inventory(stand.api)
        held = sorted(d.key for d in snapshot.devices for a in d.allocations if a.holder == f"{stand.namespace}/scaled")
        assert held == sorted(f"{r['result']['pool']}/{r['result']['device']}" for r in replicas)
    finally:
        stand.delete_orders()
        await stand.until(lambda: not stand.order_names(), timeout=60, what="orders deleted")
        stand.custom.delete_cluster_custom_object(GROUP, VERSION, CLASSES, class_name)
