"""The observer's Temporal side against the real dev server: resync (missing, legacy, orphan, stale
release) and the outbox's retries while Temporal cannot be reached.

Stand-in workflows (tests/observer/recording.py) are registered under the order workflow's type
names ("OrderWorkflowV2", and the legacy "OrderWorkflow"); they record every signal they receive.
Each test runs on its own task queue, which the resync's listing is scoped to.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from prometheus_client import REGISTRY
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.contrib.pydantic import pydantic_data_converter

from inference_api.observation import ORDER_WORKFLOW_TYPE, ObservedChange, OrderSignal
from inference_api.payloads import OrderRef, order_workflow_id
from tests.tcp_proxy import Proxy
from worker.observer.decisions import ListedOrder, running_order_query
from worker.observer.outbox import MOVE_REASON, Delivery, Outbox, signal_to
from worker.observer.resync import Resync
from workflows.search_attributes import ORDER_RELEASE

pytestmark = pytest.mark.temporal

FINGERPRINT = "fp-current"


def order(name: str, generation: int = 1, deleting: bool = False) -> ListedOrder:
    return ListedOrder(OrderRef(namespace="team", name=name, uid=str(uuid.uuid4())), generation, deleting)


def wid(ref: OrderRef) -> str:
    return order_workflow_id(ref.namespace, ref.name, ref.uid)


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 30, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


async def signals_of(client: Client, workflow_id: str) -> list[list[Any]]:
    result: list[list[Any]] = await client.get_workflow_handle(workflow_id).query("signals")
    return result


async def running_types(client: Client, queue: str) -> dict[str, str]:
    return {w.id: w.workflow_type async for w in client.list_workflows(running_order_query(queue))}


@contextlib.asynccontextmanager
async def run_outbox(outbox: Outbox) -> AsyncIterator[None]:
    task = asyncio.create_task(outbox.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def counter(signal: str, outcome: str) -> float:
    value = REGISTRY.get_sample_value("ai_inference_watcher_signals_total", {"signal": signal, "outcome": outcome})
    return value or 0.0


async def test_resync_starts_moves_ends_orphans_and_tells_a_new_release(
    temporal_client: Client, task_queue: str
) -> None:
    client = temporal_client
    missing, legacy, orphan, stale, current, deleting = (
        order("missing", generation=3),
        order("legacy", generation=2),
        order("orphan"),
        order("stale"),
        order("current"),
        order("deleting", generation=4, deleting=True),
    )

    async def start(type_: str, o: ListedOrder, release: str | None = None) -> None:
        attributes = TypedSearchAttributes([SearchAttributePair(ORDER_RELEASE, release)]) if release else None
        await client.start_workflow(
            type_, {"ref": o.ref.model_dump()}, id=wid(o.ref), task_queue=task_queue, search_attributes=attributes
        )

    await start("OrderWorkflow", legacy)
    legacy_run = (await client.get_workflow_handle(wid(legacy.ref)).describe()).run_id
    await start(ORDER_WORKFLOW_TYPE, orphan, FINGERPRINT)
    await start(ORDER_WORKFLOW_TYPE, stale, "fp-old")
    await start(ORDER_WORKFLOW_TYPE, current, FINGERPRINT)

    async def listed(expected: dict[str, str]) -> bool:
        return await running_types(client, task_queue) == expected

    before = {
        wid(legacy.ref): "OrderWorkflow",
        wid(orphan.ref): ORDER_WORKFLOW_TYPE,
        wid(stale.ref): ORDER_WORKFLOW_TYPE,
        wid(current.ref): ORDER_WORKFLOW_TYPE,
    }
    await eventually(lambda: listed(before), what="visibility lists the seeded workflows")

    outbox = Outbox(client, task_queue, senders=4, rpc_timeout_seconds=5)
    resync = Resync(client, task_queue, outbox, FINGERPRINT)
    the_orders = [missing, legacy, stale, current, deleting]  # the orphan's order is gone
    async with run_outbox(outbox):
        plan = await resync.run_once(lambda: the_orders)
        assert plan.counts() == {"start": 2, "move": 1, "delete": 1, "terminate": 0, "redelete": 0, "settings": 1}
        await outbox.wait_idle(30)

        # Missing: started as the new type with spec_changed(generation); a deleting one with delete.
        assert await signals_of(client, wid(missing.ref)) == [[OrderSignal.SPEC_CHANGED, 3]]
        assert await signals_of(client, wid(deleting.ref)) == [[OrderSignal.DELETE]]
        described = await client.get_workflow_handle(wid(missing.ref)).describe()
        assert described.workflow_type == ORDER_WORKFLOW_TYPE
        assert described.status == WorkflowExecutionStatus.RUNNING

        # Legacy: its run terminated (with the reason), a new-type run started in its place.
        old = await client.get_workflow_handle(wid(legacy.ref), run_id=legacy_run).describe()
        assert old.status == WorkflowExecutionStatus.TERMINATED
        history = await client.get_workflow_handle(wid(legacy.ref), run_id=legacy_run).fetch_history()
        reasons = [
            e.workflow_execution_terminated_event_attributes.reason
            for e in history.events
            if e.HasField("workflow_execution_terminated_event_attributes")
        ]
        assert reasons == [MOVE_REASON]
        moved = await client.get_workflow_handle(wid(legacy.ref)).describe()
        assert moved.workflow_type == ORDER_WORKFLOW_TYPE
        assert moved.run_id != legacy_run
        assert await signals_of(client, wid(legacy.ref)) == [[OrderSignal.SPEC_CHANGED, 2]]

        # Orphan: told delete first, still running.
        assert await signals_of(client, wid(orphan.ref)) == [[OrderSignal.DELETE]]
        # Stale release: told the release in force; the current one hears nothing.
        assert await signals_of(client, wid(stale.ref)) == [[OrderSignal.SETTINGS_CHANGED, FINGERPRINT]]
        assert await signals_of(client, wid(current.ref)) == []

        after = {
            wid(missing.ref): ORDER_WORKFLOW_TYPE,
            wid(deleting.ref): ORDER_WORKFLOW_TYPE,
            wid(legacy.ref): ORDER_WORKFLOW_TYPE,
            wid(orphan.ref): ORDER_WORKFLOW_TYPE,
            wid(stale.ref): ORDER_WORKFLOW_TYPE,
            wid(current.ref): ORDER_WORKFLOW_TYPE,
        }
        await eventually(lambda: listed(after), what="visibility lists the started and moved workflows")

        # The next resync: the orphan, still running, is terminated; nothing else is sent again
        # (the stale one was told already; the deleting one hears delete again: re-derived).
        plan = await resync.run_once(lambda: the_orders)
        assert plan.counts() == {"start": 0, "move": 0, "delete": 0, "terminate": 1, "redelete": 1, "settings": 0}
        await outbox.wait_idle(30)
        ended = await client.get_workflow_handle(wid(orphan.ref)).describe()
        assert ended.status == WorkflowExecutionStatus.TERMINATED
        assert await signals_of(client, wid(stale.ref)) == [[OrderSignal.SETTINGS_CHANGED, FINGERPRINT]]
        assert await signals_of(client, wid(deleting.ref)) == [[OrderSignal.DELETE], [OrderSignal.DELETE]]


async def test_a_resync_leaves_alone_an_order_whose_start_is_queued_or_on_its_way(
    temporal_client: Client, task_queue: str
) -> None:
    """The watch's ADDED and the first resync race for a new order: one start, so one signal heard."""
    client = temporal_client

    class GatedOutbox(Outbox):
        """Holds a signal-with-start at the door, as a slow Temporal would."""

        entered = asyncio.Event()
        gate = asyncio.Event()

        async def _start(self, delivery: Delivery, ref: OrderRef) -> None:
            self.entered.set()
            await self.gate.wait()
            await super()._start(delivery, ref)

    fresh = order("fresh")
    outbox = GatedOutbox(client, task_queue, senders=2, rpc_timeout_seconds=5)
    resync = Resync(client, task_queue, outbox, FINGERPRINT)
    outbox.put(signal_to(fresh.ref, OrderSignal.SPEC_CHANGED, [1], start=True))  # the watch's ADDED
    # Queued, not sent yet: not started again.
    assert (await resync.run_once(lambda: [fresh])).counts()["start"] == 0
    async with run_outbox(outbox):
        await asyncio.wait_for(outbox.entered.wait(), 10)
        # On its way, not yet delivered: not started again either.
        assert (await resync.run_once(lambda: [fresh])).counts()["start"] == 0
        outbox.gate.set()
        await outbox.wait_idle(30)
        assert await signals_of(client, wid(fresh.ref)) == [[OrderSignal.SPEC_CHANGED, 1]]
        assert outbox.starting == {}


# ------------------------------------------------------------------- Temporal unreachable


async def test_signals_refused_while_temporal_is_unreachable_are_delivered_once_it_answers(
    temporal_client: Client, task_queue: str
) -> None:
    proxy = Proxy(temporal_client.service_client.config.target_host)
    await proxy.open()
    through_proxy = await Client.connect(
        proxy.address, data_converter=pydantic_data_converter, tls=temporal_client.service_client.config.tls
    )
    running = order("running")
    fresh = order("fresh", generation=7)
    await temporal_client.start_workflow(
        ORDER_WORKFLOW_TYPE, {"ref": running.ref.model_dump()}, id=wid(running.ref), task_queue=task_queue
    )

    outbox = Outbox(through_proxy, task_queue, senders=2, rpc_timeout_seconds=2, max_backoff_seconds=1)
    before = {signal: counter(signal, "retry") for signal in (OrderSignal.OBSERVED, OrderSignal.SPEC_CHANGED)}
    async with run_outbox(outbox):
        await proxy.close()
        outbox.put(
            signal_to(running.ref, OrderSignal.OBSERVED, [ObservedChange(what="Service x deleted", kind="Service")])
        )
        outbox.put(signal_to(fresh.ref, OrderSignal.SPEC_CHANGED, [7], start=True))

        async def both_refused() -> bool:
            return all(counter(signal, "retry") > value for signal, value in before.items())

        await eventually(both_refused, timeout=60, what="the outbox retrying while the server is unreachable")
        assert not outbox.idle()
        assert await signals_of(temporal_client, wid(running.ref)) == []

        await proxy.open()
        await outbox.wait_idle(60)

    assert await signals_of(temporal_client, wid(running.ref)) == [
        [OrderSignal.OBSERVED, {"what": "Service x deleted", "kind": "Service"}]
    ]
    assert await signals_of(temporal_client, wid(fresh.ref)) == [[OrderSignal.SPEC_CHANGED, 7]]
    await proxy.close()
