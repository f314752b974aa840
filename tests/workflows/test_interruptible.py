"""``OrderWorkflow._interruptible``: a delete cancels the running step and the step's cancellation is
swallowed; a cancellation of the workflow's own coroutine is not (the SDK cancels every task of a
workflow it evicts from its cache: swallowed, the order's loop would run on through the eviction,
which the worker then reports as "Timed out running eviction job" / "tasks remain").

Pure asyncio: ``workflow.wait_condition`` stands in as a poll of its condition, and the eviction as
the SDK does it (``_apply_remove_from_cache``: ``task.cancel()`` on every task of the workflow)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio import workflow

from workflows.order import OrderWorkflow


@pytest.fixture
def order(monkeypatch: pytest.MonkeyPatch) -> tuple[OrderWorkflow, SimpleNamespace]:
    async def wait_condition(fn: Callable[[], bool], **_: Any) -> None:
        while not fn():
            await asyncio.sleep(0.001)

    monkeypatch.setattr(workflow, "wait_condition", wait_condition)
    wf = OrderWorkflow.__new__(OrderWorkflow)
    wf._interrupting = False
    state = SimpleNamespace(deleteRequested=False, dirty=False)
    wf._require_state = lambda: state  # type: ignore[assignment,method-assign,return-value]
    return wf, state


def slow_to_cancel(cancelled: asyncio.Event, tasks: list[asyncio.Task[Any]]) -> Any:
    """A step whose activity's cancellation resolves in a later activation (it awaits after the cancel)."""

    async def step() -> None:
        current = asyncio.current_task()
        assert current is not None
        tasks.append(current)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            await asyncio.sleep(3600)
            raise

    return step()


async def test_a_delete_ends_the_step_and_is_swallowed(order: tuple[OrderWorkflow, SimpleNamespace]) -> None:
    wf, state = order
    cancelled = asyncio.Event()
    tasks: list[asyncio.Task[Any]] = []
    main = asyncio.ensure_future(wf._interruptible(slow_to_cancel(cancelled, tasks)))
    await asyncio.sleep(0.01)
    state.deleteRequested = True
    await cancelled.wait()
    tasks[0].cancel()  # its cancellation resolves
    assert await asyncio.wait_for(main, 5) is False
    assert state.dirty is True
    assert wf._interrupting is False


async def test_an_eviction_while_a_delete_interrupts_the_step_is_not_swallowed(
    order: tuple[OrderWorkflow, SimpleNamespace],
) -> None:
    wf, state = order
    cancelled = asyncio.Event()
    tasks: list[asyncio.Task[Any]] = []
    main = asyncio.ensure_future(wf._interruptible(slow_to_cancel(cancelled, tasks)))
    await asyncio.sleep(0.01)
    state.deleteRequested = True
    await cancelled.wait()  # the order's coroutine now awaits the step's end
    for task in (main, *tasks):  # the eviction
        task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(main, 5)
    assert wf._interrupting is False
