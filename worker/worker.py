"""The Temporal worker hosting the order and preemption workflows and their activities."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from inference_api.settings import WorkerSettings
from workflows.order import OrderWorkflow
from workflows.preemption import PreemptionWorkflow

WORKFLOWS: list[type] = [OrderWorkflow, PreemptionWorkflow]


def build_worker(
    client: Client,
    task_queue: str,
    activities: Sequence[Callable[..., Any]],
    max_cached_workflows: int = WorkerSettings().cachedWorkflows,
    workflow_task_slots: int = WorkerSettings().workflowTaskSlots,
    activity_slots: int = WorkerSettings().activitySlots,
    **kwargs: Any,
) -> Worker:
    """The worker, with at most ``workflow_task_slots`` workflow tasks and ``activity_slots``
    activities in flight (see ``WorkerSettings`` for why far fewer than the SDK's 100)."""
    # The kubernetes client blocks: sync activities run on this pool, never on the event loop.
    return Worker(
        client,
        task_queue=task_queue,
        workflows=WORKFLOWS,
        activities=list(activities),
        activity_executor=ThreadPoolExecutor(max_workers=activity_slots),
        max_concurrent_activities=activity_slots,
        max_concurrent_workflow_tasks=workflow_task_slots,
        # The SDK logs a failed workflow task from inside the sandbox; our log renderer (structlog,
        # rich) must pass through or that line is lost to RestrictedWorkflowAccessError.
        workflow_runner=SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules("structlog", "rich")
        ),
        max_cached_workflows=max_cached_workflows,
        **kwargs,
    )
