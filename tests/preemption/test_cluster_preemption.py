"""Preemption on the real local control plane: real HPAs, PriorityClasses, scheduler and DRA devices.

Two classes on the four dedicated H100s of the simulated inventory (one device per replica): a
low-priority order runs three replicas, a high-priority one runs one — the device class is full.
The test then plays the autoscaler of the high order (the local cluster has no metrics API, so
the HPA controller would never decide to grow): it scales the StatefulSet to two and writes
``desiredReplicas: 2`` into the HPA's status as admin. The second replica cannot be placed; the
real scaling watch sees it, the preemption workflow lowers the low order's ceiling, and the low
order's HPA gets ``maxReplicas: 2`` by server-side apply — the HPA controller scales it down, the
scheduler places the high order's pending replica. When the high order's demand falls, the low
order's bound comes back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from kubernetes.client import ApiClient, AutoscalingV2Api, CustomObjectsApi, SchedulingV1Api
from kubernetes.client.exceptions import ApiException
from temporalio.testing import WorkflowEnvironment

from devstack.cluster.launcher import LocalCluster
from inference_api.preemption import preemption_workflow_id
from inference_api.types import GROUP, VERSION
from tests.e2e.stand import Stand, open_stand
from tests.polling import until
from workflows.preemption import PreemptionState, PreemptionWorkflow

pytestmark = [pytest.mark.cluster, pytest.mark.temporal]

DEVICE_CLASS = "nvidia-h100-dedicated"
PRIORITIES = {"e2e-preempt-low": 100, "e2e-preempt-high": 1000}
MODEL = {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}}


def dedicated_class(name: str, priority_class: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceServiceClass",
        "metadata": {"name": name},
        "spec": {
            "modelPolicy": {"allowedEndpointTypes": ["Chat", "Embeddings", "Rerank"]},
            "acceleratorPolicy": {
                "allowedDeviceClasses": [DEVICE_CLASS],
                "allowedSharingModes": ["Dedicated"],
                "allowedPlacementTypes": ["WholeDevice"],
                "maxAcceleratorCount": 1,
            },
            "scalingPolicy": {"minReplicas": 1, "maxReplicas": 4, "allowedPriorityClassNames": [priority_class]},
            "exposurePolicy": {"type": "ClusterLocal", "authentication": "None"},
            "updatePolicy": {"strategy": "RollingUpdate"},
        },
    }


@pytest_asyncio.fixture
async def stand(
    local_cluster: LocalCluster, kube_admin: ApiClient, temporal_env: WorkflowEnvironment
) -> AsyncIterator[Stand]:
    scheduling = SchedulingV1Api(kube_admin)
    for name, value in PRIORITIES.items():
        try:
            scheduling.create_priority_class({"metadata": {"name": name}, "value": value, "globalDefault": False})
        except ApiException as err:
            if err.status != 409:
                raise
    custom = CustomObjectsApi(kube_admin)
    for name in PRIORITIES:
        try:
            custom.create_cluster_custom_object(GROUP, VERSION, "inferenceserviceclasses", dedicated_class(name, name))
        except ApiException as err:
            if err.status != 409:
                raise
    overrides = {"health": {"scalingIntervalSeconds": 0.5}}
    async with open_stand(local_cluster, kube_admin, temporal_env.client, overrides) as opened:
        yield opened


def placed(stand: Stand, name: str) -> int:
    pods = stand.core.list_namespaced_pod(stand.namespace, label_selector=f"ai.deckhouse.io/inference-service={name}")
    return sum(1 for p in pods.items if p.spec.node_name and not p.metadata.deletion_timestamp)


def hpa(stand: Stand, name: str) -> Any:
    return AutoscalingV2Api(stand.api).read_namespaced_horizontal_pod_autoscaler(name, stand.namespace)


def scale(stand: Stand, name: str, replicas: int) -> None:
    stand.apps.patch_namespaced_stateful_set_scale(name, stand.namespace, {"spec": {"replicas": replicas}})


def want(stand: Stand, name: str, replicas: int) -> None:
    """What the HPA would write if it had metrics: its desired count (status subresource, as admin)."""
    AutoscalingV2Api(stand.api).patch_namespaced_horizontal_pod_autoscaler_status(
        name, stand.namespace, {"status": {"desiredReplicas": replicas}}
    )


def condition(stand: Stand, name: str, type_: str) -> tuple[str, str] | None:
    found = stand.condition(name, type_)
    return (found["status"], found["reason"]) if found else None


async def test_a_high_order_takes_a_replica_of_a_low_one_through_real_hpas(stand: Stand) -> None:
    stand.create_order("low", MODEL, class_name="e2e-preempt-low")
    await stand.until_phase("low", "Ready", timeout=120)
    scale(stand, "low", 3)
    await stand.until(lambda: placed(stand, "low") == 3, timeout=90, what="low runs 3 replicas")
    stand.create_order("high", MODEL, class_name="e2e-preempt-high")
    await stand.until_phase("high", "Ready", timeout=120)
    await stand.until(lambda: placed(stand, "high") == 1, timeout=60, what="high runs 1 replica")

    # The real HPA has no metrics here: ScalingHealthy says so, and the order stays Ready.
    await stand.until(
        lambda: condition(stand, "low", "ScalingHealthy") == ("Unknown", "AutoscalerMetricsUnavailable"),
        timeout=60,
        what="ScalingHealthy mirrors the HPA",
    )
    handle = stand.client.get_workflow_handle(preemption_workflow_id(stand.settings.temporal.taskQueue, DEVICE_CLASS))

    async def members() -> dict[str, int]:
        try:
            state: PreemptionState = await handle.query(PreemptionWorkflow.query_state)
        except Exception:
            return {}
        return {r.ref.name: r.priority for r in state.reports.values() if not r.leaving}

    seen: dict[str, int] = {}

    async def both_members() -> bool:
        seen.clear()
        seen.update(await members())
        return seen == {"low": 100, "high": 1000}

    await until(both_members, timeout=60, interval=0.5, what=lambda: f"both members (members: {seen})")

    # The high order's autoscaler wants a second replica; the device class is full.
    scale(stand, "high", 2)
    want(stand, "high", 2)
    await stand.until(lambda: hpa(stand, "low").spec.max_replicas == 2, timeout=90, what="low maxReplicas lowered")
    low_hpa = hpa(stand, "low")
    assert any(
        f.manager == "ai-inference" and f.operation == "Apply" and "f:maxReplicas" in str(f.fields_v1)
        for f in low_hpa.metadata.managed_fields
    )
    await stand.until(
        lambda: ((stand.order("low") or {}).get("status") or {}).get("constraints", {}).get("maxReplicas") == 2,
        what="low status.constraints.maxReplicas 2",
    )
    # The HPA controller scales the donor down to its new bound; the scheduler places the recipient.
    await stand.until(lambda: placed(stand, "low") == 2, timeout=120, what="low scaled down")
    await stand.until(lambda: placed(stand, "high") == 2, timeout=330, what="high's second replica placed")
    state: PreemptionState = await handle.query(PreemptionWorkflow.query_state)
    assert [(h.replicas) for h in state.ledger.holds] == [1]
    assert sum(state.preemptions.values()) == 1

    # Demand falls: the low order's bound comes back.
    want(stand, "high", 1)
    scale(stand, "high", 1)
    await stand.until(lambda: hpa(stand, "low").spec.max_replicas == 4, timeout=90, what="low maxReplicas restored")
    assert stand.phase("low")[0] == "Ready"
    assert stand.phase("high")[0] == "Ready"
