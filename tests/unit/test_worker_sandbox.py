"""The module's worker shares the workflow modules between workflows; the tests' workers isolate them.

A workflow instance is created for each new order and for each order replayed after the worker's
cache evicted it. Isolated, the sandbox re-imports ``workflows/order.py`` for each (what
``benchmarks/workflow_instance.py`` measures at ~15x the time and ~8x the memory)."""

from __future__ import annotations

import asyncio
from typing import Any

from benchmarks.workflow_instance import details
from worker.worker import workflow_runner
from workflows.order import OrderWorkflow


def workflow_class(instance: Any) -> type:
    """The class the sandbox instantiated for this workflow (the SDK's sandbox instance keeps it)."""
    cls = instance.globals_and_locals["__temporal_workflow_class"]
    assert isinstance(cls, type)
    assert cls.__name__ == "OrderWorkflow"
    return cls


async def instances(isolate: bool) -> list[Any]:
    runner = workflow_runner(isolate_workflow_modules=isolate)
    return [runner.create_instance(details()) for _ in range(2)]


def test_the_module_worker_imports_the_order_workflow_once_for_every_order() -> None:
    first, second = asyncio.run(instances(isolate=False))
    assert workflow_class(first) is OrderWorkflow
    assert workflow_class(second) is OrderWorkflow


def test_an_isolating_worker_imports_the_order_workflow_afresh_for_each_order() -> None:
    first, second = asyncio.run(instances(isolate=True))
    assert workflow_class(first) is not OrderWorkflow
    assert workflow_class(second) is not workflow_class(first)
