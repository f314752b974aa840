"""The outbox's fence against the real dev server: an observer that no longer leads sends nothing.

The fence is ``LeaderElector.leading`` (worker/observer/leader.py), asked before every send. Here it
is a flag: while it holds, a signal-with-start reaches the recording stand-in workflow; once it
drops (the renew deadline passed), what was queued is dropped as ``fenced`` — never sent, never
retried — and the workflow hears nothing more. The next leader derives it again from its listing.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import pytest
from prometheus_client import REGISTRY
from temporalio.client import Client

from inference_api.observation import OrderSignal
from inference_api.payloads import OrderRef, order_workflow_id
from worker.observer.outbox import Outbox, signal_to

pytestmark = pytest.mark.temporal


@contextlib.asynccontextmanager
async def running(outbox: Outbox) -> AsyncIterator[None]:
    task = asyncio.create_task(outbox.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def fenced(signal: str) -> float:
    labels = {"signal": signal, "outcome": "fenced"}
    return REGISTRY.get_sample_value("ai_inference_watcher_signals_total", labels) or 0.0


async def test_a_deposed_observer_sends_nothing_and_retries_nothing(temporal_client: Client, task_queue: str) -> None:
    leading = True
    outbox = Outbox(temporal_client, task_queue, senders=2, rpc_timeout_seconds=5, fence=lambda: leading)
    ref = OrderRef(namespace="team", name="fenced", uid=str(uuid.uuid4()))
    handle = temporal_client.get_workflow_handle(order_workflow_id(ref.namespace, ref.name, ref.uid))
    async with running(outbox):
        outbox.put(signal_to(ref, OrderSignal.SPEC_CHANGED, [1], start=True))
        await outbox.wait_idle(30)
        assert await handle.query("signals") == [[OrderSignal.SPEC_CHANGED, 1]]

        leading = False  # the renew deadline passed
        before = fenced(OrderSignal.SPEC_CHANGED)
        outbox.put(signal_to(ref, OrderSignal.SPEC_CHANGED, [2]))
        outbox.put(signal_to(ref, OrderSignal.DELETE))
        await outbox.wait_idle(30)
        # Dropped, not queued for a retry: the outbox is idle, nothing pending.
        assert outbox.idle()
        assert not outbox.pending
        assert fenced(OrderSignal.SPEC_CHANGED) == before + 1
        await asyncio.sleep(1)
        assert await handle.query("signals") == [[OrderSignal.SPEC_CHANGED, 1]]
