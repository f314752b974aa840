"""No hot loop: a serving order whose replan is refused for capacity backs off (``replan-backs-off``).

It keeps running the plan it holds (Planned=True/LaunchPlanInForce) and asks the planner again after
retryBaseSeconds, doubling up to replanBackoffMaxSeconds; reconciles in between (an observed change,
a health flip) re-apply and probe the held plan without asking the planner. Before, each reconcile's
successful probe reset the shared retry counter: the planner was asked every retryBaseSeconds (16 s
with the defaults: 225 plans an hour) for as long as the edit stood.
"""

from __future__ import annotations

import asyncio
import itertools
import time

from inference_api.observation import HealthReport, ObservedChange, OrderSignal
from inference_api.payloads import PlanInput
from inference_api.plan import PlanOutcome, PlanRefusal
from inference_api.reasons import Reason
from inference_api.types import Phase
from tests.factories import make_order, make_plan
from tests.workflows.world import FAST, Harness
from workflows.order import OrderWorkflow

BASE = 1.0
CAP = 4.0
TIMINGS = FAST.model_copy(update={"retryBaseSeconds": BASE, "replanBackoffMaxSeconds": CAP})


async def test_a_refused_replan_backs_off_exponentially_through_health_checks_and_changes(harness: Harness) -> None:
    order = make_order("grown")
    handle = await harness.start(order, TIMINGS)
    await harness.until(harness.phase_is(Phase.READY))
    asked: list[float] = []

    def refuse(_: PlanInput) -> PlanOutcome:
        asked.append(time.monotonic())
        return PlanOutcome(
            refusal=PlanRefusal(reason=Reason.NO_ACCELERATOR_WITH_ENOUGH_MEMORY, message="405B fits no device")
        )

    edited = order.model_copy(deep=True)
    edited.spec.model.ref.name = "meta-llama/Llama-3.1-405B-Instruct"
    edited.metadata.generation = 2
    harness.world.orders["support/grown"] = edited
    harness.world.plan = refuse
    await handle.signal(OrderWorkflow.spec_changed, 2)
    await harness.until(harness.phase_is(Phase.READY, Reason.LAUNCH_PLAN_IN_FORCE))
    applies = len(harness.world.applies_of("grown"))

    # Eight seconds of what a serving order hears: changes observed and health flips, every 0.5 s.
    began = time.monotonic()
    flip = False
    while time.monotonic() - began < 8:
        await handle.signal(OrderSignal.OBSERVED, ObservedChange(what="Pod support/grown-0 ready", kind="Pod"))
        flip = not flip
        await handle.signal(OrderSignal.HEALTH_CHANGED, HealthReport(healthy=flip, detail="200"))
        await asyncio.sleep(0.5)

    # The planner was asked after 1, 2, 4 s (timers never fire early), whatever came between: four
    # times at most in those eight seconds (each change would have asked it again before).
    gaps = [b - a for a, b in itertools.pairwise(asked)]
    expected = [min(BASE * 2**i, CAP) for i in range(len(gaps))]
    assert all(gap >= want * 0.95 for gap, want in zip(gaps, expected, strict=True)), (gaps, expected)
    assert 2 <= len(asked) <= 4, asked
    # The held plan kept running: every reconcile re-applied the old model, and the status says when
    # the planner is asked again.
    assert len(harness.world.applies_of("grown")) > applies
    assert {a.order.spec.model.ref.name for a in harness.world.applies_of("grown")} == {order.spec.model.ref.name}
    planned = next(c for c in harness.world.last("grown").conditions if c.type == "Planned")  # type: ignore[union-attr]
    assert planned.reason == Reason.LAUNCH_PLAN_IN_FORCE
    assert "405B fits no device" in planned.message
    assert "asked again in" in planned.message

    # A replan asked by hand is not held back; a new edit that fits is planned at once and the hold goes.
    before = len(asked)
    await handle.signal(OrderSignal.REPLAN)
    await harness.until(lambda: len(asked) > before, what="asked again by hand")
    harness.world.plan = lambda _: PlanOutcome(plan=make_plan(share=50))
    fixed = edited.model_copy(deep=True)
    fixed.spec.model.ref.name = "Qwen/Qwen2.5-7B-Instruct"
    fixed.metadata.generation = 3
    harness.world.orders["support/grown"] = fixed
    await handle.signal(OrderWorkflow.spec_changed, 3)
    await harness.until(harness.phase_is(Phase.READY, None), what="Ready on the new plan")
    state = await handle.query(OrderWorkflow.query_state)
    assert (state.replanHoldKey, state.replanAttempt, state.replanNotBefore) == (None, 0, None)
