"""The replica ceiling a device class's preemption workflow told an order, read from its history.

Why the history and not a query: a query is answered by a worker running the workflow's code, so an
apply that asks depends on that workflow being able to run — when its task failed (a nondeterminism
error in the 100-order rollback, docs/upgrade.md) the query never answered and every new order's apply
retried it forever. The history is the server's: it answers whatever state the workflow's code is in,
and it holds only what the preemption workflow's own commands wrote. What the ceiling is:

* the input of the last ``set_replica_ceiling`` signal the run sent to the order
  (``SignalExternalWorkflowExecutionInitiated``: a command of that workflow, never a client's signal);
* else what the run was started with (``PreemptionState.ceilings``, carried by continue-as-new);
* else nothing (no preemption workflow for the device class: nobody lowered anything).

Read newest first (``GetWorkflowExecutionHistoryReverse``). :class:`CeilingReader`, one per worker
process, keeps what a run told every order up to the last event it read (a :class:`CeilingsTold`) and
reads only the events written since: an apply costs a describe and the run's new events, not the
run's whole history (a run is at most ``PreemptionTimings.maxHistoryEvents`` long, read once per
process; ``benchmarks/ceiling_read.py`` measures both). A new run (continue-as-new) is read afresh.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import (
    DescribeWorkflowExecutionRequest,
    GetWorkflowExecutionHistoryReverseRequest,
)
from temporalio.client import Client
from temporalio.converter import PayloadConverter
from temporalio.service import RPCError, RPCStatusCode

from workflows.preemption import SET_REPLICA_CEILING, PreemptionState

PAGE_SIZE = 200
# A ledger's next read: most applies find a few new events, or none. The server answers whole batches
# of events (signals that arrived together are one), so a page may hold more than asked.
NEWER_PAGE_SIZE = 32


@dataclass(frozen=True)
class Told:
    """What one event says about the order's ceiling (``ceiling`` None: lifted, or never lowered)."""

    ceiling: int | None


def ceiling_told_by(event: HistoryEvent, order_workflow_id: str, converter: PayloadConverter) -> Told | None:
    """The ceiling ``event`` tells ``order_workflow_id``, or None when it says nothing about it. Pure;
    ``converter`` reads the payloads (the client's)."""
    if event.event_type == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
        attributes = event.signal_external_workflow_execution_initiated_event_attributes
        if attributes.signal_name != SET_REPLICA_CEILING:
            return None
        if attributes.workflow_execution.workflow_id != order_workflow_id:
            return None
        if not attributes.input.payloads:
            return Told(None)
        [value] = converter.from_payloads(attributes.input.payloads, [int | None])  # type: ignore[list-item]
        return Told(int(value) if value is not None else None)
    if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        return Told(started_ceilings(event, converter).get(order_workflow_id))
    return None


def started_ceilings(event: HistoryEvent, converter: PayloadConverter) -> dict[str, int]:
    """The ceilings a run's start event carries (``PreemptionState.ceilings``; none without input)."""
    started = event.workflow_execution_started_event_attributes
    if not started.input.payloads:
        return {}
    [state] = converter.from_payloads(started.input.payloads, [PreemptionState])
    assert isinstance(state, PreemptionState)
    return dict(state.ceilings)


@dataclass
class CeilingsTold:
    """What one run of a preemption workflow told every order, up to event ``upto`` (0: nothing read)."""

    runId: str
    upto: int = 0
    started: dict[str, int] = field(default_factory=dict)
    told: dict[str, int | None] = field(default_factory=dict)

    def ceiling(self, order_workflow_id: str) -> int | None:
        if order_workflow_id in self.told:
            return self.told[order_workflow_id]
        return self.started.get(order_workflow_id)


def fold(ledger: CeilingsTold, events: Iterable[HistoryEvent], converter: PayloadConverter) -> CeilingsTold:
    """``ledger`` with ``events`` (of its run, oldest first) folded in; events at or before ``upto`` are
    skipped, so a page read twice changes nothing. Pure: returns a new ledger."""
    out = CeilingsTold(ledger.runId, ledger.upto, dict(ledger.started), dict(ledger.told))
    for event in events:
        if event.event_id <= out.upto:
            continue
        out.upto = event.event_id
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            out.started = started_ceilings(event, converter)
        elif event.event_type == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
            attributes = event.signal_external_workflow_execution_initiated_event_attributes
            order = attributes.workflow_execution.workflow_id
            told = ceiling_told_by(event, order, converter)
            if told is not None:
                out.told[order] = told.ceiling
    return out


class CeilingReader:
    """Reads ceilings through a :class:`CeilingsTold` per preemption workflow, kept across applies."""

    def __init__(self) -> None:
        self.ledgers: dict[str, CeilingsTold] = {}
        self.events_read = 0
        self.pages_read = 0
        self._locks: dict[str, asyncio.Lock] = {}

    async def ceiling(self, client: Client, preemption_workflow_id: str, order_workflow_id: str) -> int | None:
        """The ceiling the preemption workflow's current run last told the order (None: none, or lifted)."""
        lock = self._locks.setdefault(preemption_workflow_id, asyncio.Lock())
        async with lock:
            run_id = await _current_run(client, preemption_workflow_id)
            if run_id is None:
                self.ledgers.pop(preemption_workflow_id, None)
                return None
            ledger = self.ledgers.get(preemption_workflow_id)
            if ledger is None or ledger.runId != run_id:
                ledger = CeilingsTold(run_id)
            newer = await self._events_after(client, preemption_workflow_id, ledger)
            if newer is None:  # the run went away between the describe and the read
                return None
            ledger = fold(ledger, reversed(newer), client.data_converter.payload_converter)
            self.ledgers[preemption_workflow_id] = ledger
            return ledger.ceiling(order_workflow_id)

    async def _events_after(self, client: Client, workflow_id: str, ledger: CeilingsTold) -> list[HistoryEvent] | None:
        """The run's events after ``ledger.upto``, newest first (None: not found)."""
        newer: list[HistoryEvent] = []
        page_size = NEWER_PAGE_SIZE if ledger.upto else PAGE_SIZE
        try:
            async for events in _pages_newest_first(client, workflow_id, ledger.runId, page_size):
                self.pages_read += 1
                self.events_read += len(events)
                for event in events:
                    if event.event_id <= ledger.upto:
                        return newer
                    newer.append(event)
        except _RunNotFoundError:
            return None
        return newer


class _RunNotFoundError(Exception):
    pass


async def _pages_newest_first(
    client: Client, workflow_id: str, run_id: str, page_size: int
) -> AsyncIterator[Sequence[HistoryEvent]]:
    """The run's history, a page at a time, newest event first (run_id "": the latest run)."""
    request = GetWorkflowExecutionHistoryReverseRequest(
        namespace=client.namespace,
        execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
        maximum_page_size=page_size,
    )
    while True:
        try:
            page = await client.workflow_service.get_workflow_execution_history_reverse(request, retry=True)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise _RunNotFoundError(workflow_id) from err
            raise
        yield page.history.events
        if not page.next_page_token:
            return
        request.next_page_token = page.next_page_token


async def _current_run(client: Client, workflow_id: str) -> str | None:
    """The run id of the workflow's latest run (running or closed), None when there is none."""
    request = DescribeWorkflowExecutionRequest(
        namespace=client.namespace, execution=WorkflowExecution(workflow_id=workflow_id)
    )
    try:
        described = await client.workflow_service.describe_workflow_execution(request, retry=True)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    return described.workflow_execution_info.execution.run_id or None


async def ceiling_told(client: Client, preemption_workflow_id: str, order_workflow_id: str) -> int | None:
    """The ceiling the preemption workflow's current run last told the order (None: none, or lifted),
    read without a ledger: newest first, stopping at the first event that answers."""
    converter = client.data_converter.payload_converter
    try:
        async for events in _pages_newest_first(client, preemption_workflow_id, "", PAGE_SIZE):
            for event in events:
                told = ceiling_told_by(event, order_workflow_id, converter)
                if told is not None:
                    return told.ceiling
    except _RunNotFoundError:
        return None
    # A history always begins with its start event; an empty one is a run not there yet.
    return None
