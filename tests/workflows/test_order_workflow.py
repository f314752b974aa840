"""The order workflow on a real Temporal dev server, with its activities standing in for the cluster.

The activities are fakes over an in-memory world (tests/workflows/world.py: a unit test of the
workflow's decisions); the end-to-end path with the real activities runs in tests/e2e against the
local control plane.
"""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.worker import Replayer

from inference_api.payloads import PlanInput, StatusUpdate
from inference_api.plan import PlanOutcome, PlanRefusal
from inference_api.reasons import Reason
from inference_api.types import Condition, ConditionStatus, Phase
from tests.factories import make_class, make_order, make_plan
from tests.workflows.world import FAST, Harness
from workflows.order import OrderTimings, OrderWorkflow, ReplanOutcome
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
    assert last.resolved is not None and last.resolved.sharePercent == 30 and last.resolved.replanCount == 0
    assert last.endpointType == "Chat"
    assert "support/happy" in harness.world.finalizers
    # The workload is applied only after the model resolved and the plan was made.
    assert len(harness.world.applies) == 1
    description = await handle.describe()
    assert description.typed_search_attributes.get(ORDER_PHASE) == "Ready"
    state = await handle.query(OrderWorkflow.query_state)
    assert state.everReady and state.plan is not None


async def test_missing_class_waits_then_proceeds_when_the_class_appears(harness: Harness) -> None:
    handle = await harness.start(make_order("late-class", class_name="later"))
    await harness.until(harness.phase_is(Phase.PENDING, Reason.CLASS_NOT_FOUND))
    assert harness.world.applies == []
    assert cond(harness.world.last(), "Planned").reason == Reason.WAITING_FOR_PREVIOUS_STEP
    harness.world.classes["later"] = make_class("later")
    await handle.signal(OrderWorkflow.class_changed)
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
    assert last.resolved is not None and last.resolved.replanCount == 1
    assert last.observedGeneration == 3
    assert len(harness.world.applies) == 2


async def test_replan_update_returns_the_outcome(harness: Harness) -> None:
    handle = await harness.start(make_order("replanned"))
    await harness.until(harness.phase_is(Phase.READY))
    outcome = await handle.execute_update("replan", result_type=ReplanOutcome)
    assert outcome.planned and outcome.reason == Reason.LAUNCH_PLAN_CALCULATED and outcome.replanCount == 1


async def test_failed_replan_of_a_serving_order_keeps_it_ready_with_launch_plan_in_force(harness: Harness) -> None:
    handle = await harness.start(make_order("in-force"))
    await harness.until(harness.phase_is(Phase.READY))
    harness.world.plan = lambda _: PlanOutcome(
        refusal=PlanRefusal(reason=Reason.NO_CAPACITY, message="no H100 has 30% free")
    )
    outcome = await handle.execute_update("replan", result_type=ReplanOutcome)
    assert outcome.planned and outcome.reason == Reason.LAUNCH_PLAN_IN_FORCE
    assert "no H100 has 30% free" in outcome.message
    last = harness.world.last()
    assert last.phase == Phase.READY and last.reason == Reason.LAUNCH_PLAN_IN_FORCE
    assert len(harness.world.applies) == 2  # the plan in force is re-applied unchanged


async def test_replan_validator_rejects_when_nothing_can_change(harness: Harness) -> None:
    handle = await harness.start(make_order("not-planned", class_name="missing"))
    await harness.until(harness.phase_is(Phase.PENDING, Reason.CLASS_NOT_FOUND))
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update("replan", result_type=ReplanOutcome)
    assert "nothing to replan" in str(refused.value.cause)
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
    await handle.signal(OrderWorkflow.delete)
    assert await handle.result() == "deleted"
    assert "support/deleted" not in harness.world.finalizers
    # The order's last status says why it goes, before the finalizer does.
    assert harness.world.last().reason == Reason.DELETING


async def test_continue_as_new_carries_the_state(harness: Harness) -> None:
    timings = FAST.model_copy(update={"maxHistoryEvents": 40, "healthWatchMaxSeconds": 0.3})
    handle = await harness.start(make_order("long-lived"), timings)
    await harness.until(harness.phase_is(Phase.READY))
    first_run = (await handle.describe()).run_id

    async def continued() -> bool:
        return (await harness.client.get_workflow_handle(handle.id).describe()).run_id != first_run

    await harness.until(continued, timeout=30, what="continue-as-new")
    state = await harness.client.get_workflow_handle(handle.id).query(OrderWorkflow.query_state)
    assert state.everReady and state.plan is not None and state.phase == Phase.READY


async def test_a_simulated_day_stays_under_200_history_events(harness: Harness) -> None:
    # One day at the default timings, scaled down 2000x: 600 s probes → 0.3 s, 6 h watches → 10.8 s.
    scale = 2000
    defaults = OrderTimings()
    timings = defaults.model_copy(
        update={
            "healthIntervalSeconds": defaults.healthIntervalSeconds / scale,
            "healthWatchMaxSeconds": defaults.healthWatchMaxSeconds / scale,
            "maxHistoryEvents": 100_000,
        }
    )
    handle = await harness.start(make_order("one-day"), timings)
    await harness.until(harness.phase_is(Phase.READY))
    await asyncio.sleep(86400 / scale)
    events = [e async for e in handle.fetch_history_events()]
    assert len(events) <= 200, len(events)
    # ...and the watch really ran for the whole day: the run is alive and no probe flipped health.
    assert (await handle.describe()).status is not None
    history = await handle.fetch_history()
    await Replayer(workflows=[OrderWorkflow], data_converter=harness.client.data_converter).replay_workflow(history)
