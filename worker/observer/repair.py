"""Runs whose workflow task fails nondeterministically are rebuilt: reset to their first workflow task.

Why: a run whose history its code cannot replay never moves again — every attempt of its workflow task
replays the same history and fails the same way, while signals pile up unread (docs/upgrade.md: the
preemption workflow of a device class, at 100 orders, stopped deciding, its holds frozen). Every
workflow of the module can be rebuilt from its start input and its signals — an order workflow's are
hints it checks against the cluster, a preemption workflow's are the orders' reports — so the repair
resets such a run to its first workflow task with its signals reapplied: the code runs again from its
input, live, and every signal is decided anew. Nothing is lost that the cluster or the reports do not
say again; what a reset run re-does is idempotent (applies derive from the order, a ceiling is read
from the current run's history).

Which runs: the server names them — after a few consecutive failed workflow tasks it sets the system
search attribute ``TemporalReportedProblems`` with the failure's cause
(``system.numConsecutiveWorkflowTaskProblemsToTriggerSearchAttribute``), never a client. A run is
reset at most once per ``min_interval_seconds`` (a code that fails again right after its first task
is not hammered); the run id is named in the reset, so two observers cannot reset one run twice.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta

import structlog
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, ResetReapplyType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest, ResetWorkflowExecutionRequest
from temporalio.client import Client
from temporalio.service import RPCError

from worker.observer.decisions import in_shard
from worker.observer.metrics import REPAIRS

log = structlog.get_logger(__name__)

NONDETERMINISTIC = "cause=WorkflowTaskFailedCauseNonDeterministicError"
RESET_REASON = "ai-inference: its workflow task failed nondeterministically; rebuilt from its input and signals"
# The first workflow task completes within the first events (start, a signal-with-start's signal,
# scheduled, started, completed): one short page finds it.
FIRST_PAGE = 32


def stuck_query(task_queue: str) -> str:
    """The visibility query of this deployment's running workflows whose task fails nondeterministically."""
    return (
        f"TaskQueue = '{task_queue}' AND ExecutionStatus = 'Running' "
        f"AND TemporalReportedProblems IN ('{NONDETERMINISTIC}')"
    )


def reset_point(events: Iterable[HistoryEvent]) -> int | None:
    """The id of the run's first completed workflow task (None: it never completed one: nothing to reset
    to). Pure."""
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            return event.event_id
    return None


@dataclass
class RepairLimiter:
    """At most one reset of a workflow id per ``min_interval_seconds``. Pure (the clock is passed in)."""

    min_interval_seconds: float
    last: dict[str, float] = field(default_factory=dict)

    def due(self, workflow_id: str, now: float) -> bool:
        before = self.last.get(workflow_id)
        return before is None or now - before >= self.min_interval_seconds

    def reset_at(self, workflow_id: str, now: float) -> None:
        self.last[workflow_id] = now
        # Bounded: ids not reset for a while are forgotten.
        self.last = {wid: t for wid, t in self.last.items() if now - t < self.min_interval_seconds}


class Repair:
    def __init__(
        self,
        client: Client,
        task_queue: str,
        shards: int = 1,
        shard: int = 0,
        fence: Callable[[], bool] | None = None,
        min_interval_seconds: float = 1800,
        rpc_timeout_seconds: float = 30,
    ) -> None:
        self.client = client
        self.task_queue = task_queue
        self.shards = shards
        self.shard = shard
        self.fence = fence
        self.limiter = RepairLimiter(min_interval_seconds)
        self.rpc_timeout = timedelta(seconds=rpc_timeout_seconds)

    async def run_once(self) -> list[str]:
        """Reset every stuck run of this shard that is due; the ids of the workflows reset."""
        stuck = [
            (execution.id, execution.run_id, execution.workflow_type)
            async for execution in self.client.list_workflows(
                stuck_query(self.task_queue), rpc_timeout=self.rpc_timeout
            )
        ]
        done = []
        for workflow_id, run_id, workflow_type in stuck:
            if not in_shard(workflow_id, self.shards, self.shard) or not self.limiter.due(
                workflow_id, time.monotonic()
            ):
                continue
            if self.fence is not None and not self.fence():
                break  # no longer leading: the next leader lists them again
            if await self._reset(workflow_id, run_id, workflow_type):
                done.append(workflow_id)
        return done

    async def _reset(self, workflow_id: str, run_id: str, workflow_type: str) -> bool:
        execution = WorkflowExecution(workflow_id=workflow_id, run_id=run_id)
        service = self.client.workflow_service
        try:
            page = await service.get_workflow_execution_history(
                GetWorkflowExecutionHistoryRequest(
                    namespace=self.client.namespace, execution=execution, maximum_page_size=FIRST_PAGE
                ),
                retry=True,
                timeout=self.rpc_timeout,
            )
            point = reset_point(page.history.events)
            if point is None:
                log.warning("stuck workflow not reset: it never completed a workflow task", workflow=workflow_id)
                self.limiter.reset_at(workflow_id, time.monotonic())
                REPAIRS.labels(workflow_type, "no_reset_point").inc()
                return False
            await service.reset_workflow_execution(
                ResetWorkflowExecutionRequest(
                    namespace=self.client.namespace,
                    workflow_execution=execution,
                    reason=RESET_REASON,
                    workflow_task_finish_event_id=point,
                    request_id=str(uuid.uuid4()),
                    reset_reapply_type=ResetReapplyType.RESET_REAPPLY_TYPE_SIGNAL,
                ),
                retry=True,
                timeout=self.rpc_timeout,
            )
        except RPCError as err:
            # Closed or reset by another observer meanwhile, or Temporal away: the next resync looks again.
            log.warning("stuck workflow not reset", workflow=workflow_id, status=err.status.name)
            REPAIRS.labels(workflow_type, "failed").inc()
            return False
        self.limiter.reset_at(workflow_id, time.monotonic())
        REPAIRS.labels(workflow_type, "reset").inc()
        log.warning("stuck workflow reset to its first workflow task", workflow=workflow_id, type=workflow_type)
        return True
