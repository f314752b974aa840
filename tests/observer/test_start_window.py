"""The observer's start window: at most ``observer.startWindow`` new orders between their workflow's
start and their first settled status; the others wait in the outbox, first come first started.

Against the real dev server (the starts are real signal-with-starts of the recording stand-ins) and
the observer's own event handling (informer items in, deliveries out).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from kubernetes.client import ApiClient
from temporalio.client import Client

from inference_api.observation import OrderSignal
from inference_api.payloads import OrderRef, order_workflow_id
from inference_api.settings import HealthSettings, ModuleSettings, ObserverSettings, TemporalSettings
from tests.observer.test_dispatch import order
from tests.observer.test_observer import eventually, run_outbox, signals_of
from worker.observer import Observer
from worker.observer import decisions as d
from worker.observer import informer as inf
from worker.observer.informer import Listed, Watched
from worker.observer.outbox import Outbox, signal_to
from worker.observer.resync import Resync

pytestmark = pytest.mark.temporal


def ref(name: str) -> OrderRef:
    return OrderRef(namespace="team", name=name, uid=str(uuid.uuid4()))


def wid(r: OrderRef) -> str:
    return order_workflow_id(r.namespace, r.name, r.uid)


async def started(client: Client, refs: list[OrderRef]) -> set[str]:
    """The orders whose workflow runs (listed by id: visibility may lag, a describe does not)."""
    out = set()
    for r in refs:
        try:
            await client.get_workflow_handle(wid(r)).describe()
        except Exception:  # NOT_FOUND: not started
            continue
        out.add(r.name)
    return out


async def test_new_orders_start_a_window_at_a_time_first_come_first_started(
    temporal_client: Client, task_queue: str
) -> None:
    client = temporal_client
    outbox = Outbox(client, task_queue, senders=4, rpc_timeout_seconds=5, start_window=2)
    refs = [ref(f"new-{i}") for i in range(5)]
    for r in refs:
        outbox.put(signal_to(r, OrderSignal.SPEC_CHANGED, [1], start=True, new_order=True))
    # An order that already has a status (its workflow carried it once) is never held.
    known = ref("known")
    outbox.put(signal_to(known, OrderSignal.SPEC_CHANGED, [3], start=True))
    assert list(outbox.held) == [wid(r) for r in refs[2:]]
    async with run_outbox(outbox):

        async def first_two() -> bool:
            return await started(client, [*refs, known]) == {"new-0", "new-1", "known"}

        await eventually(first_two, what="the window's two and the known order started")
        await asyncio.sleep(0.5)
        assert await started(client, refs) == {"new-0", "new-1"}  # the rest still wait
        # A resync finding them without a workflow does not start them behind the window's back.
        resync = Resync(client, task_queue, outbox, "fp")
        listed = [d.ListedOrder(r, 1, False) for r in refs] + [d.ListedOrder(known, 3, False)]
        assert (await resync.run_once(lambda: listed)).counts()["start"] == 0

        outbox.settled(wid(refs[0]))  # Ready: its place goes to the next in line

        async def third() -> bool:
            return await started(client, refs) == {"new-0", "new-1", "new-2"}

        await eventually(third, what="the next order started when one settled")
        # The held order's delete (or any other signal) starts it at once, whatever the window.
        outbox.put(signal_to(refs[4], OrderSignal.DELETE, start=True))

        async def deleted_one_started() -> bool:
            return "new-4" in await started(client, refs)

        await eventually(deleted_one_started, what="the held order's delete started it")

        async def told_both() -> bool:
            told = await signals_of(client, wid(refs[4]))
            # Two deliveries of two keys go out side by side (as before the window): either may be first.
            return sorted(t[0] for t in told) == sorted([OrderSignal.SPEC_CHANGED, OrderSignal.DELETE])

        await eventually(told_both, what="the started order's spec and its delete")
        # new-3 was held when new-4 went ahead; nothing settled since, so it still waits.
        assert list(outbox.held) == [wid(refs[3])]
        assert await started(client, refs) == {"new-0", "new-1", "new-2", "new-4"}


async def test_an_admitted_order_that_never_settles_frees_its_place_after_the_window_seconds(
    temporal_client: Client, task_queue: str
) -> None:
    outbox = Outbox(
        temporal_client, task_queue, senders=2, rpc_timeout_seconds=5, start_window=1, start_window_seconds=1
    )
    first, second = ref("first"), ref("second")
    for r in (first, second):
        outbox.put(signal_to(r, OrderSignal.SPEC_CHANGED, [1], start=True, new_order=True))
    assert list(outbox.held) == [wid(second)]
    async with run_outbox(outbox):

        async def both() -> bool:
            return await started(temporal_client, [first, second]) == {"first", "second"}

        await eventually(both, timeout=15, what="the second order started once the first's place expired")
        await outbox.wait_idle(10)


async def test_an_order_deleted_while_its_start_waits_is_never_started(
    temporal_client: Client, task_queue: str
) -> None:
    outbox = Outbox(temporal_client, task_queue, senders=2, rpc_timeout_seconds=5, start_window=1)
    first, gone = ref("first"), ref("gone")
    for r in (first, gone):
        outbox.put(signal_to(r, OrderSignal.SPEC_CHANGED, [1], start=True, new_order=True))
    outbox.settled(wid(gone))  # its order was deleted (no finalizer yet: no workflow needed)
    assert list(outbox.held) == []
    async with run_outbox(outbox):
        await outbox.wait_idle(10)
    assert await started(temporal_client, [first, gone]) == {"first"}


def observer(client: Client, window: int) -> Observer:
    settings = ModuleSettings(
        temporal=TemporalSettings(taskQueue="window"),
        health=HealthSettings(intervalSeconds=3600),
        observer=ObserverSettings(debounceSeconds=0.01, startWindow=window),
    )
    return Observer(ApiClient(), client, settings, resources=[], fingerprint="fp", read_secret=lambda ns, n: None)


def queued(obs: Observer) -> set[str]:
    return {key[0].split("/")[2] for key in obs.outbox.pending}


def held(obs: Observer) -> set[str]:
    return {w.split("/")[2] for w in obs.outbox.held}


async def test_the_observer_holds_new_orders_only_and_frees_a_place_on_a_settled_status(
    temporal_client: Client,
) -> None:
    obs = observer(temporal_client, window=1)
    serving: dict[str, Any] = {"phase": "Ready", "reason": "ProbeSucceeded"}
    obs.handle(
        Listed(inf.ORDER, [order("a", "u-a"), order("b", "u-b"), order("c", "u-c"), order("s", "u-s", **serving)])
    )
    # a takes the one place; b and c (no status: new) wait; s (carried before) is never held.
    assert queued(obs) == {"a", "s"}
    assert held(obs) == {"b", "c"}
    # a's workflow is working (Pending on a step): still in the window.
    working: dict[str, Any] = {"phase": "Pending", "reason": "LaunchPlanCalculated"}
    obs.handle(Watched(inf.ORDER, d.MODIFIED, order("a", "u-a", rv="2", **working)))
    assert held(obs) == {"b", "c"}
    # a waits for its first load: settled, b starts.
    loading: dict[str, Any] = {"phase": "Pending", "reason": "WorkloadProgressing"}
    obs.handle(Watched(inf.ORDER, d.MODIFIED, order("a", "u-a", rv="3", **loading)))
    assert held(obs) == {"c"}
    assert "b" in queued(obs)
    # b is deleted before it settles: its place goes to c.
    obs.handle(Watched(inf.ORDER, d.DELETED, order("b", "u-b", rv="2")))
    assert held(obs) == set()
    assert "c" in queued(obs)
