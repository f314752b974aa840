"""The first load waits outside the worker (``first-load-observed``): no activity outlives a step.

An order whose replicas are not ready after its apply sleeps on a timer (the serve wait) until the
observer says a replica got ready (``replica_ready``), then probes the API in one short activity.
So orders that never load hold none of the worker's activity slots: a delete of another order, or
a new order, goes through at once even with every slot's worth of orders loading.
"""

from __future__ import annotations

import asyncio
import time
import uuid

from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker

from inference_api.observation import OrderSignal
from inference_api.plan import PlanOutcome
from inference_api.reasons import Reason
from inference_api.types import ConditionStatus, Phase
from tests.factories import make_class, make_order, make_plan
from tests.polling import until
from tests.workflows.world import FAST, Harness, World, observing, start_order
from workflows.order import OrderWorkflow


async def pending_activities(harness: Harness, name: str) -> int:
    description = await harness.world.handles[f"support/{name}"].describe()
    return len(description.raw_description.pending_activities)


async def test_a_loading_order_holds_no_activity_and_gets_ready_when_told(harness: Harness) -> None:
    harness.world.loading.add("support/loads")
    handle = await harness.start(make_order("loads"))
    await harness.until(lambda: harness.world.condition("loads", "WorkloadReady") is not None, what="applied")
    assert harness.world.condition("loads", "WorkloadReady") == (ConditionStatus.FALSE, Reason.WORKLOAD_PROGRESSING)
    await asyncio.sleep(0.5)
    assert await pending_activities(harness, "loads") == 0
    assert harness.world.probe_waits == []
    assert harness.world.phase("loads") == (Phase.PENDING, Reason.WORKLOAD_PROGRESSING)

    await harness.world.let_load("loads")
    await harness.until(harness.phase_is(Phase.READY))
    assert harness.world.condition("loads", "WorkloadReady") == (ConditionStatus.TRUE, Reason.WORKLOAD_APPLIED)
    # One short probe, sized by the health settings, not the serve wait.
    assert harness.world.probe_waits == [FAST.failureThreshold * FAST.probeTimeoutSeconds]
    assert harness.world.serve_waits == []
    assert len(harness.world.applies) == 1  # the signal ended the wait: nothing was applied again
    state = await handle.query(OrderWorkflow.query_state)
    assert state.everReady


async def test_a_load_that_never_ends_is_told_after_the_serve_wait_and_looked_at_again(harness: Harness) -> None:
    harness.world.loading.add("support/slow")
    # The smallest model volume: the serve wait is 20 s (it grows with the volume, 20 s a GiB).
    harness.world.plan = lambda _: PlanOutcome(plan=make_plan().model_copy(update={"modelVolumeGiB": 1}))
    timings = FAST.model_copy(update={"serveWaitSeconds": 1.0})
    await harness.start(make_order("slow"), timings)
    # The order says it still waits for its workload (the first step not done) and why Ready is not.
    await harness.until(
        lambda: harness.world.condition("slow", "Ready") == (ConditionStatus.FALSE, Reason.HEALTH_CHECK_FAILED),
        timeout=30,
        what="Ready=False/HealthCheckFailed",
    )
    assert harness.world.phase("slow") == (Phase.PENDING, Reason.WORKLOAD_PROGRESSING)
    last = harness.world.last("slow")
    assert last is not None
    ready = next(c for c in last.conditions if c.type == "Ready")
    assert "no replica got ready" in ready.message
    # The re-look: the backoff timer reconciles again (applies, waits again); still no activity held.
    await harness.until(lambda: len(harness.world.applies_of("slow")) >= 2, what="looked at again")
    await harness.world.let_load("slow")
    await harness.until(harness.phase_is(Phase.READY), timeout=30)


async def test_an_edit_while_loading_is_acted_on_at_once(harness: Harness) -> None:
    harness.world.loading.add("support/edited")
    order = make_order("edited")
    handle = await harness.start(order)
    await harness.until(lambda: len(harness.world.applies_of("edited")) == 1, what="applied")
    edited = order.model_copy(deep=True)
    edited.metadata.generation = 2
    harness.world.orders["support/edited"] = edited
    await handle.signal(OrderWorkflow.spec_changed, 2)
    await harness.until(lambda: len(harness.world.applies_of("edited")) == 2, what="the edit applied")
    await harness.world.let_load("edited")
    await harness.until(harness.phase_is(Phase.READY))
    assert harness.world.last("edited").observedGeneration == 2  # type: ignore[union-attr]


async def test_deleting_a_loading_order_ends_its_wait(harness: Harness) -> None:
    harness.world.loading.add("support/gone")
    handle = await harness.start(make_order("gone"))
    await harness.until(lambda: len(harness.world.applies_of("gone")) == 1, what="applied")
    harness.world.delete_order("gone")
    await handle.signal(OrderWorkflow.delete)
    assert await asyncio.wait_for(handle.result(), 30) == "deleted"
    assert harness.world.probe_waits == []


async def test_orders_loading_in_every_activity_slot_leave_deletes_and_new_orders_unblocked(
    temporal_client: Client,
) -> None:
    """More orders loading than the worker has activity slots (2 here): a Ready order's delete and a
    new order still finish within seconds (before the patch each loading order held a slot)."""
    world = World()
    world.classes["default-llm"] = make_class()
    queue = f"orders-{uuid.uuid4()}"
    async with (
        Worker(
            temporal_client,
            task_queue=queue,
            workflows=[OrderWorkflow],
            activities=world.activities(),
            max_concurrent_activities=2,
            max_cached_workflows=0,
            workflow_failure_exception_types=[workflow.NondeterminismError],
        ),
        observing(world),
    ):
        ready = await start_order(temporal_client, queue, world, make_order("served"), FAST)
        await until(lambda: world.phase("served")[0] == Phase.READY, timeout=20, what="served Ready")
        for i in range(6):
            world.loading.add(f"support/loading-{i}")
            await start_order(temporal_client, queue, world, make_order(f"loading-{i}"), FAST)
        await until(
            lambda: all(world.phase(f"loading-{i}")[1] == Reason.WORKLOAD_PROGRESSING for i in range(6)),
            timeout=30,
            what="every loading order applied",
        )
        began = time.monotonic()
        world.delete_order("served")
        await ready.signal(OrderWorkflow.delete)
        assert await asyncio.wait_for(ready.result(), 20) == "deleted"
        await start_order(temporal_client, queue, world, make_order("newcomer"), FAST)
        await until(lambda: world.phase("newcomer")[0] == Phase.READY, timeout=20, what="newcomer Ready")
        assert time.monotonic() - began < 20
        # And the loading ones still load, each Ready once told.
        await world.let_load("loading-0")
        await until(lambda: world.phase("loading-0")[0] == Phase.READY, timeout=20, what="loading-0 Ready")
        await world.handles["support/loading-1"].signal(OrderSignal.REPLICA_READY, 0)  # nothing ready: ignored
        await asyncio.sleep(0.3)
        assert world.phase("loading-1") == (Phase.PENDING, Reason.WORKLOAD_PROGRESSING)
