"""A run whose workflow task fails nondeterministically is found by the resync and rebuilt
(worker/observer/repair.py), on the real dev server with the module's preemption workflow.

The stuck run is made the way the 100-order rollback made one (docs/upgrade.md): a worker wrote a
history the module's code does not replay — here a variant of the preemption workflow with one more
command per decision — and then the module's worker takes the run over.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.metrics import PreemptionMetricsCollector
from activities.preemption import PreemptionActivities
from inference_api.payloads import OrderRef
from inference_api.preemption import MemberReport, preemption_workflow_id
from tests.polling import until
from tests.workflows.world import PREEMPTION_TIMINGS
from worker.observer.repair import NONDETERMINISTIC, Repair, RepairLimiter, reset_point, stuck_query
from worker.worker import workflow_runner
from workflows.preemption import PreemptionState, PreemptionWorkflow

DEVICE_CLASS = "gpu-repair"


@workflow.defn(name="PreemptionWorkflow")
class PreemptionWorkflowOfAnotherCode(PreemptionWorkflow):
    """The module's workflow with one more command after each decision: its histories do not replay on
    the module's code past the first decision."""

    @workflow.init
    def __init__(self, state: PreemptionState) -> None:
        super().__init__(state)

    @workflow.run
    async def run(self, state: PreemptionState) -> str:
        return await super().run(state)

    async def _decide(self) -> None:
        await super()._decide()
        workflow.upsert_memo({"decided": self.state.decisions})


def report(name: str, sequence: int = 1) -> MemberReport:
    ref = OrderRef(namespace="support", name=name, uid=f"uid-{name}")
    return MemberReport(
        ref=ref,
        workflowId=f"order/support/{name}/uid-{name}",
        deviceClass=DEVICE_CLASS,
        sequence=sequence,
        priority=100,
        minReplicas=1,
        maxReplicas=2,
        desired=1,
        placed=1,
    )


@asynccontextmanager
async def worker(client: Client, task_queue: str, preemption: type[PreemptionWorkflow]) -> AsyncIterator[None]:
    activities = PreemptionActivities(PreemptionMetricsCollector(), PREEMPTION_TIMINGS)
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[preemption],
        activities=activities.all(),
        # The variant lives in this test module, which the sandbox would import afresh: not sandboxed.
        workflow_runner=workflow_runner() if preemption is PreemptionWorkflow else UnsandboxedWorkflowRunner(),
        max_cached_workflows=0,
    ):
        yield


async def test_a_run_stuck_on_a_nondeterminism_error_is_reset_and_decides_every_report_again(
    temporal_client: Client,
) -> None:
    await a_stuck_run_is_reset_and_decides_every_report_again(temporal_client, named_within=90)


async def a_stuck_run_is_reset_and_decides_every_report_again(client: Client, named_within: float) -> None:
    """The whole story on ``client``'s Temporal (the dev server here; the production one in
    tests/prodtemporal/test_repair_on_sql_visibility.py): ``named_within`` seconds for the server to
    name the stuck run (its threshold of failed attempts)."""
    task_queue = f"repair-{uuid.uuid4().hex[:8]}"
    workflow_id = preemption_workflow_id(task_queue, DEVICE_CLASS)
    handle = client.get_workflow_handle(workflow_id)

    async with worker(client, task_queue, PreemptionWorkflowOfAnotherCode):
        await client.start_workflow(
            PreemptionWorkflow.run,
            PreemptionState(deviceClass=DEVICE_CLASS, timings=PREEMPTION_TIMINGS),
            id=workflow_id,
            task_queue=task_queue,
            start_signal="observe",
            start_signal_args=[report("first")],
        )
        await until(
            lambda: handle.query(PreemptionWorkflow.query_state), what="the first decision", ignore=(Exception,)
        )
        await handle.signal(PreemptionWorkflow.observe, report("second"))

        async def decided_twice() -> bool:
            return (await handle.query(PreemptionWorkflow.query_state)).decisions >= 2

        await until(decided_twice, what="two decisions by the other code")
    stuck_run = (await handle.describe()).run_id

    async with worker(client, task_queue, PreemptionWorkflow):
        # The module's worker takes the run over at the next report, and cannot replay it.
        await handle.signal(PreemptionWorkflow.observe, report("third"))

        async def named_by_the_server() -> bool:
            listed = [e.id async for e in client.list_workflows(stuck_query(task_queue))]
            return listed == [workflow_id]

        await until(
            named_by_the_server, timeout=named_within, interval=1, what="TemporalReportedProblems names the run"
        )

        repair = Repair(client, task_queue)
        assert await repair.run_once() == [workflow_id]

        async def every_report_decided() -> PreemptionState | None:
            state = await handle.query(PreemptionWorkflow.query_state)
            members = {r.ref.name for r in state.reports.values() if not r.leaving}
            return state if members == {"first", "second", "third"} and not state.dirty else None

        state = await until(every_report_decided, timeout=60, what="the reset run decided every report")
        assert state.decisions >= 1
        described = await handle.describe()
        assert described.status == WorkflowExecutionStatus.RUNNING
        assert described.run_id != stuck_run
        # It moves again: a new report is decided.
        await handle.signal(PreemptionWorkflow.observe, report("fourth"))

        async def fourth_decided() -> bool:
            state = await handle.query(PreemptionWorkflow.query_state)
            return "fourth" in {r.ref.name for r in state.reports.values()} and not state.dirty

        await until(fourth_decided, what="a report after the reset decided")
        # Nothing is stuck now: the next resync resets nothing.
        assert await repair.run_once() == []


def completed(event_id: int) -> HistoryEvent:
    return HistoryEvent(event_id=event_id, event_type=EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)


def other(event_id: int, kind: EventType.ValueType) -> HistoryEvent:
    return HistoryEvent(event_id=event_id, event_type=kind)


def test_the_reset_point_is_the_first_completed_workflow_task() -> None:
    events = [
        other(1, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED),
        other(2, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED),
        other(3, EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED),
        other(4, EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED),
        completed(5),
        completed(9),
    ]
    assert reset_point(events) == 5


def test_a_run_that_never_completed_a_workflow_task_has_no_reset_point() -> None:
    events = [
        other(1, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED),
        other(2, EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED),
        other(3, EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED),
        other(4, EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED),
    ]
    assert reset_point(events) is None


def test_a_workflow_is_reset_at_most_once_per_interval() -> None:
    limiter = RepairLimiter(min_interval_seconds=600)
    assert limiter.due("preemption/q/gpu", now=0)
    limiter.reset_at("preemption/q/gpu", now=0)
    assert not limiter.due("preemption/q/gpu", now=599)
    assert limiter.due("preemption/q/other", now=599)
    assert limiter.due("preemption/q/gpu", now=600)
    # Ids not reset within the interval are forgotten (bounded).
    limiter.reset_at("preemption/q/other", now=1300)
    assert list(limiter.last) == ["preemption/q/other"]


def test_the_query_names_the_task_queue_and_the_servers_nondeterminism_cause() -> None:
    query = stuck_query("ai-inference")
    assert "TaskQueue = 'ai-inference'" in query
    assert "ExecutionStatus = 'Running'" in query
    assert f"TemporalReportedProblems IN ('{NONDETERMINISTIC}')" in query
    assert NONDETERMINISTIC == "cause=WorkflowTaskFailedCauseNonDeterministicError"
