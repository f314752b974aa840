"""The one way tests wait: poll a check until it holds, or fail saying what was awaited.

* ``wait_until`` (blocking) and ``until`` (async) poll ``check`` until it returns something truthy
  and return that; on timeout they raise ``WaitTimeoutError`` (an ``AssertionError``) naming ``what``
  and the last error the check raised.
* ``stays`` asserts the opposite: ``check`` holds for the whole period.
* ``settled`` waits until a reading stops changing.

Errors a check raises: ``wait_until`` treats every ``Exception`` as "not yet" by default (its checks
read servers that are still settling: a 404, a refused connection); ``until`` lets them through by
default (its checks read in-memory fakes, where an error is a bug). Either takes ``ignore=`` to say
otherwise.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")

What = str | Callable[[], str]
Errors = tuple[type[BaseException], ...]


class WaitTimeoutError(AssertionError):
    """A wait ran out of time (a test failure, like a failed assertion)."""


def _describe(what: What, check: object) -> str:
    text = what() if callable(what) else what
    return text or getattr(check, "__qualname__", repr(check))


def _timed_out(timeout: float, what: What, check: object, error: BaseException | None) -> WaitTimeoutError:
    suffix = f" (last error: {error!r})" if error is not None else ""
    return WaitTimeoutError(f"timed out after {timeout:g}s waiting for {_describe(what, check)}{suffix}")


def wait_until(
    check: Callable[[], T | None],
    *,
    timeout: float = 60,
    what: What = "",
    interval: float = 0.25,
    ignore: Errors = (Exception,),
) -> T:
    """Call ``check`` every ``interval`` seconds until it returns something truthy; return that."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            result = check()
            if result:
                return result
        except ignore as e:
            last_error = e
        if time.monotonic() > deadline:
            raise _timed_out(timeout, what, check, last_error)
        time.sleep(interval)


@overload
async def until(
    check: Callable[[], Awaitable[T | None]],
    *,
    timeout: float = ...,
    what: What = ...,
    interval: float = ...,
    ignore: Errors = ...,
    in_thread: bool = ...,
) -> T: ...
@overload
async def until(
    check: Callable[[], T | None],
    *,
    timeout: float = ...,
    what: What = ...,
    interval: float = ...,
    ignore: Errors = ...,
    in_thread: bool = ...,
) -> T: ...
async def until(
    check: Callable[[], Any],
    *,
    timeout: float = 30,
    what: What = "",
    interval: float = 0.05,
    ignore: Errors = (),
    in_thread: bool = False,
) -> Any:
    """``wait_until`` for async tests: ``check`` may be a coroutine function (awaited; one that hangs
    is cancelled at the deadline) or a plain one (``in_thread=True`` runs a blocking one, e.g. an API
    call, in a thread so the event loop keeps serving)."""
    last_error: BaseException | None = None

    async def poll() -> Any:
        nonlocal last_error
        while True:
            try:
                if in_thread:
                    result = await asyncio.to_thread(check)
                else:
                    result = check()
                if inspect.isawaitable(result):
                    result = await result
                if result:
                    return result
            except ignore as e:
                last_error = e
            await asyncio.sleep(interval)

    try:
        return await asyncio.wait_for(poll(), timeout)
    except TimeoutError:
        raise _timed_out(timeout, what, check, last_error) from None


def stays(check: Callable[[], object], *, seconds: float, what: str, interval: float = 0.3) -> None:
    """Assert ``check`` holds for the whole period (for "this must NOT happen" checks)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert check(), what
        time.sleep(interval)


def settled(read: Callable[[], T], *, quiet: float, timeout: float, what: str, interval: float = 0.5) -> T:
    """Read until the value has not changed for ``quiet`` seconds; return it."""
    deadline = time.monotonic() + timeout
    last = read()
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < quiet:
        if time.monotonic() > deadline:
            raise WaitTimeoutError(f"{what} never stopped changing in {timeout:g}s: {last}")
        time.sleep(interval)
        now = read()
        if now != last:
            last, quiet_since = now, time.monotonic()
    return last
