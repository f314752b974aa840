"""The order workflow on a real Temporal dev server, with its activities standing in for the cluster.

The activities are fakes over an in-memory world (tests/workflows/world.py: a unit test of the
workflow's decisions); the end-to-end path with the real activities runs in tests/e2e against the
local control plane.
"""

from __future__ import annotations

import asyncio

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHistory, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer

from inference_api.observation import ObservedChange, OrderSignal
from inference_api.payloads import ApplyInput, ApplyResult, PlanInput, StatusUpdate
from inference_api.plan import PlanOutcome, PlanRefusal
from inference_api.reasons import STATE_REFUSED, EventReason, Reason
from inference_api.types import Condition, ConditionStatus, Phase
from tests.factories import make_class, make_order, make_plan
from tests.workflows.world import FAST, Harness, World, delete_as_a_step_finishes, runs_of
from workflows.order import SERVING_RUN_EVENTS, OrderTimings, OrderWorkflow, ReplanOutcome
from workflows.search_attributes import ORDER_PHASE


def share_of(update: StatusUpdate) -> int | None:
    return update.resolved.sharePercent if update.resolved else None


def cond(update: StatusUpdate, type_: str) -> Condition:
    return next(c for c in update.conditions if c.type == type_)


async def test_order_becomes_ready_after_every_step(harness: Harness) -> None:
    handle = await harness.start(make_order("happy"))
    await harness.until(harness.phase_is(Phase.READY))
    last = harness.world.last()
    for type_ in ("ClassResolved", "ModelResolved", "Planned", "WorkloadReady", "Ready"):
        assert cond(last, type_).status == ConditionStatus.TRUE, type_
    assert cond(last, "Planned").reason == Reason.LAUNCH_PLAN_CALCULATED
    assert last.resolved is not None
    assert last.resolved.sharePercent == 30
    assert last.resolved.replanCount == 0
    assert last.endpointType == "Chat"
    assert "support/happy" in harness.world.finalizers
    # The workload is applied only after the model resolved and the plan was made.
    assert len(harness.world.applies) == 1
    description = await handle.describe()
    assert description.typed_search_attributes.get(ORDER_PHASE) == "Ready"
    state = await handle.query(OrderWorkflow.query_state)
    assert state.everReady
    assert state.plan is not None


async def test_missing_class_waits_then_proceeds_when_the_class_appears(harness: Harness) -> None:
    handle = await harness.start(make_order("late-class", class_name="later"))
    await harness.until(harness.phase_is(Phase.PENDING, Reason.CLASS_NOT_FOUND))
    assert harness.world.applies == []
    assert cond(harness.world.last(), "Planned").reason == Reason.WAITING_FOR_PREVIOUS_STEP
    harness.world.classes["later"] = make_class("later")
    await handle.signal(OrderWorkflow.class_changed, 1)
    await harness.until(harness.phase_is(Phase.READY))


async def test_capacity_refusal_retries_on_a_backoff_without_an_edit(harness: Harness) -> None:
    calls: list[int] = []

    def plan(_: PlanInput) -> PlanOutcome:
        calls.append(1)
        if len(calls) < 3:
            return PlanOutcome(refusal=PlanRefusal(reason=Reason.NO_CAPACITY, message="every H100 is taken"))
        return PlanOutcome(plan=make_plan())

    harness.world.plan = plan
    await harness.start(make_order("waits-for-capacity"))
    await harness.until(harness.phase_is(Phase.PENDING, Reason.NO_CAPACITY))
    assert harness.world.applies == []
    await harness.until(harness.phase_is(Phase.READY))
    assert len(calls) == 3


async def test_an_order_without_a_plan_says_it_waits_for_an_unreachable_planner(harness: Harness) -> None:
    """The planner service down: the new order is not silently retried with no status at all, nor
    failed for good; it says PlannerUnavailable and why, and is Ready once the service answers."""
    calls: list[int] = []

    def unreachable(_: PlanInput) -> PlanOutcome:
        calls.append(1)
        raise ConnectionRefusedError("[Errno 111] Connection refused")

    harness.world.plan = unreachable
    await harness.start(make_order("waits-for-the-planner"))
    await harness.until(harness.phase_is(Phase.PENDING, Reason.PLANNER_UNAVAILABLE))
    planned = cond(harness.world.last(), "Planned")
    assert planned.status == ConditionStatus.FALSE
    assert "waiting for the planner service" in planned.message
    assert "Connection refused" in planned.message
    assert harness.world.applies == []
    assert len(calls) == 3  # the activity's attempts before the order says it
    harness.world.plan = None
    await harness.until(harness.phase_is(Phase.READY))
    assert len(harness.world.applies) == 1


async def test_class_refusal_waits_without_a_timer(harness: Harness) -> None:
    harness.world.classes["narrow"] = make_class("narrow", admissionPolicy={"allowedNamespaces": ["analytics"]})
    handle = await harness.start(make_order("wrong-ns", class_name="narrow"))
    await harness.until(harness.phase_is(Phase.PENDING, Reason.NAMESPACE_NOT_ALLOWED))
    await asyncio.sleep(1.5)
    state = await handle.query(OrderWorkflow.query_state)
    assert state.retryDelaySeconds is None
    assert state.reconciles == 1


async def test_old_generations_are_dropped_and_an_edit_replans(harness: Harness) -> None:
    order = make_order("edited", generation=2)
    handle = await harness.start(order)
    await harness.until(harness.phase_is(Phase.READY))
    reconciles = (await handle.query(OrderWorkflow.query_state)).reconciles
    await handle.signal(OrderWorkflow.spec_changed, 1)
    await asyncio.sleep(0.5)
    assert (await handle.query(OrderWorkflow.query_state)).reconciles == reconciles
    order.metadata.generation = 3
    harness.world.plan = lambda _: PlanOutcome(plan=make_plan(share=50))
    await handle.signal(OrderWorkflow.spec_changed, 3)
    await harness.until(lambda: share_of(harness.world.last()) == 50)
    last = harness.world.last()
    assert last.resolved is not None
    assert last.resolved.replanCount == 1
    assert last.observedGeneration == 3
    assert len(harness.world.applies) == 2


async def test_replan_update_returns_the_outcome(harness: Harness) -> None:
    handle = await harness.start(make_order("replanned"))
    await harness.until(harness.phase_is(Phase.READY))
    outcome = await handle.execute_update("replan", result_type=ReplanOutcome)
    assert outcome.planned
    assert outcome.reason == Reason.LAUNCH_PLAN_CALCULATED
    assert outcome.replanCount == 1


async def test_failed_replan_of_a_serving_order_keeps_it_ready_with_launch_plan_in_force(harness: Harness) -> None:
    handle = await harness.start(make_order("in-force"))
    await harness.until(harness.phase_is(Phase.READY))
    harness.world.plan = lambda _: PlanOutcome(
        refusal=PlanRefusal(reason=Reason.NO_CAPACITY, message="no H100 has 30% free")
    )
    outcome = await handle.execute_update("replan", result_type=ReplanOutcome)
    assert outcome.planned
    assert outcome.reason == Reason.LAUNCH_PLAN_IN_FORCE
    assert "no H100 has 30% free" in outcome.message
    last = harness.world.last()
    assert last.phase == Phase.READY
    assert last.reason == Reason.LAUNCH_PLAN_IN_FORCE
    assert len(harness.world.applies) == 2  # the plan in force is re-applied unchanged


async def test_replan_validator_rejects_when_nothing_can_change(harness: Harness) -> None:
    handle = await harness.start(make_order("not-planned", class_name="missing"))
    await harness.until(harness.phase_is(Phase.PENDING, Reason.CLASS_NOT_FOUND))
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update("replan", result_type=ReplanOutcome)
    assert "nothing to replan" in str(refused.value.cause)
    harness.world.delete_order("not-planned")
    await handle.signal(OrderWorkflow.delete)
    with pytest.raises(WorkflowUpdateFailedError):
        await handle.execute_update("replan", result_type=ReplanOutcome)


async def test_sustained_api_errors_fail_the_order_and_recovery_makes_it_ready(harness: Harness) -> None:
    await harness.start(make_order("flaky"))
    await harness.until(harness.phase_is(Phase.READY))
    harness.world.healthy = False
    await harness.until(harness.phase_is(Phase.FAILED, Reason.SERVICE_UNHEALTHY))
    harness.world.healthy = True
    await harness.until(harness.phase_is(Phase.READY))


async def test_failure_before_the_first_ready_keeps_pending_with_health_check_failed(harness: Harness) -> None:
    harness.world.healthy = False
    await harness.start(make_order("never-ready"))
    await harness.until(harness.phase_is(Phase.PENDING, Reason.HEALTH_CHECK_FAILED))
    harness.world.healthy = True
    await harness.until(harness.phase_is(Phase.READY))


async def test_delete_removes_the_finalizer_last_and_completes(harness: Harness) -> None:
    handle = await harness.start(make_order("deleted"))
    await harness.until(harness.phase_is(Phase.READY))
    assert "support/deleted" in harness.world.finalizers
    harness.world.delete_order("deleted")
    await handle.signal(OrderWorkflow.delete)
    assert await handle.result() == "deleted"
    assert "support/deleted" not in harness.world.finalizers
    # The order's last status says why it goes, before the finalizer does.
    assert harness.world.last().reason == Reason.DELETING


async def test_continue_as_new_carries_the_state(harness: Harness) -> None:
    timings = FAST.model_copy(update={"maxHistoryEvents": 40, "resyncSeconds": 0.3})
    handle = await harness.start(make_order("long-lived"), timings)
    await harness.until(harness.phase_is(Phase.READY))
    first_run = (await handle.describe()).run_id

    async def continued() -> bool:
        return (await harness.client.get_workflow_handle(handle.id).describe()).run_id != first_run

    await harness.until(continued, timeout=30, what="continue-as-new")
    state = await harness.client.get_workflow_handle(handle.id).query(OrderWorkflow.query_state)
    assert state.everReady
    assert state.plan is not None
    assert state.phase == Phase.READY


async def test_a_serving_order_costs_one_timer_and_a_simulated_day_stays_under_50_history_events(
    harness: Harness,
) -> None:
    # Three days at the default timings, scaled down 4000x: the daily resync timer fires three times.
    # Counted over every run: a serving order whose run passes SERVING_RUN_EVENTS continues as new
    # before it sleeps (serving-run-starts-fresh), and that is part of what a day costs.
    scale, days = 4000, 3
    timings = OrderTimings().model_copy(
        update={"resyncSeconds": OrderTimings().resyncSeconds / scale, "maxHistoryEvents": 100_000}
    )
    handle = await harness.start(make_order("one-day"), timings)
    await harness.until(harness.phase_is(Phase.READY))

    async def asleep_after(resyncs: int) -> bool:
        runs = await runs_of(harness.client, handle.id)
        fired = sum(e.event_type == EventType.EVENT_TYPE_TIMER_FIRED for run in runs for e in run)
        return fired >= resyncs and runs[-1][-1].event_type == EventType.EVENT_TYPE_TIMER_STARTED

    await harness.until(lambda: asleep_after(0), what="asleep")
    ready_at = sum(len(run) for run in await runs_of(harness.client, handle.id))
    await harness.until(lambda: asleep_after(days), timeout=days * 86400 / scale + 60, what=f"{days} resyncs")
    runs = await runs_of(harness.client, handle.id)
    per_day = (sum(len(run) for run in runs) - ready_at) / days
    print(f"\nhistory events of a serving order per simulated day: {per_day:.1f} ({days} days, {len(runs)} runs)")
    assert 0 < per_day <= 50, per_day
    assert len(runs) == 2, "its run passed SERVING_RUN_EVENTS once in three days"
    # No activity is pending while it serves: it holds no worker slot, only its timer.
    current = harness.client.get_workflow_handle(handle.id)
    assert (await current.describe()).raw_description.pending_activities == []
    # The daily look re-applied the workload (a deleted object comes back even with no observer).
    assert len(harness.world.applies) == 1 + days
    replayer = Replayer(workflows=[OrderWorkflow], data_converter=harness.client.data_converter)
    for run in runs:
        await replayer.replay_workflow(WorkflowHistory(handle.id, run))


async def test_a_serving_order_sleeps_in_a_fresh_run_of_six_events(harness: Harness) -> None:
    """About to sleep on its resync with nothing pending and a run longer than SERVING_RUN_EVENTS,
    the order continues as new first: a wake (evicted from the worker's cache) replays six events,
    not days of resyncs. A fresh order's creation stays in its run. The state is carried; the woken
    order reconciles; a delete finishes."""
    handle = await harness.start(make_order("fresh"))
    await harness.until(harness.phase_is(Phase.READY))

    async def asleep() -> bool:
        runs = await runs_of(harness.client, handle.id)
        return runs[-1][-1].event_type == EventType.EVENT_TYPE_TIMER_STARTED

    # Its creation (about 57 events) stays in its run; changes the observer reports (each one
    # reconcile) grow the run past the bound, and it continues before it sleeps again.
    await harness.until(asleep, what="asleep")
    assert len(await runs_of(harness.client, handle.id)) == 1, "the creation alone continued as new"
    for change in range(10):
        if len(await runs_of(harness.client, handle.id)) > 1:
            break
        applies = len(harness.world.applies_of("fresh")) + 1
        await handle.signal(OrderSignal.OBSERVED, ObservedChange(what=f"StatefulSet support/fresh changed {change}"))
        await harness.until(lambda n=applies: len(harness.world.applies_of("fresh")) >= n, what="re-applied")
        await harness.until(asleep, what="asleep")
    first, fresh = await runs_of(harness.client, handle.id)
    assert len(first) > SERVING_RUN_EVENTS
    # The patch's marker (and the SDK's TemporalChangeVersion search attribute), then the new run.
    assert first[-1].event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
    assert EventType.EVENT_TYPE_MARKER_RECORDED in [e.event_type for e in first[-3:]]
    assert [e.event_type for e in fresh] == [
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
        EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
        EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
        EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
        EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES,
        EventType.EVENT_TYPE_TIMER_STARTED,
    ]
    current = harness.client.get_workflow_handle(handle.id)
    state = await current.query(OrderWorkflow.query_state)
    assert state.everReady
    assert state.plan is not None
    assert state.phase == Phase.READY
    # Woken in the fresh run: it reconciles on the plan it carried (the planner is not asked).
    plans: list[PlanInput] = []

    def plan(request: PlanInput) -> PlanOutcome:
        plans.append(request)
        return PlanOutcome(plan=make_plan())

    harness.world.plan = plan
    applied = len(harness.world.applies_of("fresh"))
    await current.signal(OrderSignal.OBSERVED, ObservedChange(what="StatefulSet support/fresh deleted"))
    await harness.until(lambda: len(harness.world.applies_of("fresh")) > applied, what="re-applied")
    assert plans == []
    harness.world.delete_order("fresh")
    await current.signal(OrderWorkflow.delete)
    assert await current.result() == "deleted"


async def test_an_observed_change_reapplies_without_a_new_plan(harness: Harness) -> None:
    handle = await harness.start(make_order("observed"))
    await harness.until(harness.phase_is(Phase.READY))
    plans: list[PlanInput] = []

    def plan(request: PlanInput) -> PlanOutcome:
        plans.append(request)
        return PlanOutcome(plan=make_plan(share=70))

    harness.world.plan = plan
    await handle.signal(OrderSignal.OBSERVED, ObservedChange(what="StatefulSet support/observed deleted"))
    await harness.until(lambda: len(harness.world.applies) == 2, what="applied again")
    await harness.until(harness.phase_is(Phase.READY))
    # Stable: nothing the plan was made for changed, so the planner was not asked and the share stays.
    assert plans == []
    assert share_of(harness.world.last()) == 30
    state = await handle.query(OrderWorkflow.query_state)
    assert state.replanCount == 0
    assert state.lastObserved == "StatefulSet support/observed deleted"


async def test_a_serving_order_reapplied_checks_its_health_instead_of_waiting_for_a_load(harness: Harness) -> None:
    # A replica already serves: the probe after a re-apply may not hold the reconcile (and the health
    # signals behind it) for the serve wait while the API fails; it is a health check.
    timings = FAST
    handle = await harness.start(make_order("rechecked"), timings)
    await harness.until(harness.phase_is(Phase.READY))
    harness.world.healthy = False
    await handle.signal(OrderSignal.OBSERVED, ObservedChange(what="StatefulSet support/rechecked changed"))
    await harness.until(harness.phase_is(Phase.FAILED, Reason.SERVICE_UNHEALTHY))
    # Each probe is the short one (the replica was ready at the apply both times): no serve wait.
    assert harness.world.probe_waits == [timings.failureThreshold * timings.probeTimeoutSeconds] * 2
    assert harness.world.serve_waits == []


async def test_a_forged_delete_leaves_a_live_order_serving(harness: Harness) -> None:
    handle = await harness.start(make_order("live"))
    await harness.until(harness.phase_is(Phase.READY))
    await handle.signal(OrderWorkflow.delete)  # the order has no deletionTimestamp

    async def request_read() -> bool:
        return not (await handle.query(OrderWorkflow.query_state)).deleteRequested

    await harness.until(request_read, what="the delete request judged")
    await asyncio.sleep(0.5)
    assert "support/live" in harness.world.finalizers
    assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
    assert harness.world.last().reason != Reason.DELETING


async def test_deleting_an_order_waiting_for_its_first_probe_cancels_the_wait(harness: Harness) -> None:
    harness.world.first_probe = "hang"
    handle = await harness.start(make_order("stuck"))
    await harness.until(lambda: len(harness.world.applies) == 1, what="applied")
    harness.world.delete_order("stuck")
    await handle.signal(OrderWorkflow.delete)
    # The hung probe never answers: only the cancellation ends the order. The bound is generous (a
    # loaded CI machine once took past 10 s); without the cancellation it would never end.
    assert await asyncio.wait_for(handle.result(), 60) == "deleted"
    assert "support/stuck" not in harness.world.finalizers


async def test_a_delete_heard_as_a_step_finishes_still_stops_the_reconcile(temporal_client: Client) -> None:
    """The delete and the end of the step the reconcile waits on reach the workflow in one task: the
    cancel lands on a finished step, which returns its result instead of the cancellation, and the
    reconcile must still stop before its next step (it went on into a first probe that never ends:
    seen on a loaded CI machine, one run in eight)."""
    world = World(first_probe="hang")
    handle = await delete_as_a_step_finishes(temporal_client, world, "stuck")
    assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED
    assert await handle.result() == "deleted"
    assert world.serve_waits == []  # the reconcile stopped before its first probe
    assert world.probe_waits == []
    assert "support/stuck" not in world.finalizers


async def test_a_refused_replan_after_an_edit_keeps_the_held_spec_running(harness: Harness) -> None:
    order = make_order("held")
    handle = await harness.start(order)
    await harness.until(harness.phase_is(Phase.READY))
    held_model = order.spec.model.ref.name
    edited = order.model_copy(deep=True)
    edited.spec.model.ref.name = "Qwen/Qwen2.5-72B-Instruct"
    edited.metadata.generation = 2
    harness.world.orders["support/held"] = edited
    harness.world.plan = lambda _: PlanOutcome(
        refusal=PlanRefusal(reason=Reason.NO_ACCELERATOR_WITH_ENOUGH_MEMORY, message="72B fits no device")
    )
    await handle.signal(OrderWorkflow.spec_changed, 2)
    await harness.until(lambda: len(harness.world.applies) == 2, what="applied again")
    await harness.until(harness.phase_is(Phase.READY, Reason.LAUNCH_PLAN_IN_FORCE))
    # The plan in force runs the spec it was made for: the old model, not the edited one.
    assert harness.world.applies[-1].order.spec.model.ref.name == held_model
    assert "72B fits no device" in cond(harness.world.last(), "Planned").message


async def test_an_answer_that_cannot_change_is_workload_refused_and_not_retried(harness: Harness) -> None:
    attempts: list[int] = []

    async def refusing_apply(request: ApplyInput) -> ApplyResult:
        attempts.append(1)
        raise ApplicationError(
            'the API server refused the workload (422 Invalid): Service "9b" is invalid',
            type=str(Reason.WORKLOAD_REFUSED),
            non_retryable=True,
        )

    harness.world.apply_override = refusing_apply
    await harness.start(make_order("refused"))
    await harness.until(harness.phase_is(Phase.PENDING, Reason.WORKLOAD_REFUSED))
    await asyncio.sleep(1)
    assert len(attempts) == 1
    assert "422 Invalid" in cond(harness.world.last(), "WorkloadReady").message


@pytest.mark.parametrize("forged", ["deleting", "gone"])
async def test_a_run_started_with_a_forged_teardown_deletes_nothing_and_heals(harness: Harness, forged: str) -> None:
    # Issue 33: a holder of a module certificate started a new run from the queried state with
    # deleting=True; the run removed the finalizer and the workload of an order nobody deleted.
    handle = await harness.start(make_order("forged"))
    await harness.until(harness.phase_is(Phase.READY))
    state = await handle.query(OrderWorkflow.query_state)
    await handle.terminate("attack")
    statuses_before = len(harness.world.statuses)
    forged_run = await harness.client.start_workflow(
        OrderWorkflow.run,
        state.model_copy(update={forged: True}),
        id=handle.id,
        task_queue=harness.task_queue,
    )

    def refused() -> bool:
        return any(e.reason == EventReason.DELETE_REFUSED for e in harness.world.events)

    await harness.until(refused, what="the DeleteRefused event")
    event = next(e for e in harness.world.events if e.reason == EventReason.DELETE_REFUSED)
    assert event.type == "Warning"
    assert forged_run.result_run_id is not None
    assert forged_run.result_run_id in event.message
    assert f"told the order is {forged}" in event.message
    # The run goes on as the order's executor: the finalizer stays, the order is reconciled and serves.
    await harness.until(lambda: len(harness.world.statuses) > statuses_before, what="a status after the refusal")
    await harness.until(harness.phase_is(Phase.READY))
    assert "support/forged" in harness.world.finalizers
    assert all(u.reason != Reason.DELETING for u in harness.world.statuses[statuses_before:])
    assert (await forged_run.describe()).status == WorkflowExecutionStatus.RUNNING


async def test_a_refused_run_state_is_dropped_and_the_order_heals_by_planning_again(harness: Harness) -> None:
    # Issue 33: a forged state refused at apply stuck at WorkloadRefused for good; now the run drops it
    # and plans again from the cluster after a backoff.
    refusals: list[ApplyInput] = []
    plans: list[PlanInput] = []

    async def refusing_once(request: ApplyInput) -> ApplyResult:
        refusals.append(request)
        harness.world.apply_override = None  # the next apply goes through
        raise ApplicationError(
            "the launch plan's recipe is not the release's: image docker.io/library/busybox:latest",
            type=STATE_REFUSED,
            non_retryable=True,
        )

    def counting_plan(request: PlanInput) -> PlanOutcome:
        plans.append(request)
        return PlanOutcome(plan=make_plan())

    harness.world.plan = counting_plan
    harness.world.apply_override = refusing_once
    await harness.start(make_order("healing"))
    await harness.until(harness.phase_is(Phase.PENDING, Reason.WORKLOAD_REFUSED))
    refused = cond(harness.world.last(), "WorkloadReady")
    assert "busybox" in refused.message
    assert "planned again from what the cluster says" in refused.message
    await harness.until(harness.phase_is(Phase.READY), timeout=30)
    assert len(refusals) == 1
    assert len(harness.world.applies) == 1
    # Planned again (the refused plan only the planner's hint): the refused state was not applied again.
    assert len(plans) == 2
    assert plans[1].current is not None


async def test_the_modules_finalizer_is_put_on_beside_another_controllers(harness: Harness) -> None:
    """An order carrying only another controller's finalizer (the module's removed, as the disable hook
    removes it) gets the module's back: before, only an order with no finalizer at all got it."""
    order = make_order("shared")
    order.metadata.finalizers = ["other.example.com/keep"]
    await harness.start(order)
    await harness.until(harness.phase_is(Phase.READY))
    assert "support/shared" in harness.world.finalizers


def test_the_workflows_finalizer_is_the_modules() -> None:
    from activities.order import FINALIZER
    from workflows.order import ORDER_FINALIZER

    assert ORDER_FINALIZER == FINALIZER
