"""The worker's /metrics and the chart's capacity alerts, judged by promtool over scrapes of the real endpoint.

The worker's real HTTP server (``worker.processes.serve_health``) serves the series the real
metrics activity sets; the test scrapes ``/metrics`` over HTTP once per simulated minute, writes
what it got as promtool input series (a series missing from a scrape is a staleness marker, as
Prometheus writes it), and asks Prometheus' rule engine (``promtool test rules`` over the chart's
PrometheusRule, rendered with helm) which alerts are pending or firing at each minute, through
the ``ALERTS`` series. The alerts' own unit tests (labels, annotations, windows) are the files of
``tests/metrics/rules/``; live Prometheus judges them in ``test_metrics_e2e.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest_asyncio
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from activities.metrics import HELD, PREEMPTION_METRICS, PREEMPTIONS, PreemptionMetricsCollector
from activities.preemption import PreemptionActivities
from inference_api.preemption import PreemptionMetrics, ReplicaCount
from tests.metrics.promtool import RULES_FILE, Promtool, series_selector, series_values, write_test_file
from worker.processes import serve_health

PREEMPTED = "D8AIInferenceCapacityPreempted"
HELD_ALERT = "D8AIInferenceDonorHeldAtLoweredBound"
DC = "nvidia-hopper-s3-shared"
Labels = tuple[tuple[str, str], ...]
# minute -> alert name -> {output labels: "pending" | "firing"} (an empty dict: no alert)
Expectations = dict[int, dict[str, dict[Labels, str]]]


def labels(**kw: str) -> Labels:
    return tuple(sorted(kw.items()))


class Endpoint:
    def __init__(self, url: str, collector: PreemptionMetricsCollector) -> None:
        self.url = url
        self.collector = collector
        self.scrapes: list[dict[tuple[str, Labels], float]] = []  # one per simulated minute, from 0m
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
                if sample.name.startswith("ai_inference_"):
                    samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        self.scrapes.append(samples)
        return response.text

    async def minutes(self, count: int) -> int:
        """One scrape per minute; returns the minute of the last one."""
        for _ in range(count):
            await self.scrape()
        return len(self.scrapes) - 1

    def input_series(self) -> list[dict[str, str]]:
        keys = sorted({key for scrape in self.scrapes for key in scrape})
        # The target labels Prometheus adds to what it scrapes: the chart's PodMonitor names the worker's
        # job "ai-inference", and the rules select that job only.
        target = {"job": "ai-inference", "instance": "worker:8081"}
        return [
            {
                "series": series_selector(name, {**dict(lbls), **target}),
                "values": series_values([s.get((name, lbls)) for s in self.scrapes]),
            }
            for name, lbls in keys
        ]


def judge(promtool: Promtool, workdir: Path, endpoint: Endpoint, expected: Expectations) -> None:
    """promtool evaluates the chart's rules over the scrapes: ALERTS must be ``expected`` at each minute."""
    rules = yaml.safe_load((workdir / RULES_FILE).read_text())
    rule_labels = {r["alert"]: r.get("labels", {}) for g in rules["groups"] for r in g["rules"] if "alert" in r}
    cases: list[dict[str, Any]] = []
    for minute, alerts in sorted(expected.items()):
        for alert, states in alerts.items():
            samples = [
                {
                    "labels": series_selector(
                        "ALERTS", {**rule_labels[alert], **dict(out), "alertname": alert, "alertstate": state}
                    ),
                    "value": 1,
                }
                for out, state in states.items()
            ]
            cases.append({"expr": f'ALERTS{{alertname="{alert}"}}', "eval_time": f"{minute}m", "exp_samples": samples})
    test = {"interval": "1m", "input_series": endpoint.input_series(), "promql_expr_test": cases}
    promtool.test_rules(write_test_file(workdir / "scraped.yaml", [test]), workdir / RULES_FILE)


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


async def test_health_and_metrics_on_one_port(endpoint: Endpoint) -> None:
    async with httpx.AsyncClient() as http:
        assert (await http.get(endpoint.url + "/healthz")).text.startswith("ok")
    text = await endpoint.scrape()
    assert any(
        line.startswith("# TYPE ai_inference_capacity_preemptions") and line.endswith(" counter")
        for line in text.splitlines()
    )
    assert f"# TYPE {HELD} gauge" in text


def test_the_process_registry_serves_the_preemption_metrics() -> None:
    assert PREEMPTION_METRICS in list(REGISTRY._collector_to_names)  # what the worker's /metrics serves
    assert HELD.encode() in generate_latest(REGISTRY)
    assert PREEMPTIONS.startswith("ai_inference_capacity_preemptions")


async def test_a_preemption_fires_capacity_preempted_and_a_long_hold_fires_held_at_lowered_bound(
    promtool: Promtool, rules_workdir: Path, endpoint: Endpoint
) -> None:
    recipient = labels(device_class=DC, recipient_namespace="support", recipient="high")
    donor = labels(device_class=DC, donor_namespace="support", donor="low")
    expected: Expectations = {}

    # Two orders joined the device class: counters at 0, nothing held. No alert.
    await endpoint.publish({"high": 0, "low": 0}, {})
    quiet = await endpoint.minutes(3)
    expected[quiet] = {PREEMPTED: {}, HELD_ALERT: {}}

    # A preemption: the counter steps to 1, one replica is held.
    await endpoint.publish({"high": 1, "low": 0}, {"low": 1})
    step = await endpoint.minutes(2)
    expected[step] = {PREEMPTED: {recipient: "firing"}, HELD_ALERT: {donor: "pending"}}

    # 29 minutes on, no new preemption: CapacityPreempted resolved; the hold fires after 30 minutes.
    later = await endpoint.minutes(29)
    expected[later - 1] = {HELD_ALERT: {donor: "pending"}}
    expected[later] = {PREEMPTED: {}, HELD_ALERT: {donor: "firing"}}

    # The donor is restored: its series goes, the alert resolves; the counter stays where it was.
    await endpoint.publish({"high": 1, "low": 0}, {})
    after = await endpoint.minutes(2)
    expected[after] = {PREEMPTED: {}, HELD_ALERT: {}}
    judge(promtool, rules_workdir, endpoint, expected)


async def test_a_worker_restart_counts_nothing_twice(
    promtool: Promtool, rules_workdir: Path, endpoint: Endpoint
) -> None:
    """The totals come from workflow state: a new process exports the same total, not one more."""
    await endpoint.publish({"high": 3}, {"low": 1})
    first = await endpoint.minutes(12)
    endpoint.collector.clear()  # the worker died: its series are gone
    gap = await endpoint.minutes(2)
    await endpoint.publish({"high": 3}, {"low": 1})  # the new worker's first publish: the same totals
    back = await endpoint.minutes(3)
    expected: Expectations = {minute: {PREEMPTED: {}} for minute in (first, gap, back)}
    judge(promtool, rules_workdir, endpoint, expected)
