"""Stand-in order workflows for the observer's tests: registered under the order workflow's type names
(the current "OrderWorkflowV2" and the legacy "OrderWorkflow"), they record every signal they receive
and answer the list to the ``signals`` query. Kept apart from the tests so the workflow sandbox imports
nothing but this."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from inference_api.observation import LEGACY_ORDER_WORKFLOW_TYPES, ORDER_WORKFLOW_TYPE


class _Recorder:
    def __init__(self) -> None:
        self.signals: list[list[Any]] = []

    @workflow.signal(dynamic=True)
    def record(self, name: str, args: Sequence[RawValue]) -> None:
        converter = workflow.payload_converter()
        self.signals.append([name, *(converter.from_payload(a.payload) for a in args)])

    @workflow.query(name="signals")
    def query_signals(self) -> list[list[Any]]:
        return self.signals


@workflow.defn(name=ORDER_WORKFLOW_TYPE)
class RecordingOrderWorkflowV2(_Recorder):
    @workflow.run
    async def run(self, state: dict[str, Any]) -> None:
        await workflow.wait_condition(lambda: False)


@workflow.defn(name=LEGACY_ORDER_WORKFLOW_TYPES[0])
class RecordingLegacyOrderWorkflow(_Recorder):
    @workflow.run
    async def run(self, state: dict[str, Any]) -> None:
        await workflow.wait_condition(lambda: False)
