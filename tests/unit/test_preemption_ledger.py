"""The ceiling an apply reads from the preemption workflow's history (activities/preemption_ledger.py):
which events tell an order its ceiling, over payloads encoded by the module's own data converter."""

from __future__ import annotations

from typing import Any

from temporalio.api.common.v1 import Payloads, WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import (
    HistoryEvent,
    SignalExternalWorkflowExecutionInitiatedEventAttributes,
    WorkflowExecutionSignaledEventAttributes,
    WorkflowExecutionStartedEventAttributes,
)
from temporalio.contrib.pydantic import pydantic_data_converter

from activities.preemption_ledger import Told, ceiling_told_by
from workflows.preemption import SCALING_BLOCKED, SET_REPLICA_CEILING, PreemptionState

DONOR = "order/support/low/uid-1"
OTHER = "order/support/other/uid-2"
CONVERTER = pydantic_data_converter.payload_converter


def payloads(*values: Any) -> Payloads:
    return Payloads(payloads=CONVERTER.to_payloads(list(values)))


def sent(signal: str, to: str, *args: Any) -> HistoryEvent:
    return HistoryEvent(
        event_type=EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
        signal_external_workflow_execution_initiated_event_attributes=SignalExternalWorkflowExecutionInitiatedEventAttributes(
            signal_name=signal, workflow_execution=WorkflowExecution(workflow_id=to), input=payloads(*args)
        ),
    )


def started(state: PreemptionState) -> HistoryEvent:
    return HistoryEvent(
        event_type=EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
        workflow_execution_started_event_attributes=WorkflowExecutionStartedEventAttributes(input=payloads(state)),
    )


def told(event: HistoryEvent, order: str = DONOR) -> Told | None:
    return ceiling_told_by(event, order, CONVERTER)


def test_a_ceiling_signal_the_preemption_workflow_sent_to_the_order_tells_it() -> None:
    assert told(sent(SET_REPLICA_CEILING, DONOR, 2)) == Told(2)


def test_a_lifted_ceiling_tells_none_and_stops_the_search() -> None:
    # Told(None), not None: the lift is the answer, older events are not read.
    assert told(sent(SET_REPLICA_CEILING, DONOR, None)) == Told(None)


def test_a_ceiling_sent_to_another_order_or_another_signal_says_nothing() -> None:
    assert told(sent(SET_REPLICA_CEILING, OTHER, 1)) is None
    assert told(sent(SCALING_BLOCKED, DONOR, "no donor")) is None


def test_a_signal_someone_sent_to_the_preemption_workflow_says_nothing() -> None:
    # Only the workflow's own commands count: a signal received (anyone can send one) is not read.
    received = HistoryEvent(
        event_type=EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
        workflow_execution_signaled_event_attributes=WorkflowExecutionSignaledEventAttributes(
            signal_name=SET_REPLICA_CEILING, input=payloads(1)
        ),
    )
    assert told(received) is None


def test_the_start_of_a_run_tells_what_continue_as_new_carried() -> None:
    state = PreemptionState(deviceClass="gpu", ceilings={DONOR: 3})
    assert told(started(state)) == Told(3)
    assert told(started(state), OTHER) == Told(None)


def test_a_run_started_without_input_tells_no_ceiling() -> None:
    bare = HistoryEvent(
        event_type=EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
        workflow_execution_started_event_attributes=WorkflowExecutionStartedEventAttributes(),
    )
    assert told(bare) == Told(None)
