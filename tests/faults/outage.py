"""Outages of single steps, injected in front of the workflows' activities (tests/faults/test_outages.py).

``Outages`` wraps activities (the fake world's of tests/workflows/world.py, or any) so that the calls
of one step of one order — its ``read_order``, its ``apply_workload``, ... — are refused for
``seconds`` from the first such call, as a client whose API server (or planner) is unreachable sees
them: ``ConnectionRefusedError``. Every other call goes through. Each outage counts what it refused.
"""

from __future__ import annotations

import inspect
import os
import time
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity

# How long each step is refused: past every bounded retry policy the workflows ever had (3 attempts
# end after 1 + 2 s of backoff, 5 after 15 s). AI_INFERENCE_FAULT_OUTAGE_SECONDS=180 runs the cases
# with minutes of outage, as the issue names them.
OUTAGE_SECONDS = float(os.environ.get("AI_INFERENCE_FAULT_OUTAGE_SECONDS", "12"))


@dataclass
class Outage:
    """The calls of ``steps`` (activity names; None: every activity) of one order refused for ``seconds``
    from the first of them (or from ``arm()``)."""

    steps: frozenset[str] | None
    seconds: float = OUTAGE_SECONDS
    armed: bool = True
    began: float | None = None
    ended: float | None = None
    refused: int = 0
    calls: list[str] = field(default_factory=list)

    def arm(self) -> None:
        self.armed, self.began = True, time.monotonic()

    def refuses(self, step: str) -> bool:
        if not self.armed or (self.steps is not None and step not in self.steps):
            return False
        now = time.monotonic()
        if self.began is None:
            self.began = now
        if now - self.began < self.seconds:
            self.refused += 1
            self.calls.append(step)
            return True
        if self.ended is None:
            self.ended = now
        return False

    @property
    def over(self) -> bool:
        return self.began is not None and time.monotonic() - self.began >= self.seconds


def order_key(arg: Any) -> str | None:
    """The order an activity's argument is about (``namespace/name``)."""
    ref = getattr(arg, "ref", None)
    if ref is not None and hasattr(ref, "key"):
        return str(ref.key)
    if hasattr(arg, "key") and hasattr(arg, "uid"):
        return str(arg.key)  # an OrderRef itself
    metadata = getattr(arg, "metadata", None)
    if metadata is not None and getattr(metadata, "name", None):
        return f"{metadata.namespace}/{metadata.name}"
    return None


@dataclass
class Outages:
    """Outages by order key; ``wrap`` puts them in front of activities."""

    by_order: dict[str, Outage] = field(default_factory=dict)

    def add(self, key: str, outage: Outage) -> Outage:
        self.by_order[key] = outage
        return outage

    def wrap(self, activities: list[Callable[..., Any]]) -> list[Callable[..., Any]]:
        return [self._wrap(fn) for fn in activities]

    def _wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        name = getattr(fn, "__temporal_activity_definition").name
        outages = self

        async def refused_while_down(arg: Any) -> Any:
            key = order_key(arg)
            outage = outages.by_order.get(key) if key is not None else None
            if outage is not None and outage.refuses(name):
                raise ConnectionRefusedError(f"[Errno 111] Connection refused (injected: {name} of {key})")
            return await fn(arg)

        # The real types, not the strings of the wrapped module's deferred annotations: Temporal
        # decodes the argument by them.
        hints = typing.get_type_hints(fn)
        (parameter,) = inspect.signature(fn).parameters
        refused_while_down.__annotations__ = {"arg": hints[parameter], "return": hints.get("return")}
        refused_while_down.__name__ = refused_while_down.__qualname__ = f"{fn.__name__}_refused_while_down"
        return activity.defn(name=name)(refused_while_down)
