"""The observer's metrics (prometheus-client's default registry: served at /metrics on the health port).

Named ``ai_inference_watcher_*`` after the process (``ai-inference watch``, the chart's ``watcher``
Deployment): the two series the watcher had keep their names and labels (``kind="order"``, ...).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

EVENTS_HANDLED = Counter(
    "ai_inference_watcher_events",
    "Informer changes the observer handled (kind: order, class, statefulset, pod, ...; type: SYNC for the "
    "first listing, ADDED, MODIFIED, DELETED).",
    ["kind", "type"],
)
REPACK_ASKED = Counter(
    "ai_inference_repack_moves_asked",
    "Serving orders on a whole device that the repack (observer.repack) asked to move onto a smaller place; "
    "the GPUs a finished move gave back are the worker's ai_inference_gpus_won_back_total",
)
REPACK_CONSOLIDATING = Counter(
    "ai_inference_repack_consolidating_moves_asked",
    "Serving orders holding a share that the repack (observer.repack) asked to move onto another device in "
    "use, so that the device they leave comes free (planner/repack.py propose_repack)",
)
REPACK_DEVICES_TO_FREE = Counter(
    "ai_inference_repack_devices_to_free",
    "Whole devices the repack's consolidating moves were asked for would free, once every move of the "
    "pass is made (a move the planner finds no room for on its target is not made)",
)
REPACK_DEVICES_FREED = Counter(
    "ai_inference_repack_devices_freed",
    "Whole devices won back by consolidating moves: a device the repack asked to free, seen empty by a later "
    "pass (within an hour of the ask)",
)
SIGNALS = Counter(
    "ai_inference_watcher_signals",
    "Signals (and terminations) to order workflows. outcome: sent; retry (refused or unreachable, "
    "tried again); no_workflow (none runs: the resync starts it); closed (the workflow completed and "
    "is not restarted); fenced (this observer no longer leads: not sent, the next leader derives it).",
    ["signal", "outcome"],
)
PROBES = Counter(
    "ai_inference_watcher_probes",
    "Health probes of serving orders (outcome: ok or failed).",
    ["outcome"],
)
RESYNC_SECONDS = Histogram(
    "ai_inference_watcher_resync_seconds",
    "How long one resync (Temporal listing, comparison, queueing) took.",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
RESYNC_ACTIONS = Counter(
    "ai_inference_watcher_resync_actions",
    "What resyncs decided (start, move, delete, terminate, redelete, settings).",
    ["action"],
)
REPAIRS = Counter(
    "ai_inference_watcher_workflow_repairs",
    "Runs whose workflow task failed nondeterministically, as the resync found them (outcome: reset to "
    "their first workflow task; failed, tried at the next resync; no_reset_point, left: it never "
    "completed a workflow task). docs/operations.md, a workflow stuck on a nondeterminism error.",
    ["workflow_type", "outcome"],
)
REPLICAS_PLACED = Counter(
    "ai_inference_watcher_replica_placements",
    "Replicas of autoscaled orders the replica placer handled (outcome: placed — the claim allocated on the "
    "device it chose; no_place — no device had room, the replica waits; deferred — no room for the replica "
    "its order's plan placed: left to the allocator; conflict — the claim changed, "
    "looked at again).",
    ["outcome"],
)
ORDERS_KNOWN = Gauge("ai_inference_watcher_orders", "Orders of this observer's shard in its cache.")
PENDING_SIGNALS = Gauge("ai_inference_watcher_pending_signals", "Signals queued or waiting for a retry.")
START_WINDOW_ADMITTED = Gauge(
    "ai_inference_watcher_orders_starting", "New orders started and not yet settled (the start window's places taken)."
)
START_WINDOW_HELD = Gauge(
    "ai_inference_watcher_orders_waiting_to_start", "New orders whose workflow start waits for a place in the window."
)


class OrderStatusCollector(Collector):
    """The orders of this observer's shard as its informer cache holds them, read at each scrape (no
    bookkeeping of its own):

    * ``ai_inference_orders{phase,reason}``: how many orders are in each phase, with the reason;
    * ``ai_inference_order_not_ready_seconds{namespace,name,phase,reason}``: for each order whose
      ``Ready`` condition is not ``True`` (and that is not being deleted), how long it has been so: since
      that condition's ``lastTransitionTime``, else since the order was created.
    """

    def __init__(self) -> None:
        self._orders: Callable[[], Iterable[Mapping[str, Any]]] | None = None

    def watch(self, orders: Callable[[], Iterable[Mapping[str, Any]]]) -> None:
        """Read ``orders()`` from now on (the latest observer of the process)."""
        self._orders = orders

    def collect(self) -> Iterator[GaugeMetricFamily]:
        by_phase = GaugeMetricFamily(
            "ai_inference_orders", "Orders of this observer's shard by phase and reason.", labels=["phase", "reason"]
        )
        not_ready = GaugeMetricFamily(
            "ai_inference_order_not_ready_seconds",
            "Seconds since each order's Ready condition left True (or since it was created, if it never was).",
            labels=["namespace", "name", "phase", "reason"],
        )
        counts: dict[tuple[str, str], int] = {}
        now = time.time()
        for order in self._orders() if self._orders is not None else ():
            meta = order.get("metadata") or {}
            status = order.get("status") or {}
            phase, reason = str(status.get("phase") or "Pending"), str(status.get("reason") or "")
            counts[(phase, reason)] = counts.get((phase, reason), 0) + 1
            ready: Mapping[str, Any] = next((c for c in status.get("conditions") or () if c.get("type") == "Ready"), {})
            if ready.get("status") == "True" or meta.get("deletionTimestamp"):
                continue
            since = _epoch(ready.get("lastTransitionTime")) or _epoch(meta.get("creationTimestamp"))
            if since is not None:
                labels = [str(meta.get("namespace") or ""), str(meta.get("name") or ""), phase, reason]
                not_ready.add_metric(labels, max(0.0, now - since))
        for (phase, reason), count in sorted(counts.items()):
            by_phase.add_metric([phase, reason], count)
        yield by_phase
        yield not_ready


def _epoch(timestamp: object) -> float | None:
    if not isinstance(timestamp, str) or not timestamp:
        return None
    try:
        return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


ORDER_STATUS = OrderStatusCollector()
REGISTRY.register(ORDER_STATUS)
