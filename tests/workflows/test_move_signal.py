"""A move made before it breaks (the observer's repack): the order workflow's ``move`` signal.

A serving order told ``move`` plans once more beside what it holds (``PlanInput.besideCurrent``,
keeping the model's revision). A plan that takes less of a device (count x share) is adopted and
its first apply surges onto it (``ApplyInput.makeBeforeBreak``); any other answer — the same size,
a capacity refusal — leaves the order on its plan, untold, and the planner is not asked again on a
backoff. While the apply says the move is under way the order serves and says WorkloadMoving. An
order that never served ignores the signal.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.client import WorkflowHandle

from inference_api.observation import ObservedChange, OrderSignal
from inference_api.payloads import ApplyInput, ApplyResult, PlanInput, StatusUpdate
from inference_api.plan import PlanOutcome, PlanRefusal
from inference_api.reasons import Reason
from inference_api.types import (
    Condition,
    ConditionStatus,
    ConstraintsStatus,
    EndpointStatus,
    ExposureType,
    Phase,
)
from tests.factories import make_order, make_plan
from tests.workflows.world import FAST, Harness
from workflows.order import OrderWorkflow

TIMINGS = FAST
WHOLE = 100  # the plan an order serves on: a whole device
QUARTER = 25  # what the repack finds beside it: a quarter of one


class Planner:
    """The plan activity's answers, in turn (the last one repeats), and every request it got."""

    def __init__(self, *answers: PlanOutcome) -> None:
        self.answers = list(answers)
        self.asked: list[PlanInput] = []

    def __call__(self, request: PlanInput) -> PlanOutcome:
        self.asked.append(request)
        return self.answers[min(len(self.asked), len(self.answers)) - 1]

    def beside(self) -> list[PlanInput]:
        return [r for r in self.asked if r.besideCurrent]


def share(percent: int) -> PlanOutcome:
    return PlanOutcome(plan=make_plan(share=percent))


def no_capacity() -> PlanOutcome:
    return PlanOutcome(refusal=PlanRefusal(reason=Reason.NO_CAPACITY, message="no device has a quarter free"))


def planned(update: StatusUpdate | None) -> Condition:
    assert update is not None
    return next(c for c in update.conditions if c.type == "Planned")


async def serving(harness: Harness, name: str, planner: Planner) -> WorkflowHandle[Any, Any]:
    """An order of ``name`` planned by ``planner``, started and Ready."""
    harness.world.plan = planner
    handle = await harness.start(make_order(name), TIMINGS)
    await harness.until(harness.phase_is(Phase.READY), what=f"{name} Ready")
    return handle


async def reconciled(harness: Harness, handle: WorkflowHandle[Any, Any], count: int) -> None:
    """Wait until ``count`` reconciles have completed (and published their status)."""

    async def done() -> bool:
        return (await handle.query(OrderWorkflow.query_state)).lastReconcileCompleted >= count

    await harness.until(done, what=f"reconcile {count} completed")


async def completed(handle: WorkflowHandle[Any, Any]) -> int:
    return (await handle.query(OrderWorkflow.query_state)).lastReconcileCompleted


async def test_a_move_to_a_smaller_share_is_adopted_and_applied_before_it_breaks_once(harness: Harness) -> None:
    planner = Planner(share(WHOLE), share(QUARTER))
    handle = await serving(harness, "mover", planner)
    assert [a.makeBeforeBreak for a in harness.world.applies_of("mover")] == [False]

    await handle.signal(OrderSignal.MOVE)
    await harness.until(lambda: len(harness.world.applies_of("mover")) == 2, what="the move applied")

    # Planned beside what it holds, for the same spec (the model's revision kept).
    assert len(planner.asked) == 2
    move = planner.asked[-1]
    assert move.besideCurrent
    assert move.keepRevision
    assert move.current is not None
    assert move.current.sharePercent == WHOLE
    # The smaller plan is the one applied, and it surges (made before the old replicas go).
    surge = harness.world.applies_of("mover")[-1]
    assert surge.makeBeforeBreak
    assert surge.plan.sharePercent == QUARTER
    state = await handle.query(OrderWorkflow.query_state)
    assert state.plan is not None
    assert state.plan.sharePercent == QUARTER
    assert not state.moveRequested

    # A later reconcile applies the plan it holds as it is: no surge again, no plan asked.
    done = await completed(handle)
    await handle.signal(OrderSignal.OBSERVED, ObservedChange(what="Pod support/mover-1 ready", kind="Pod"))
    await harness.until(lambda: len(harness.world.applies_of("mover")) == 3, what="the next apply")
    await reconciled(harness, handle, done + 1)
    later = harness.world.applies_of("mover")[-1]
    assert not later.makeBeforeBreak
    assert later.plan.sharePercent == QUARTER
    assert len(planner.asked) == 2
    assert harness.phase_is(Phase.READY)()
    assert planned(harness.world.last("mover")).reason == Reason.LAUNCH_PLAN_CALCULATED


async def test_a_move_whose_answer_is_no_smaller_keeps_the_plan_untold(harness: Harness) -> None:
    planner = Planner(share(WHOLE), share(WHOLE))
    handle = await serving(harness, "stayer", planner)
    before = planned(harness.world.last("stayer"))
    done = await completed(handle)

    await handle.signal(OrderSignal.MOVE)
    await reconciled(harness, handle, done + 1)

    assert [r.besideCurrent for r in planner.asked] == [False, True]
    assert not any(a.makeBeforeBreak for a in harness.world.applies_of("stayer"))
    assert {a.plan.sharePercent for a in harness.world.applies_of("stayer")} == {WHOLE}
    assert harness.phase_is(Phase.READY)()
    after = planned(harness.world.last("stayer"))
    assert (after.status, after.reason, after.message) == (before.status, before.reason, before.message)
    state = await handle.query(OrderWorkflow.query_state)
    # Not counted as a replan: the plan in force was not recomputed.
    assert state.replanCount == 0
    assert not state.moveApplyPending


async def test_a_move_refused_for_capacity_keeps_the_plan_and_is_not_retried(harness: Harness) -> None:
    planner = Planner(share(WHOLE), no_capacity())
    handle = await serving(harness, "crowded", planner)
    before = planned(harness.world.last("crowded"))
    assert before.reason == Reason.LAUNCH_PLAN_CALCULATED
    done = await completed(handle)

    await handle.signal(OrderSignal.MOVE)
    await reconciled(harness, handle, done + 1)

    # The order keeps serving its plan; the refusal is not shown as a held plan (LaunchPlanInForce).
    assert harness.phase_is(Phase.READY)()
    after = planned(harness.world.last("crowded"))
    assert (after.status, after.reason, after.message) == (before.status, before.reason, before.message)
    assert not any(a.makeBeforeBreak for a in harness.world.applies_of("crowded"))
    assert {a.plan.sharePercent for a in harness.world.applies_of("crowded")} == {WHOLE}
    state = await handle.query(OrderWorkflow.query_state)
    assert state.plan is not None
    assert state.plan.sharePercent == WHOLE
    assert (state.replanHoldKey, state.replanAttempt, state.replanNotBefore) == (None, 0, None)
    assert state.retryDelaySeconds is None

    # No backoff: a retry (retryBaseSeconds 0.5 s, at most 1 s) would have asked again in these 2.5 s.
    await asyncio.sleep(2.5)
    assert [r.besideCurrent for r in planner.asked] == [False, True]


async def test_a_move_under_way_keeps_the_order_ready_and_says_workload_moving(harness: Harness) -> None:
    planner = Planner(share(WHOLE), share(QUARTER))
    handle = await serving(harness, "surging", planner)

    async def surging_apply(request: ApplyInput) -> ApplyResult:
        # The apply step of a move made before it breaks: the old replica serves while new ones start.
        harness.world.applies.append(request)
        return ApplyResult(
            endpoint=EndpointStatus(url=f"https://{request.ref.name}.example", type=ExposureType.EXTERNAL),
            authSecretName=f"{request.ref.name}-auth",
            constraints=ConstraintsStatus(minReplicas=1, maxReplicas=2),
            readyReplicas=1,
            moving=request.makeBeforeBreak,
        )

    harness.world.apply_override = surging_apply
    done = await completed(handle)
    await handle.signal(OrderSignal.MOVE)
    await reconciled(harness, handle, done + 1)

    assert harness.world.applies_of("surging")[-1].makeBeforeBreak
    assert harness.phase_is(Phase.READY)()
    assert harness.world.condition("surging", "WorkloadReady") == (ConditionStatus.TRUE, Reason.WORKLOAD_MOVING)


async def test_a_move_told_to_an_order_not_yet_ready_is_ignored(harness: Harness) -> None:
    planner = Planner(share(WHOLE), share(QUARTER))
    harness.world.plan = planner
    harness.world.loading.add("support/loading")
    handle = await harness.start(make_order("loading"), TIMINGS)
    await harness.until(lambda: harness.world.applies_of("loading"), what="the first apply")

    await handle.signal(OrderSignal.MOVE)
    state = await handle.query(OrderWorkflow.query_state)
    assert not state.everReady
    assert not state.moveRequested

    await harness.world.let_load("loading")
    await harness.until(harness.phase_is(Phase.READY), what="Ready")
    # Ready in its first reconcile: the move did not mark the order dirty (which ends the load's wait).
    assert (await handle.query(OrderWorkflow.query_state)).reconcilesStarted == 1
    # A reconcile after it serves would plan beside the current plan had the move been kept.
    done = await completed(handle)
    await handle.signal(OrderSignal.OBSERVED, ObservedChange(what="Pod support/loading-0 ready", kind="Pod"))
    await reconciled(harness, handle, done + 1)

    assert planner.beside() == []
    assert len(planner.asked) == 1
    assert not any(a.makeBeforeBreak for a in harness.world.applies_of("loading"))
    assert {a.plan.sharePercent for a in harness.world.applies_of("loading")} == {WHOLE}


def placed(percent: int, node: str, device: str) -> PlanOutcome:
    """A plan of ``percent`` of one device, ``node/device``."""
    return PlanOutcome(plan=make_plan(share=percent).model_copy(update={"nodeName": node, "deviceNames": [device]}))


async def test_a_consolidating_move_lands_on_its_target_and_applies_before_it_breaks(harness: Harness) -> None:
    planner = Planner(placed(QUARTER, "node-a", "gpu-1"), placed(QUARTER, "node-b", "gpu-4"))
    handle = await serving(harness, "gatherer", planner)

    await handle.signal(OrderSignal.MOVE, "node-b/gpu-4")
    await harness.until(lambda: len(harness.world.applies_of("gatherer")) == 2, what="the move applied")

    # Planned beside what it holds, with the target ranked first: the same share, on the target, is a move.
    move = planner.asked[-1]
    assert move.besideCurrent
    assert move.preferDevice == "node-b/gpu-4"
    surge = harness.world.applies_of("gatherer")[-1]
    assert surge.makeBeforeBreak
    assert (surge.plan.nodeName, surge.plan.deviceNames) == ("node-b", ["gpu-4"])
    state = await handle.query(OrderWorkflow.query_state)
    assert state.moveTarget is None
    assert not state.moveRequested


async def test_a_consolidating_move_whose_plan_misses_its_target_keeps_the_plan_untold(harness: Harness) -> None:
    # The target had no room any more: the planner's answer lands elsewhere, at the same share.
    planner = Planner(placed(QUARTER, "node-a", "gpu-1"), placed(QUARTER, "node-c", "gpu-7"))
    handle = await serving(harness, "missed", planner)
    done = await completed(handle)

    await handle.signal(OrderSignal.MOVE, "node-b/gpu-4")
    await reconciled(harness, handle, done + 1)

    assert [r.preferDevice for r in planner.asked] == [None, "node-b/gpu-4"]
    assert not any(a.makeBeforeBreak for a in harness.world.applies_of("missed"))
    state = await handle.query(OrderWorkflow.query_state)
    assert state.plan is not None
    assert (state.plan.nodeName, state.plan.deviceNames) == ("node-a", ["gpu-1"])
    assert state.replanCount == 0


async def test_an_untargeted_move_asks_no_device_and_needs_a_smaller_place(harness: Harness) -> None:
    # The same share elsewhere is no move without a target: nothing comes free by it.
    planner = Planner(placed(QUARTER, "node-a", "gpu-1"), placed(QUARTER, "node-b", "gpu-4"))
    handle = await serving(harness, "drifter", planner)
    done = await completed(handle)

    await handle.signal(OrderSignal.MOVE)
    await reconciled(harness, handle, done + 1)

    assert [r.preferDevice for r in planner.asked] == [None, None]
    assert not any(a.makeBeforeBreak for a in harness.world.applies_of("drifter"))
