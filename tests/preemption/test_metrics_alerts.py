"""The worker's /metrics and the chart's capacity alerts, evaluated over scrapes of the real endpoint.

The PrometheusRule is rendered from the chart (helm template), its expressions are evaluated by
``tests/preemption/promql.py`` (exactly these expression shapes; see why there and in
docs/preemption.md) against samples scraped over HTTP from ``worker.processes.serve_health``,
whose values are set by the real metrics activity. Scrape times are the test's clock: one
scrape and one rule evaluation per simulated minute.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from activities.metrics import HELD, PREEMPTION_METRICS, PREEMPTIONS, PreemptionMetricsCollector
from activities.preemption import PreemptionActivities
from inference_api.preemption import PreemptionMetrics, ReplicaCount
from tests.chart.helm import MONITORING_APIS, Helm
from worker.processes import serve_health

from .promql import Labels, Timeline, UnsupportedExpressionError, alert_states, evaluate, seconds

PREEMPTED = "D8AIInferenceCapacityPreempted"
HELD_ALERT = "D8AIInferenceDonorHeldAtLoweredBound"
DC = "nvidia-hopper-s3-shared"
MINUTE = 60.0


@pytest.fixture(scope="module")
def rules(helm: Helm) -> dict[str, dict[str, Any]]:
    docs = helm.render(api_versions=MONITORING_APIS)
    rule = next(d for d in docs if d["kind"] == "PrometheusRule" and d["metadata"]["name"] == "ai-inference")
    return {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"] if "alert" in r}


class Endpoint:
    def __init__(self, url: str, collector: PreemptionMetricsCollector) -> None:
        self.url = url
        self.collector = collector
        self.timeline = Timeline()
        self.now = 0.0
        self.activities = PreemptionActivities(metrics=collector)

    async def publish(self, preemptions: dict[str, int], held: dict[str, int]) -> None:
        """What the preemption workflow's metrics activity does, with these values."""
        await self.activities.publish_preemption_metrics(
            PreemptionMetrics(
                deviceClass=DC,
                preemptions=[ReplicaCount(namespace="support", name=n, value=v) for n, v in preemptions.items()],
                held=[ReplicaCount(namespace="support", name=n, value=v) for n, v in held.items()],
            )
        )

    async def scrape(self) -> str:
        async with httpx.AsyncClient() as http:
            response = await http.get(self.url + "/metrics")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain; version=")
        samples: dict[tuple[str, Labels], float] = {}
        for family in text_string_to_metric_families(response.text):
            for sample in family.samples:
                samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        self.timeline.add(self.now, samples)
        return response.text

    async def minutes(self, count: int) -> list[float]:
        """One scrape per minute; returns the evaluation times."""
        times = []
        for _ in range(count):
            self.now += MINUTE
            await self.scrape()
            times.append(self.now)
        return times


@pytest_asyncio.fixture
async def endpoint() -> AsyncIterator[Endpoint]:
    registry = CollectorRegistry()
    collector = PreemptionMetricsCollector()
    registry.register(collector)
    server = await serve_health(0, registry=registry, host="127.0.0.1")
    port = server.sockets[0].getsockname()[1]
    try:
        yield Endpoint(f"http://127.0.0.1:{port}", collector)
    finally:
        server.close()
        await server.wait_closed()


def labels(**kw: str) -> Labels:
    return tuple(sorted(kw.items()))


def states(rule: dict[str, Any], endpoint: Endpoint, evaluations: list[float]) -> dict[Labels, str]:
    return alert_states(rule["expr"], seconds(rule.get("for", "0s")), endpoint.timeline, evaluations)


async def test_the_rule_is_what_this_evaluator_reads(rules: dict[str, dict[str, Any]]) -> None:
    assert set(rules) >= {PREEMPTED, HELD_ALERT}
    assert PREEMPTIONS in rules[PREEMPTED]["expr"]
    assert HELD in rules[HELD_ALERT]["expr"]
    assert rules[HELD_ALERT]["for"] == "30m"
    assert "for" not in rules[PREEMPTED]
    with pytest.raises(UnsupportedExpressionError):
        evaluate("rate(x[5m]) > 0", Timeline(), 0)


async def test_health_and_metrics_on_one_port(endpoint: Endpoint) -> None:
    async with httpx.AsyncClient() as http:
        assert (await http.get(endpoint.url + "/healthz")).text == "ok\n"
    text = await endpoint.scrape()
    assert any(
        line.startswith("# TYPE ai_inference_capacity_preemptions") and line.endswith(" counter")
        for line in text.splitlines()
    )
    assert f"# TYPE {HELD} gauge" in text


def test_the_process_registry_serves_the_preemption_metrics() -> None:
    assert PREEMPTION_METRICS in list(REGISTRY._collector_to_names)  # what the worker's /metrics serves
    assert HELD.encode() in generate_latest(REGISTRY)


async def test_a_preemption_fires_capacity_preempted_and_a_long_hold_fires_held_at_lowered_bound(
    rules: dict[str, dict[str, Any]], endpoint: Endpoint
) -> None:
    preempted, held = rules[PREEMPTED], rules[HELD_ALERT]
    recipient = labels(device_class=DC, recipient_namespace="support", recipient="high")
    donor = labels(device_class=DC, donor_namespace="support", donor="low")

    # Two orders joined the device class: counters at 0, nothing held. No alert.
    await endpoint.publish({"high": 0, "low": 0}, {})
    quiet = await endpoint.minutes(3)
    assert states(preempted, endpoint, quiet) == {}
    assert states(held, endpoint, quiet) == {}

    # A preemption: the counter steps to 1, one replica is held.
    await endpoint.publish({"high": 1, "low": 0}, {"low": 1})
    step = await endpoint.minutes(2)
    assert states(preempted, endpoint, quiet + step) == {recipient: "firing"}
    assert evaluate(preempted["expr"], endpoint.timeline, step[-1]) == {recipient: 1.0}
    assert states(held, endpoint, quiet + step) == {donor: "pending"}

    # Ten minutes on, no new preemption: CapacityPreempted resolves; the hold fires after 30 minutes.
    later = await endpoint.minutes(29)
    timeline = quiet + step + later
    assert states(preempted, endpoint, timeline) == {}
    assert states(held, endpoint, timeline) == {donor: "firing"}
    assert evaluate(held["expr"], endpoint.timeline, timeline[-1]) == {donor: 1.0}

    # The donor is restored: its series goes, the alert resolves; the counter stays where it was.
    await endpoint.publish({"high": 1, "low": 0}, {})
    after = await endpoint.minutes(2)
    assert states(held, endpoint, timeline + after) == {}
    assert states(preempted, endpoint, timeline + after) == {}


async def test_a_worker_restart_counts_nothing_twice(rules: dict[str, dict[str, Any]], endpoint: Endpoint) -> None:
    """The totals come from workflow state: a new process exports the same total, not one more."""
    preempted = rules[PREEMPTED]
    await endpoint.publish({"high": 3}, {"low": 1})
    first = await endpoint.minutes(12)
    assert states(preempted, endpoint, first) == {}
    endpoint.collector.clear()  # the worker died: its series are gone
    gap = await endpoint.minutes(2)
    await endpoint.publish({"high": 3}, {"low": 1})  # the new worker's first publish: the same totals
    back = await endpoint.minutes(3)
    assert states(preempted, endpoint, first + gap + back) == {}


def test_the_evaluator_needs_two_samples_for_increase() -> None:
    """Why every member's counter is exported at 0 first: a series born at 1 has not 'increased'."""
    timeline = Timeline()
    series = ("ai_inference_capacity_preemptions_total", labels(device_class=DC, recipient="x"))
    expr = "sum by (device_class, recipient) (increase(ai_inference_capacity_preemptions_total[10m])) > 0"
    timeline.add(60, {series: 1.0})
    timeline.add(120, {series: 1.0})
    assert evaluate(expr, timeline, 120) == {}
    reset = Timeline()
    for at, value in ((60, 5.0), (120, 0.0), (180, 2.0)):
        reset.add(at, {series: value})
    assert evaluate(expr, reset, 180) == {labels(device_class=DC, recipient="x"): 2.0}
