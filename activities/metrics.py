"""The worker's Prometheus metrics about capacity moving between orders (served at /metrics).

Both series are set from the preemption workflow's state by an activity, as absolute values
per device class, never incremented in memory: the totals live in workflow history, so an
activity retried after a worker died, or a new worker process, exports the same numbers and
nothing is counted twice. A worker that restarts exports nothing for a device class until
that class's workflow publishes again (it does on every decision and on a timer while it holds
replicas).

* ``ai_inference_capacity_preemptions_total{device_class,recipient_namespace,recipient}``
  (counter): decisions that took replicas from donors for that recipient.
* ``ai_inference_donor_held_replicas{device_class,donor_namespace,donor}`` (gauge): replicas
  withheld from that donor now; the series goes away when the donor is restored.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client import Counter
from prometheus_client.core import REGISTRY, CollectorRegistry, CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from inference_api.preemption import PreemptionMetrics

PREEMPTIONS = "ai_inference_capacity_preemptions_total"
HELD = "ai_inference_donor_held_replicas"


class PreemptionMetricsCollector(Collector):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_class: dict[str, PreemptionMetrics] = {}

    def set(self, metrics: PreemptionMetrics) -> None:
        with self._lock:
            self._by_class[metrics.deviceClass] = metrics.model_copy(deep=True)

    def clear(self) -> None:
        with self._lock:
            self._by_class.clear()

    def preemptions(self, device_class: str, namespace: str, name: str) -> int | None:
        with self._lock:
            metrics = self._by_class.get(device_class)
            found = metrics and next(
                (c.value for c in metrics.preemptions if (c.namespace, c.name) == (namespace, name)), None
            )
            return found if isinstance(found, int) else None

    def held(self, device_class: str, namespace: str, name: str) -> int | None:
        with self._lock:
            metrics = self._by_class.get(device_class)
            found = metrics and next(
                (c.value for c in metrics.held if (c.namespace, c.name) == (namespace, name)), None
            )
            return found if isinstance(found, int) else None

    def collect(self) -> Iterator[Metric]:
        counter = CounterMetricFamily(
            PREEMPTIONS,
            "Preemptions done for a recipient order: decisions that lowered donors' replica ceilings for it.",
            labels=["device_class", "recipient_namespace", "recipient"],
        )
        gauge = GaugeMetricFamily(
            HELD,
            "Replicas withheld from a donor order's replica bound by preemption.",
            labels=["device_class", "donor_namespace", "donor"],
        )
        with self._lock:
            snapshot = sorted(self._by_class.items())
        for device_class, metrics in snapshot:
            for count in metrics.preemptions:
                counter.add_metric([device_class, count.namespace, count.name], count.value)
            for held in metrics.held:
                gauge.add_metric([device_class, held.namespace, held.name], held.value)
        yield counter
        yield gauge


def _register(registry: CollectorRegistry) -> PreemptionMetricsCollector:
    collector = PreemptionMetricsCollector()
    registry.register(collector)
    return collector


# The process's collector, in prometheus_client's default registry (what /metrics serves).
PREEMPTION_METRICS = _register(REGISTRY)


# The devices moves made before they break gave back (activities/builders/move.py): for each finished
# move, what one old replica held minus what one new replica holds (device count x share), times the
# replicas moved. Counted by the apply that retires the old replicas, once per move (the retire is
# written once: a later apply finds no move recorded).
GPUS_WON_BACK = Counter(
    "ai_inference_gpus_won_back",
    "Devices (device count x share) given back by moves made before they break: a stranded order moved "
    "onto a place that takes less of a device",
)
