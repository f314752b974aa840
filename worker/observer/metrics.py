"""The observer's metrics (prometheus-client's default registry: served at /metrics on the health port).

Named ``ai_inference_watcher_*`` after the process (``ai-inference watch``, the chart's ``watcher``
Deployment): the two series the watcher had keep their names and labels (``kind="order"``, ...).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

EVENTS_HANDLED = Counter(
    "ai_inference_watcher_events",
    "Informer changes the observer handled (kind: order, class, statefulset, pod, ...; type: SYNC for the "
    "first listing, ADDED, MODIFIED, DELETED).",
    ["kind", "type"],
)
SIGNALS = Counter(
    "ai_inference_watcher_signals",
    "Signals (and terminations) to order workflows. outcome: sent; retry (refused or unreachable, "
    "tried again); no_workflow (none runs: the resync starts it); closed (the workflow completed and "
    "is not restarted).",
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
ORDERS_KNOWN = Gauge("ai_inference_watcher_orders", "Orders of this observer's shard in its cache.")
PENDING_SIGNALS = Gauge("ai_inference_watcher_pending_signals", "Signals queued or waiting for a retry.")
