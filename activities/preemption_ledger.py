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

Read newest first (``GetWorkflowExecutionHistoryReverse``), so it stops at the first event that
answers; a run is at most ``PreemptionTimings.maxHistoryEvents`` long.
"""

from __future__ import annotations

from dataclasses import dataclass

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import Client
from temporalio.converter import PayloadConverter
from temporalio.service import RPCError, RPCStatusCode

from workflows.preemption import SET_REPLICA_CEILING, PreemptionState

PAGE_SIZE = 200


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
        started = event.workflow_execution_started_event_attributes
        if not started.input.payloads:
            return Told(None)
        [state] = converter.from_payloads(started.input.payloads, [PreemptionState])
        assert isinstance(state, PreemptionState)
        return Told(state.ceilings.get(order_workflow_id))
    return None


async def ceiling_told(client: Client, preemption_workflow_id: str, order_workflow_id: str) -> int | None:
    """The ceiling the preemption workflow's current run last told the order (None: none, or lifted)."""
    converter = client.data_converter.payload_converter
    request = GetWorkflowExecutionHistoryReverseRequest(
        namespace=client.namespace,
        execution=WorkflowExecution(workflow_id=preemption_workflow_id),
        maximum_page_size=PAGE_SIZE,
    )
    while True:
        try:
            page = await client.workflow_service.get_workflow_execution_history_reverse(request, retry=True)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
        for event in page.history.events:
            told = ceiling_told_by(event, order_workflow_id, converter)
            if told is not None:
                return told.ceiling
        if not page.next_page_token:
            # A history always begins with its start event; an empty one is a run not there yet.
            return None
        request.next_page_token = page.next_page_token
