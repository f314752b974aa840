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

from activities.preemption_ledger import CeilingsTold, Told, ceiling_told_by, fold
from workflows.preemption import SCALING_BLOCKED, SET_REPLICA_CEILING, PreemptionState

DONOR = "order/support/low/uid-1"
OTHER = "order/support/other/uid-2"
CONVERTER = pydantic_data_converter.payload_converter


def payloads(*values: Any) -> Payloads:
    return Payloads(payloads=CONVERTER.to_payloads(list(values)))


def sent(signal: str, to: str, *args: Any, event_id: int = 0) -> HistoryEvent:
    return HistoryEvent(
        event_id=event_id,
        event_type=EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
        signal_external_workflow_execution_initiated_event_attributes=SignalExternalWorkflowExecutionInitiatedEventAttributes(
            signal_name=signal, workflow_execution=WorkflowExecution(workflow_id=to), input=payloads(*args)
        ),
    )


def started(state: PreemptionState) -> HistoryEvent:
    return HistoryEvent(
        event_id=1,
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


# ------------------------------------------------------------------ the ledger kept across applies


def run_events() -> list[HistoryEvent]:
    """A run started with DONOR at 3, then told DONOR 2, OTHER 1, DONOR lifted (oldest first)."""
    return [
        started(PreemptionState(deviceClass="gpu", ceilings={DONOR: 3})),
        sent(SET_REPLICA_CEILING, DONOR, 2, event_id=5),
        sent(SCALING_BLOCKED, OTHER, "no donor", event_id=6),
        sent(SET_REPLICA_CEILING, OTHER, 1, event_id=9),
        sent(SET_REPLICA_CEILING, DONOR, None, event_id=12),
    ]


def test_the_ledger_answers_what_the_newest_event_about_each_order_says() -> None:
    events = run_events()
    for upto in range(len(events) + 1):
        ledger = fold(CeilingsTold("run"), events[:upto], CONVERTER)
        for order in (DONOR, OTHER, "order/support/never/uid-3"):
            newest_first = list(reversed(events[:upto]))
            expected = next((t.ceiling for e in newest_first if (t := told(e, order)) is not None), None)
            assert ledger.ceiling(order) == expected, (upto, order)


def test_folding_in_pieces_is_folding_at_once_and_a_page_read_twice_changes_nothing() -> None:
    events = run_events()
    whole = fold(CeilingsTold("run"), events, CONVERTER)
    first = fold(CeilingsTold("run"), events[:2], CONVERTER)
    again = fold(first, events[:3], CONVERTER)  # event 5 again, then 6
    assert fold(again, events[3:], CONVERTER) == whole
    assert whole.upto == 12
    assert whole.told == {DONOR: None, OTHER: 1}
    assert whole.started == {DONOR: 3}


def test_fold_leaves_the_ledger_it_was_given_alone() -> None:
    base = fold(CeilingsTold("run"), run_events()[:2], CONVERTER)
    copy = CeilingsTold(base.runId, base.upto, dict(base.started), dict(base.told))
    fold(base, run_events()[2:], CONVERTER)
    assert base == copy
