"""The observer's outbox: every signal to an order workflow goes through here, and none is dropped
while Temporal cannot take it.

A delivery is keyed by (workflow id, signal): a newer one for the same key replaces the queued one
(``spec_changed`` keeps the highest generation, ``observed`` joins what it says), so a burst costs one
signal and a long outage does not grow the queue past one entry per order and signal. A delivery that
fails for a reason time can fix (Temporal unreachable, a timeout, overload) is tried again with an
exponential backoff, forever; the resync re-derives what matters meanwhile. One that cannot succeed
is counted and left: a plain signal to a workflow that does not run (``no_workflow``: the resync
starts it), a start refused because the order's workflow already completed (``closed``), anything
asked of an observer that no longer leads (``fenced``: the next leader derives it again).

Failures are logged at warning level with the order, the signal, the error's type and its gRPC
status, never the error's text.

**The start window.** A new order (one with no status yet: no workflow has carried it) starts its
workflow only while fewer than ``start_window`` new orders are between their start and their first
settled status (``decisions.start_settled``: Ready, failed, or waiting on something — a load,
capacity, an edit); the others wait here (namespaces in turn, below), each holding its place for at
most ``start_window_seconds`` once admitted. Why: a worker keeps ``worker.cachedWorkflows``
workflows in memory, and an order in progress has a workflow task every few seconds; a burst of
thousands started at once puts all of them in progress together, every task then finds its workflow
evicted and replays its history from the server, and the whole burst slows down together (measured:
10,000 at once on PostgreSQL, 1,332 Ready after 964 s). Admitted a window at a time, the first
orders of a burst are Ready in seconds and the worker's cache holds the orders in progress. Orders
already started (with a status), signals and the resync's starts of missing workflows are never
held.

**Namespaces in turn.** The new orders' starts that wait (for a place in the window, or for a sender)
are a :class:`planner.fairness.FairQueue` by namespace: first come first started within a namespace,
and the namespaces with starts waiting take turns, one start each. At most ``senders`` of them are on
their way (queued to send or in flight) at once, so a namespace's flood of hundreds does not sit in
the send queue ahead of another namespace's one order: that one is let out after at most one start of
every other waiting namespace (measured in ``benchmarks/start_fairness.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import structlog
from opentelemetry import trace
from temporalio.client import Client
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from inference_api.observation import ORDER_WORKFLOW_TYPE, ObservedChange, OrderSignal
from inference_api.payloads import OrderRef, order_workflow_id
from planner.fairness import FairQueue
from worker.observer.metrics import PENDING_SIGNALS, SIGNALS, START_WINDOW_ADMITTED, START_WINDOW_HELD
from workflows.order_state import OrderState

log = structlog.get_logger(__name__)
_tracer = trace.get_tracer("ai-inference.observer")

TERMINATE = "terminate"
MOVE_REASON = "moved to OrderWorkflowV2; its state is rebuilt from Kubernetes"
ORPHAN_REASON = "its order is gone (by uid) and it did not end on the delete signal"
# Errors retrying cannot fix: the request itself is wrong.
_PERMANENT = frozenset({RPCStatusCode.INVALID_ARGUMENT, RPCStatusCode.ALREADY_EXISTS})


@dataclass
class Delivery:
    """One signal (or termination) to one order workflow.

    ``start``: a signal-with-start of the order workflow type (made when it is missing).
    ``terminate_run``: terminate that run first (a legacy workflow being moved, or an orphan when no
    signal follows: ``signal == "terminate"``).
    """

    workflow_id: str
    signal: str
    args: list[Any] = field(default_factory=list)
    order: str = ""
    start: OrderRef | None = None
    terminate_run: str | None = None
    terminate_reason: str = MOVE_REASON
    attempts: int = 0
    due: float = 0.0
    # A start of a new order's workflow: it waits for a place in the start window.
    new_order: bool = False

    @property
    def key(self) -> tuple[str, str]:
        if self.terminate_run is not None and self.signal != TERMINATE:
            return (self.workflow_id, "move")
        return (self.workflow_id, self.signal)

    @property
    def label(self) -> str:
        return "move" if self.key[1] == "move" else self.signal


def signal_to(
    ref: OrderRef, signal: str, args: list[Any] | None = None, start: bool = False, new_order: bool = False
) -> Delivery:
    """``new_order``: the start of a new order's workflow (held by the start window)."""
    return Delivery(
        workflow_id=order_workflow_id(ref.namespace, ref.name, ref.uid),
        signal=signal,
        args=list(args or []),
        order=ref.key,
        start=ref if start else None,
        new_order=new_order and start,
    )


def namespace_of(delivery: Delivery) -> str:
    """The order's namespace (its turn in the start window)."""
    if delivery.start is not None:
        return delivery.start.namespace
    return delivery.order.partition("/")[0]


def merge(queued: Delivery, newer: Delivery) -> None:
    """Fold ``newer`` into the queued delivery of the same key."""
    if queued.signal == OrderSignal.SPEC_CHANGED and queued.args and newer.args:
        queued.args = [max(int(queued.args[0]), int(newer.args[0]))]
    elif (
        queued.signal == OrderSignal.OBSERVED
        and queued.args
        and newer.args
        and isinstance(queued.args[0], ObservedChange)
        and isinstance(newer.args[0], ObservedChange)
    ):
        first, second = queued.args[0], newer.args[0]
        what = first.what if second.what in first.what else f"{first.what}; {second.what}"
        queued.args = [ObservedChange(what=what[:1000], kind=first.kind or second.kind)]
    else:
        queued.args = newer.args
    queued.start = queued.start or newer.start
    queued.new_order = queued.new_order and newer.new_order
    if newer.terminate_run is not None:
        queued.terminate_run = newer.terminate_run
        queued.terminate_reason = newer.terminate_reason


def backoff_seconds(attempts: int, base: float = 1.0, cap: float = 60.0) -> float:
    return float(min(cap, base * (2 ** max(0, attempts - 1))))


class Outbox:
    def __init__(
        self,
        client: Client,
        task_queue: str,
        *,
        senders: int = 16,
        rpc_timeout_seconds: float = 10,
        max_backoff_seconds: float = 60,
        clock: Callable[[], float] = time.monotonic,
        fence: Callable[[], bool] | None = None,
        start_window: int = 0,
        start_window_seconds: float = 120.0,
    ) -> None:
        """``start_window``: new orders between their start and their first settled status at once (0:
        no bound); ``start_window_seconds``: the longest one holds its place once admitted."""
        self.client = client
        self.start_window = start_window
        self.start_window_seconds = start_window_seconds
        # workflow id → when its new order was admitted (its start queued); until settled or expired.
        self.admitted: dict[str, float] = {}
        # New orders' starts waiting for a place in the window or a sender: workflow id → delivery,
        # served by namespace in turn (first come first within one).
        self.held: FairQueue[str, Delivery] = FairQueue()
        # Workflow ids of new orders' starts let out of ``held`` and not yet sent (queued or in flight):
        # at most ``senders``, so the send queue never holds one namespace's flood ahead of another's.
        self.releasing: set[str] = set()
        # With leader election: true while this observer leads (worker/observer/leader.py); asked
        # before every send, so a deposed leader sends nothing from the instant its lease lapses.
        self.fence = fence
        self.task_queue = task_queue
        self.senders = senders
        self.rpc_timeout = timedelta(seconds=rpc_timeout_seconds)
        self.max_backoff = max_backoff_seconds
        self.clock = clock
        self.pending: dict[tuple[str, str], Delivery] = {}
        # key → the delivery on its way now (one per key: a newer one waits for it).
        self.in_flight: dict[tuple[str, str], Delivery] = {}
        self._heap: list[tuple[float, int, tuple[str, str]]] = []
        self._seq = itertools.count()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._rng = random.Random()
        # workflow id → when a signal-with-start of it was delivered (the resync leaves those alone
        # while visibility may not list them yet).
        self.started: dict[str, float] = {}

    def recently_started(self, within_seconds: float) -> set[str]:
        """Workflow ids started (signal-with-start delivered) in the last ``within_seconds``, and those
        whose start is queued or on its way (older records are dropped). A resync must not start
        those again: a second signal-with-start of a running workflow is a second signal."""
        horizon = self.clock() - within_seconds
        self.started = {wid: t for wid, t in self.started.items() if t >= horizon}
        on_the_way = itertools.chain(self.pending.values(), self.in_flight.values())
        return set(self.started) | set(self.held) | {d.workflow_id for d in on_the_way if d.start is not None}

    @property
    def starting(self) -> Counter[str]:
        """Workflow id → its signal-with-start deliveries on their way now."""
        return Counter(d.workflow_id for d in self.in_flight.values() if d.start is not None)

    # -------------------------------------------------------------------------- queueing

    def put(self, delivery: Delivery) -> None:
        wid = delivery.workflow_id
        held = self.held.get(wid)
        if held is not None:
            if delivery.new_order and delivery.key == held.key:
                merge(held, delivery)
                return
            # Anything else for an order whose start waits (its delete, a signal): it starts now.
            self.held.pop(wid)
            START_WINDOW_HELD.set(len(self.held))
            self._admit(held)
        elif delivery.new_order and wid not in self.admitted and wid not in self.releasing:
            # Waits for its namespace's turn (at once when nothing else waits and there is room).
            self.held.push(self.turn_of(delivery), wid, delivery)
            self._idle.clear()
            self._release()
            return
        self._queue(delivery)

    def turn_of(self, delivery: Delivery) -> str:
        """Whose turn a waiting start takes: its order's namespace."""
        return namespace_of(delivery)

    def settled(self, workflow_id: str) -> None:
        """The order's status says its workflow carried it to Ready, a failure or a wait (or the order
        is gone): its place in the start window goes to the next order waiting."""
        if self.admitted.pop(workflow_id, None) is not None:
            self._release()
        elif self.held.pop(workflow_id) is not None:  # gone before it started
            START_WINDOW_HELD.set(len(self.held))
            if self.idle():
                self._idle.set()

    def _expire(self) -> None:
        """Places held longer than ``start_window_seconds`` are freed (a workflow that never says)."""
        horizon = self.clock() - self.start_window_seconds
        for wid in [w for w, at in self.admitted.items() if at < horizon]:
            del self.admitted[wid]

    def _release(self) -> None:
        """Lets held starts out, namespaces in turn, while the window has places and fewer than
        ``senders`` let out are still on their way."""
        if self.start_window > 0:
            self._expire()
        while (
            self.held
            and (self.start_window <= 0 or len(self.admitted) < self.start_window)
            and len(self.releasing) < max(1, self.senders)
        ):
            wid, delivery = self.held.popleft()
            self.releasing.add(wid)
            self._admit(delivery)
        START_WINDOW_HELD.set(len(self.held))
        START_WINDOW_ADMITTED.set(len(self.admitted))
        if self.idle():
            self._idle.set()

    def _admit(self, delivery: Delivery) -> None:
        if self.start_window > 0:
            self.admitted[delivery.workflow_id] = self.clock()
        self._queue(delivery)

    def _sent(self, delivery: Delivery) -> None:
        """A delivery left (sent, given up, or back to wait for a retry): if it was a start let out of
        ``held``, its sender place goes to the next namespace in turn."""
        if delivery.workflow_id in self.releasing:
            self.releasing.discard(delivery.workflow_id)
            if self.held:
                self._release()

    def _queue(self, delivery: Delivery) -> None:
        key = delivery.key
        queued = self.pending.get(key)
        if queued is not None:
            merge(queued, delivery)
            return
        delivery.due = self.clock()
        self.pending[key] = delivery
        self._schedule(key, delivery.due)

    def _schedule(self, key: tuple[str, str], due: float) -> None:
        heapq.heappush(self._heap, (due, next(self._seq), key))
        self._idle.clear()
        PENDING_SIGNALS.set(len(self.pending))
        self._wake.set()

    def idle(self) -> bool:
        return not self.pending and not self.in_flight and not self.held

    async def wait_idle(self, timeout: float | None = None) -> None:
        """Until every queued delivery was sent or given up (tests, and a clean stop)."""
        await asyncio.wait_for(self._idle.wait(), timeout)

    # -------------------------------------------------------------------------- sending

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            for i in range(self.senders):
                group.create_task(self._sender(), name=f"outbox-sender-{i}")
            if self.start_window > 0:
                group.create_task(self._expiring(), name="outbox-start-window")

    async def _expiring(self) -> None:
        """Frees the places of admitted orders that never said, when no settled status comes to."""
        while True:
            await asyncio.sleep(min(5.0, max(0.1, self.start_window_seconds / 4)))
            if self.held:
                self._release()

    async def _next(self) -> Delivery:
        while True:
            now = self.clock()
            while self._heap:
                due, _, key = self._heap[0]
                queued = self.pending.get(key)
                if queued is None or queued.due != due:
                    heapq.heappop(self._heap)  # stale: sent, merged or rescheduled since
                    continue
                if due > now:
                    break
                heapq.heappop(self._heap)
                if key in self.in_flight:
                    # The same key is on its way: send this one after it (keeps their order).
                    queued.due = now + 0.05
                    self._schedule(key, queued.due)
                    continue
                del self.pending[key]
                self.in_flight[key] = queued
                return queued
            timeout = (self._heap[0][0] - now) if self._heap else None
            self._wake.clear()
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation that
            # arrives as the wake-up does, and the outbox would never stop.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()

    async def _sender(self) -> None:
        while True:
            delivery = await self._next()
            key = delivery.key
            try:
                outcome = await self._deliver(delivery)
            except asyncio.CancelledError:
                raise
            except Exception as err:  # the outbox must outlive any one failure
                outcome = "retry"
                self._log_failure(delivery, err)
            finally:
                self.in_flight.pop(key, None)
            SIGNALS.labels(delivery.label, outcome).inc()
            if outcome == "retry":
                self._retry(delivery)
            self._sent(delivery)
            PENDING_SIGNALS.set(len(self.pending))
            if self.idle():
                self._idle.set()

    def _retry(self, delivery: Delivery) -> None:
        delivery.attempts += 1
        wait = backoff_seconds(delivery.attempts, cap=self.max_backoff) * self._rng.uniform(0.8, 1.2)
        newer = self.pending.get(delivery.key)
        if newer is not None:
            # A newer one for the same key arrived meanwhile: it carries the latest word.
            merge(delivery, newer)
        delivery.due = self.clock() + wait
        self.pending[delivery.key] = delivery
        self._schedule(delivery.key, delivery.due)

    def _log_failure(self, delivery: Delivery, err: BaseException) -> None:
        status = err.status.name if isinstance(err, RPCError) else None
        log.warning(
            "order workflow not signalled, retrying",
            order=delivery.order,
            signal=delivery.label,
            error=type(err).__name__,
            status=status,
            attempt=delivery.attempts + 1,
        )

    async def _start(self, delivery: Delivery, ref: OrderRef) -> None:
        await self.client.start_workflow(
            ORDER_WORKFLOW_TYPE,
            OrderState(ref=ref),
            id=delivery.workflow_id,
            task_queue=self.task_queue,
            start_signal=delivery.signal,
            start_signal_args=delivery.args,
            # A completed order workflow is not restarted (it removed its finalizer); a failed or
            # terminated one is, so a fix or a legacy move picks the order up.
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
            static_summary=f"order {ref.namespace}/{ref.name}",
            rpc_timeout=self.rpc_timeout,
        )

    async def _deliver(self, delivery: Delivery) -> str:
        """One delivery, in a span of its own (a new order's start begins the order's trace: the
        workflow's spans join it through the start's headers), its log lines naming the order and
        the workflow."""
        attributes = {"ai_inference.order": delivery.order, "temporal.workflow_id": delivery.workflow_id}
        with (
            structlog.contextvars.bound_contextvars(order=delivery.order, workflow_id=delivery.workflow_id),
            _tracer.start_as_current_span(f"observer {delivery.label}", attributes=attributes) as span,
        ):
            outcome = await self._deliver_in_span(delivery)
            span.set_attribute("ai_inference.outcome", outcome)
            return outcome

    async def _deliver_in_span(self, delivery: Delivery) -> str:
        if self.fence is not None and not self.fence():
            # Dropped, not retried: this observer is being stopped, the next leader's listing and
            # resync derive the signal again.
            log.debug("order workflow not signalled: this observer does not lead", order=delivery.order)
            return "fenced"
        timeout = self.rpc_timeout.total_seconds() + 5
        try:
            if delivery.terminate_run is not None:
                handle = self.client.get_workflow_handle(delivery.workflow_id, run_id=delivery.terminate_run)
                try:
                    async with asyncio.timeout(timeout):
                        await handle.terminate(reason=delivery.terminate_reason, rpc_timeout=self.rpc_timeout)
                except RPCError as err:
                    if err.status != RPCStatusCode.NOT_FOUND:  # NOT_FOUND: that run already ended
                        raise
                delivery.terminate_run = None  # done: a retry only (re)starts
                log.info("order workflow terminated", order=delivery.order, reason=delivery.terminate_reason)
                if delivery.signal == TERMINATE:
                    return "sent"
            if delivery.start is not None:
                ref = delivery.start
                async with asyncio.timeout(timeout):
                    await self._start(delivery, ref)
            else:
                handle = self.client.get_workflow_handle(delivery.workflow_id)
                async with asyncio.timeout(timeout):
                    await handle.signal(delivery.signal, args=delivery.args, rpc_timeout=self.rpc_timeout)
        except WorkflowAlreadyStartedError:
            log.info("order workflow completed, not restarted", order=delivery.order, signal=delivery.label)
            return "closed"
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                log.info("no order workflow runs", order=delivery.order, signal=delivery.label)
                return "no_workflow"
            if err.status in _PERMANENT:
                log.warning(
                    "order workflow refused a signal",
                    order=delivery.order,
                    signal=delivery.label,
                    status=err.status.name,
                )
                return "refused"
            self._log_failure(delivery, err)
            return "retry"
        except (TimeoutError, RuntimeError, OSError) as err:
            self._log_failure(delivery, err)
            return "retry"
        if delivery.start is not None:
            self.started[delivery.workflow_id] = self.clock()
        log.debug("order signalled", order=delivery.order, signal=delivery.label, args=_loggable(delivery))
        return "sent"


def _loggable(delivery: Delivery) -> Any:
    """What a log line may say of a signal's argument: numbers and short strings (no secret travels in
    one, but keep the lines short)."""
    if delivery.args and isinstance(delivery.args[0], int | str):
        return delivery.args[0]
    return None
