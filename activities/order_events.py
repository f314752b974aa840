"""Kubernetes Events on an order for every step and every named trouble, so ``kubectl describe`` is a
readable history of it.

Derived, not told: an Event is recorded when the status the worker publishes moves a condition to
another status or reason (``step_events``, pure). Nothing in the workflow decides them, so no workflow
command changes (recorded histories replay as before), and what the Events say is what the
conditions said, after ``trusted_status`` checked them against the order.

Recorded the way client-go's EventRecorder does it (``EventRecorder``):

- **aggregated**: an Event with the same order, type, reason and message as one this process
  recorded is counted (``count`` and ``lastTimestamp`` patched), not made again;
- **rate-limited**: per order a token bucket of 25 with one token back every 5 minutes (client-go's
  defaults), so an order flapping between two troubles cannot flood the namespace's Events;
- **best effort**: a refused or failed write is logged (never its message) and the status write it
  came with still counts.

No secret reaches them: condition messages carry none (the module writes them; troubles the cluster
reported are redacted by the observer before they reach a workflow).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from inference_api.payloads import OrderEvent
from inference_api.reasons import Reason
from inference_api.types import ConditionType

log = structlog.get_logger(__name__)

# The order in which a step's Events are written when one status moves several conditions: the
# order of the steps, so ``kubectl describe`` reads top to bottom.
STEP_ORDER = (
    ConditionType.CLASS_RESOLVED,
    ConditionType.MODEL_RESOLVED,
    ConditionType.PLANNED,
    ConditionType.WORKLOAD_READY,
    ConditionType.RUNTIME_CURRENT,
    ConditionType.SCALING_HEALTHY,
    ConditionType.READY,
)
# Reasons of a condition that is False while the order makes progress: Normal Events, not Warnings.
PROGRESS = frozenset(
    {
        Reason.WORKLOAD_PROGRESSING,
        Reason.WORKLOAD_APPLIED,
        Reason.MODEL_DOWNLOADING,
        Reason.MODEL_LOADING,
        Reason.WORKLOAD_REBUILDING,
        Reason.REPLICAS_HELD_ON_PREVIOUS_RUNTIME,
        Reason.LAUNCH_PLAN_IN_FORCE,
        Reason.AUTOSCALER_NOT_OBSERVED,
        Reason.DELETING,
    }
)
# A later step waiting for an earlier one says nothing the earlier step's Event did not.
SILENT = frozenset({Reason.WAITING_FOR_PREVIOUS_STEP})
MAX_MESSAGE = 1024
BURST = 25
REFILL_SECONDS = 300.0
REMEMBERED = 4096


@dataclass(frozen=True)
class StepEvent:
    type: str
    reason: str
    message: str


def _by_type(conditions: Iterable[Mapping[str, Any]] | None) -> dict[str, Mapping[str, Any]]:
    return {str(c.get("type")): c for c in conditions or [] if isinstance(c, Mapping) and c.get("type")}


Conditions = Iterable[Mapping[str, Any]] | None


def step_events(before: Conditions, after: Conditions) -> list[StepEvent]:
    """The Events a status write makes: one per condition whose status or reason it changes, in step
    order. ``Normal`` for a condition that became True or waits on progress; ``Warning`` for one that
    names a trouble or a refusal. A condition whose reason only says it waits for an earlier step is
    skipped, and ``Ready`` is skipped when it repeats the reason and message of a step above it."""
    old, new = _by_type(before), _by_type(after)
    events: list[StepEvent] = []
    said: set[tuple[str, str]] = set()
    for kind in STEP_ORDER:
        condition = new.get(kind.value)
        if condition is None:
            continue
        status, reason = str(condition.get("status") or ""), str(condition.get("reason") or "")
        if not reason or reason in SILENT:
            continue
        previous = old.get(kind.value)
        if previous is not None and (previous.get("status"), previous.get("reason")) == (status, reason):
            continue
        message = str(condition.get("message") or "")
        if kind == ConditionType.READY and (reason, message) in said:
            continue
        said.add((reason, message))
        normal = status == "True" or reason in PROGRESS
        text = f"{kind.value} {status}: {message}" if message else f"{kind.value} {status}"
        if len(text) > MAX_MESSAGE:
            text = text[: MAX_MESSAGE - 1] + "…"
        events.append(StepEvent(type="Normal" if normal else "Warning", reason=reason, message=text))
    return events


class _Bucket:
    __slots__ = ("stamp", "tokens")

    def __init__(self, now: float) -> None:
        self.tokens = float(BURST)
        self.stamp = now

    def take(self, now: float) -> bool:
        self.tokens = min(float(BURST), self.tokens + (now - self.stamp) / REFILL_SECONDS)
        self.stamp = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


EventBody = Callable[[OrderEvent], Any]


class EventRecorder:
    """Aggregating, rate-limited Events on orders (thread-safe: activities run in a thread pool)."""

    def __init__(self, core: CoreV1Api, body: EventBody, clock: Callable[[], float] = time.monotonic) -> None:
        self.core = core
        self.body = body
        self.clock = clock
        self._lock = threading.Lock()
        # (namespace, uid, type, reason, message) → (Event name, count), the least recent first.
        self._recorded: OrderedDict[tuple[str, str, str, str, str], tuple[str, int]] = OrderedDict()
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def record(self, event: OrderEvent) -> bool:
        """Record (or count) one Event; False when the rate limit or the API server refused it."""
        ref = event.ref
        key = (ref.namespace, ref.uid, event.type, event.reason, event.message)
        with self._lock:
            bucket = self._buckets.pop(ref.uid, None) or _Bucket(self.clock())
            self._buckets[ref.uid] = bucket
            while len(self._buckets) > REMEMBERED:
                self._buckets.popitem(last=False)
            if not bucket.take(self.clock()):
                log.info("event not recorded: the order's rate limit", order=ref.key, reason=event.reason)
                return False
            seen = self._recorded.pop(key, None)
        try:
            name, count = self._write(event, seen)
        except ApiException as err:
            log.warning("event not recorded", order=ref.key, reason=event.reason, status=err.status)
            return False
        with self._lock:
            self._recorded[key] = (name, count)
            while len(self._recorded) > REMEMBERED:
                self._recorded.popitem(last=False)
        return True

    def _write(self, event: OrderEvent, seen: tuple[str, int] | None) -> tuple[str, int]:
        if seen is not None:
            name, count = seen
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            try:
                self.core.patch_namespaced_event(name, event.ref.namespace, {"count": count + 1, "lastTimestamp": now})
                return name, count + 1
            except ApiException as err:
                if err.status != 404:
                    raise
                # Gone (Events expire after an hour by default): recorded anew.
        created = self.core.create_namespaced_event(event.ref.namespace, self.body(event))
        return str(created.metadata.name), 1
