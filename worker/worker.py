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

# Modules of ours that a sandboxed workflow may import from outside the sandbox. Our log renderer
# (structlog, rich) must pass through: the SDK logs a failed workflow task from inside the sandbox.
# OpenTelemetry too: the tracing interceptor (worker/tracing.py) makes the workflows' spans with the
# process's tracer provider, and the log lines read the current span.
LOGGING_MODULES = ("structlog", "rich", "opentelemetry")
# The package holding the workflow definitions.
WORKFLOW_PACKAGE = "workflows"


def workflow_runner(isolate_workflow_modules: bool = False) -> SandboxedWorkflowRunner:
    """The sandbox the workflows run in.

    ``isolate_workflow_modules=False`` (the module's worker): the ``workflows`` package is passed
    through, imported once and shared by every workflow. Otherwise the sandbox imports a workflow's
    module afresh for each workflow it creates (each new order, each order evicted from the cache
    and replayed): measured with ``python -m benchmarks.workflow_instance``, 15 ms and 102 KiB a
    workflow against 0.8 ms and 14 KiB, which at a burst of thousands of orders is what the worker
    spends its time and memory on. The package is safe to share: its modules hold no mutable state,
    every read and write is an activity and every decision a pure function.

    ``isolate_workflow_modules=True`` (the workflow tests' workers): the module is re-imported in the
    sandbox, whose restrictions then catch a non-deterministic call in our workflow code (``datetime.now``,
    ``random``, I/O) when a test runs it. Temporal's own replay check guards production either way.
    """
    passthrough = LOGGING_MODULES if isolate_workflow_modules else (*LOGGING_MODULES, WORKFLOW_PACKAGE)
    return SandboxedWorkflowRunner(restrictions=SandboxRestrictions.default.with_passthrough_modules(*passthrough))


def build_worker(
    client: Client,
    task_queue: str,
    activities: Sequence[Callable[..., Any]],
    max_cached_workflows: int = WorkerSettings().cachedWorkflows,
    workflow_task_slots: int = WorkerSettings().workflowTaskSlots,
    activity_slots: int = WorkerSettings().activitySlots,
    isolate_workflow_modules: bool = False,
    **kwargs: Any,
) -> Worker:
    """The worker, with at most ``workflow_task_slots`` workflow tasks and ``activity_slots``
    activities in flight (see ``WorkerSettings`` for why far fewer than the SDK's 100), its
    workflows in ``workflow_runner(isolate_workflow_modules)``."""
    # The kubernetes client blocks: sync activities run on this pool, never on the event loop.
    return Worker(
        client,
        task_queue=task_queue,
        workflows=WORKFLOWS,
        activities=list(activities),
        activity_executor=ThreadPoolExecutor(max_workers=activity_slots),
        max_concurrent_activities=activity_slots,
        max_concurrent_workflow_tasks=workflow_task_slots,
        workflow_runner=workflow_runner(isolate_workflow_modules),
        max_cached_workflows=max_cached_workflows,
        **kwargs,
    )
