"""The preemption workflow with real order workflows on the real Temporal dev server.

The order workflows' activities run against a simulated device class (tests/workflows/world.py);
the preemption activities (signal-with-start, metrics) are the real ones.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Awaitable
from types import SimpleNamespace
from typing import Any, TypeVar, cast

import pytest
from kubernetes.client import ApiClient
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.service import RPCError
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Replayer

from activities.metrics import PreemptionMetricsCollector
from activities.order import OrderActivities
from activities.preemption_ledger import ceiling_told
from inference_api.payloads import ApplyInput, OrderRef, PlanInput, order_workflow_id
from inference_api.plan import PlanOutcome
from inference_api.preemption import PreemptionMetrics
from inference_api.reasons import EventReason, Reason
from inference_api.settings import ModuleSettings
from inference_api.types import ConditionStatus, Phase
from tests.factories import make_order
from tests.polling import WaitTimeoutError, until
from tests.workflows.world import TIMINGS, Stand, new_world, running_worker
from workflows import activity_names as act
from workflows.order import OrderState, OrderWorkflow
from workflows.preemption import PreemptionWorkflow
from workflows.search_attributes import ORDER_DEVICE_CLASS, PREEMPTION_STATUS

T = TypeVar("T")


async def replay_settled(handle: WorkflowHandle[Any, Any], client: Client) -> None:
    """Replay the history once the workflow is between tasks (a history cut mid-task is no test); one
    that never is within ~10 s (its last task leaves commands after it) is replayed as it stands."""
    fetched: list[WorkflowHistory] = []

    async def between_tasks() -> WorkflowHistory | None:
        fetched.append(await asyncio.wait_for(handle.fetch_history(), 30))
        last = fetched[-1].events[-1].event_type
        return fetched[-1] if last == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED else None

    try:
        history = await until(between_tasks, timeout=10, interval=0.1, what="the workflow between tasks")
    except WaitTimeoutError:
        history = fetched[-1] if fetched else await asyncio.wait_for(handle.fetch_history(), 30)
    replayer = Replayer(workflows=[PreemptionWorkflow, OrderWorkflow], data_converter=client.data_converter)
    await asyncio.wait_for(replayer.replay_workflow(history), 60)


async def fill(stand: Stand, low_load: int = 3, high_load: int = 1) -> None:
    """A low- and a high-priority order filling the device class (4 whole devices)."""
    await stand.start("low", "low-class", load=low_load)
    await stand.start("high", "high-class", load=high_load)
    for name in ("low", "high"):
        await stand.until(stand.phase_is(name, Phase.READY), what=f"{name} Ready")
    await stand.until(lambda: stand.sim("low").placed == low_load and stand.sim("high").placed == high_load)

    async def both_members() -> bool:
        try:
            state = await stand.preemption_state()
        except Exception:
            return False
        return len([r for r in state.reports.values() if not r.leaving]) == 2

    await stand.until(both_members, what="both orders reported to the preemption workflow")


async def test_a_high_order_grows_at_a_low_ones_expense_and_gives_back_when_demand_falls(stand: Stand) -> None:
    await fill(stand)
    dc = stand.world.device_class
    # Every member has a counter at 0 before anything happens (increase() needs a first sample).
    await stand.until(lambda: stand.metrics.preemptions(dc, "support", "high") == 0, what="counter at 0")

    stand.sim("high").load = 2
    await stand.until(lambda: stand.sim("high").placed == 2, what="high grows to 2")
    assert stand.sim("low").ceiling == 2
    assert stand.sim("low").placed == 2
    low_state = await stand.order_state("low")
    assert low_state.replicaCeiling == 2
    assert stand.world.applies_of("low")[-1].replicaCeiling == 2
    await stand.until(lambda: stand.metrics.held(dc, "support", "low") == 1, what="held gauge")
    assert stand.metrics.preemptions(dc, "support", "high") == 1
    # The donor's status shows the lowered bound; neither order is degraded.
    await stand.until(
        lambda: (
            (last := stand.world.last("low")) is not None
            and last.constraints is not None
            and last.constraints.maxReplicas == 2
        )
    )
    assert stand.world.phase("high") == (Phase.READY, None)
    assert stand.world.condition("high", "ScalingHealthy") == (ConditionStatus.TRUE, Reason.SCALING_ALLOWED)
    # The donor's autoscaler still wants 3: held below that, it cannot grow (and keeps serving).
    await stand.until(stand.phase_is("low", Phase.DEGRADED, Reason.SCALE_UP_BLOCKED), what="low Degraded")
    reasons = {(e.ref.name, e.reason) for e in stand.world.events}
    assert ("low", EventReason.CAPACITY_PREEMPTED) in reasons
    assert ("high", EventReason.CAPACITY_PREEMPTED) in reasons

    # The Temporal UI tells the story.
    async def blocked_while_holding() -> bool:
        described = await stand.preemption().describe()
        attributes = described.typed_search_attributes
        # Blocked (the held donor wants more) wins over Holding.
        return attributes.get(ORDER_DEVICE_CLASS) == dc and attributes.get(PREEMPTION_STATUS) == "Blocked"

    await stand.until(blocked_while_holding, what="preemption Blocked")
    # The donor's load falls to its ceiling: not blocked any more, only held.
    stand.sim("low").load = 2
    await stand.until(stand.phase_is("low", Phase.READY, None), what="low Ready while held")

    async def holding() -> bool:
        described = await stand.preemption().describe()
        return described.typed_search_attributes.get(PREEMPTION_STATUS) == "Holding"

    await stand.until(holding, what="preemption Holding")
    stand.sim("low").load = 3
    state = await stand.preemption_state()
    assert any("took 1 from support/low for support/high" in line for line in state.log)

    # Demand falls: the donor gets its bound back and grows again.
    stand.sim("high").load = 1
    await stand.until(lambda: stand.sim("low").ceiling is None, what="low restored")
    await stand.until(lambda: stand.sim("low").placed == 3, what="low back to 3")
    await stand.until(stand.phase_is("low", Phase.READY, None), what="low Ready again")
    assert (await stand.order_state("low")).replicaCeiling is None
    await stand.until(lambda: stand.metrics.held(dc, "support", "low") is None, what="held gauge gone")
    assert stand.metrics.preemptions(dc, "support", "high") == 1
    await stand.until(
        lambda: ("low", EventReason.CAPACITY_RESTORED) in {(e.ref.name, e.reason) for e in stand.world.events},
        what="CapacityRestored event",
    )

    async def idle() -> bool:
        described = await stand.preemption().describe()
        return described.typed_search_attributes.get(PREEMPTION_STATUS) == "Idle"

    await stand.until(idle, what="preemption Idle")
    await replay_settled(stand.preemption(), stand.client)


async def test_with_no_donor_left_the_recipient_serves_degraded_then_recovers(stand: Stand) -> None:
    await fill(stand, low_load=2, high_load=2)
    stand.sim("high").load = 4
    # One replica comes from the low order (down to its minReplicas); the fourth cannot.
    await stand.until(stand.phase_is("high", Phase.DEGRADED, Reason.SCALE_UP_BLOCKED), what="high Degraded")
    await stand.until(lambda: stand.sim("low").ceiling == 1 and stand.sim("high").placed == 3, what="low gave one")
    assert stand.world.condition("high", "Ready") == (ConditionStatus.TRUE, Reason.PROBE_SUCCEEDED)
    status, reason = stand.world.condition("high", "ScalingHealthy") or (None, None)
    assert (status, reason) == (ConditionStatus.FALSE, Reason.SCALE_UP_BLOCKED)
    last = stand.world.last("high")
    assert last is not None
    assert last.endpoint is not None

    async def blocked() -> bool:
        described = await stand.preemption().describe()
        return described.typed_search_attributes.get(PREEMPTION_STATUS) == "Blocked"

    await stand.until(blocked, what="preemption Blocked")

    # Demand falls to what could be freed: Ready again, the donor still held.
    stand.sim("high").load = 3
    await stand.until(stand.phase_is("high", Phase.READY, None), what="high Ready again")
    assert stand.sim("low").ceiling == 1
    # ...and to where it started: the donor is restored.
    stand.sim("high").load = 2
    await stand.until(lambda: stand.sim("low").ceiling is None, what="low restored")
    await stand.until(lambda: stand.sim("low").placed == 2)


async def test_a_deleted_recipient_gives_its_donors_back(stand: Stand) -> None:
    await fill(stand)
    stand.sim("high").load = 2
    await stand.until(lambda: stand.sim("low").ceiling == 2, what="low held")
    stand.world.delete_order("high")
    await stand.handles["high"].signal(OrderWorkflow.delete)
    assert await stand.handles["high"].result() == "deleted"
    await stand.until(lambda: stand.sim("low").ceiling is None, what="low restored after the recipient left")


async def test_killing_the_worker_mid_preemption_loses_no_hold_and_counts_nothing_twice(
    temporal_client: Client,
) -> None:
    world = new_world(capacity=400)
    task_queue = f"preemption-{uuid.uuid4().hex[:8]}"
    first_metrics, second_metrics = PreemptionMetricsCollector(), PreemptionMetricsCollector()
    reached = asyncio.Event()

    @activity.defn(name=act.PUBLISH_PREEMPTION_METRICS)
    async def hangs_once_held(metrics: PreemptionMetrics) -> None:
        """The first worker dies after the decision (donor signalled) but before the metrics are out."""
        if metrics.held:
            reached.set()
            await asyncio.Event().wait()
        first_metrics.set(metrics)

    async with running_worker(temporal_client, task_queue, world, first_metrics, extra=[hangs_once_held]):
        stand = Stand(temporal_client, world, task_queue, first_metrics)
        await fill(stand)
        stand.sim("high").load = 2
        await asyncio.wait_for(reached.wait(), 30)
    # The worker is gone with the metrics activity in flight.
    assert first_metrics.held(world.device_class, "support", "low") is None

    async with running_worker(temporal_client, task_queue, world, second_metrics):
        stand.metrics = second_metrics
        dc = world.device_class
        await stand.until(
            lambda: second_metrics.held(dc, "support", "low") == 1, timeout=60, what="metrics from the new worker"
        )
        assert second_metrics.preemptions(dc, "support", "high") == 1
        await stand.until(lambda: stand.sim("high").placed == 2, timeout=60, what="high grows")
        state = await stand.preemption_state()
        assert [(h.recipient.split("/")[2], h.donor.split("/")[2], h.replicas) for h in state.ledger.holds] == [
            ("high", "low", 1)
        ]
        assert sum(state.preemptions.values()) == 1
        assert (await stand.order_state("low")).replicaCeiling == 2
        # Nothing more happens on its own: still one preemption, one held replica.
        await asyncio.sleep(2)
        assert second_metrics.preemptions(dc, "support", "high") == 1
        assert sum((await stand.preemption_state()).preemptions.values()) == 1

        # The new worker carries on from the recorded hold.
        stand.sim("high").load = 1
        await stand.until(lambda: stand.sim("low").ceiling is None, timeout=60, what="low restored")
        await stand.until(lambda: second_metrics.held(dc, "support", "low") is None, what="gauge gone")
        assert second_metrics.preemptions(dc, "support", "high") == 1
        await replay_settled(stand.preemption(), temporal_client)


async def test_a_deleted_blocked_recipient_leaves_the_preemption_workflow_working(stand: Stand) -> None:
    await fill(stand, low_load=2, high_load=2)
    stand.sim("high").load = 4
    await stand.until(stand.phase_is("high", Phase.DEGRADED, Reason.SCALE_UP_BLOCKED), what="high Degraded")
    stand.world.delete_order("high")
    await stand.handles["high"].signal(OrderWorkflow.delete)
    assert await stand.handles["high"].result() == "deleted"
    await stand.until(lambda: stand.sim("low").ceiling is None, what="low restored")

    async def settled() -> bool:
        state = await stand.preemption_state()
        return not state.blocked and not state.ledger.holds and not state.dirty

    await stand.until(settled, what="no hold, no block")
    # Still deciding: a new order joins and is counted.
    await stand.start("newcomer", "normal-class", load=1)

    async def joined() -> bool:
        state = await stand.preemption_state()
        return any(r.ref.name == "newcomer" and not r.leaving for r in state.reports.values())

    await stand.until(joined, what="newcomer reported")


async def test_a_ceiling_set_before_the_first_apply_is_used_and_survives_continue_as_new(
    temporal_client: Client,
) -> None:
    world = new_world(capacity=400)
    metrics = PreemptionMetricsCollector()
    task_queue = f"preemption-{uuid.uuid4().hex[:8]}"

    async def step(what: str, call: Awaitable[T]) -> T:
        try:
            return await asyncio.wait_for(call, 30)
        except TimeoutError:
            raise AssertionError(f"{what}: no answer in 30 s") from None

    async with running_worker(temporal_client, task_queue, world, metrics):
        stand = Stand(temporal_client, world, task_queue, metrics)
        order = make_order("held", class_name="low-class")
        world.orders["support/held"] = order
        ref = OrderRef(namespace="support", name="held", uid=order.metadata.uid or "")
        timings = TIMINGS.model_copy(update={"maxHistoryEvents": 40, "resyncSeconds": 0.5})
        # The ceiling arrives with the start, before anything was applied.
        handle = await step(
            "start",
            temporal_client.start_workflow(
                OrderWorkflow.run,
                OrderState(ref=ref, timings=timings),
                id=order_workflow_id(ref.namespace, ref.name, ref.uid),
                task_queue=task_queue,
                start_signal="set_replica_ceiling",
                start_signal_args=[2],
            ),
        )
        await step("spec_changed", handle.signal(OrderWorkflow.spec_changed, 1))
        stand.handles["held"] = handle
        # The fake observer watches it too (the HPA's decisions reach it as signals).
        world.handles["support/held"], world.timings["support/held"] = handle, timings
        await stand.until(stand.phase_is("held", Phase.READY), what="Ready")
        assert world.applies_of("held")[0].replicaCeiling == 2
        last = world.last("held")
        assert last is not None
        assert last.constraints is not None
        assert last.constraints.maxReplicas == 2
        first_run = (await step("describe", handle.describe())).run_id
        current = temporal_client.get_workflow_handle(handle.id)

        async def continued() -> bool:
            return (await step("describe", current.describe())).run_id != first_run

        await stand.until(continued, what="continue-as-new")
        state = await step("query", current.query(OrderWorkflow.query_state))
        assert state.replicaCeiling == 2
        assert state.lastReport is not None
        applies, replans = len(world.applies_of("held")), state.replanCount
        await step("lift", current.signal(OrderWorkflow.set_replica_ceiling, None))
        await stand.until(lambda: world.applies_of("held")[-1].replicaCeiling is None, what="lifted")
        await asyncio.sleep(0.5)
        # Lifting the ceiling is a re-apply, not a replan (the half-second resync re-applies too).
        assert len(world.applies_of("held")) > applies
        assert (await step("query", current.query(OrderWorkflow.query_state))).replanCount == replans
        # The first run, closed by continue-as-new: a complete history (a busy running one may end mid-task).
        first = temporal_client.get_workflow_handle(handle.id, run_id=first_run)
        history = await step("history", first.fetch_history())
    replayer = Replayer(workflows=[OrderWorkflow], data_converter=temporal_client.data_converter)
    await step("replay", replayer.replay_workflow(history))


def not_planned_here(request: PlanInput) -> PlanOutcome:
    raise AssertionError("the ceiling's check plans nothing")


async def test_an_apply_reads_a_donors_ceiling_from_the_history_even_while_nothing_runs_the_preemption_workflow(
    temporal_client: Client,
) -> None:
    """The apply's check of a ceiling (activities/preemption_ledger.py) reads what the preemption workflow
    told the order from its history: it agrees with the ledger, and it answers with no worker to run the
    workflow — where a query waits on one (a preemption workflow whose task fails left every apply
    retrying its query, docs/upgrade.md)."""
    world = new_world(capacity=400)
    metrics = PreemptionMetricsCollector()
    task_queue = f"preemption-{uuid.uuid4().hex[:8]}"
    async with running_worker(temporal_client, task_queue, world, metrics):
        stand = Stand(temporal_client, world, task_queue, metrics)
        await fill(stand)
        low, high = stand.handles["low"].id, stand.handles["high"].id
        preemption = stand.preemption().id
        assert await ceiling_told(temporal_client, preemption, low) is None

        stand.sim("high").load = 2
        await stand.until(lambda: stand.sim("low").ceiling == 2, what="low held")
        ledger = (await stand.preemption_state()).ledger.ceilings
        assert ledger == {low: 2}
        assert await ceiling_told(temporal_client, preemption, low) == 2
        assert await ceiling_told(temporal_client, preemption, high) is None

    # No worker now: the workflow's state cannot be asked, its history still says what it told — and
    # the apply's own check answers from it (before, it queried, and waited as long as no worker ran).
    with pytest.raises((TimeoutError, RPCError)):
        await asyncio.wait_for(stand.preemption_state(), 3)
    apply_check = ActivityEnvironment(client=temporal_client)
    apply_check.info = dataclasses.replace(apply_check.info, task_queue=task_queue, workflow_id=low)
    order_activities = OrderActivities(ApiClient(), ModuleSettings(), planner=not_planned_here)
    # What the check reads of the request: the plan's device class, the asked ceiling, the order's name.
    asked = SimpleNamespace(deviceClass=world.device_class)
    request = cast(ApplyInput, SimpleNamespace(plan=asked, replicaCeiling=None, ref=SimpleNamespace(key="support/low")))
    checked = apply_check.run(order_activities._verified_ceiling, request)
    assert await asyncio.wait_for(checked, 10) == 2

    async with running_worker(temporal_client, task_queue, world, metrics):
        stand.sim("high").load = 1
        await stand.until(lambda: stand.sim("low").ceiling is None, timeout=60, what="low restored")
        assert await ceiling_told(temporal_client, preemption, low) is None
    assert await ceiling_told(temporal_client, f"preemption/{task_queue}/no-such-class", low) is None
