"""The Temporal worker hosting the order and preemption workflows and their activities."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from workflows.order import OrderWorkflow
from workflows.preemption import PreemptionWorkflow

WORKFLOWS: list[type] = [OrderWorkflow, PreemptionWorkflow]


def build_worker(
    client: Client,
    task_queue: str,
    activities: Sequence[Callable[..., Any]],
    max_cached_workflows: int = 1000,
    **kwargs: Any,
) -> Worker:
    # The kubernetes client blocks: sync activities run on this pool, never on the event loop.
    return Worker(
        client,
        task_queue=task_queue,
        workflows=WORKFLOWS,
        activities=list(activities),
        activity_executor=ThreadPoolExecutor(max_workers=16),
        # The SDK logs a failed workflow task from inside the sandbox; our log renderer (structlog,
        # rich) must pass through or that line is lost to RestrictedWorkflowAccessError.
        workflow_runner=SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules("structlog", "rich")
        ),
        max_cached_workflows=max_cached_workflows,
        **kwargs,
    )
