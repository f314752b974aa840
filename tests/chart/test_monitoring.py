"""The chart's operations side: PodMonitors for every process (/metrics on the ports the processes
serve), the alerts on orders that stay not Ready and on failing workflow tasks, the module dashboard,
the prometheus-adapter rule of the HPA metric — each reading metrics that exist: the watcher's order
gauges (worker/observer/metrics.py, checked here on a real registry), the Temporal SDK's names (as its
Prometheus exporter writes them: counters without ``_total``, durations in milliseconds), vLLM's."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from tests.chart.helm import CHART_DIR, MONITORING_APIS, NAMESPACE, Doc, Helm, find, of_kind
from worker.observer.metrics import OrderStatusCollector

# The Temporal SDK's Prometheus names this chart reads (temporalio's exporter, defaults of
# worker.temporal_client.install_sdk_metrics): seen on a real worker's /metrics.
SDK_METRICS = ("temporal_workflow_task_execution_failed", "temporal_activity_execution_latency_bucket")
ORDER_STEPS = ("resolve_model", "plan_launch", "apply_workload", "probe_serving")


@pytest.fixture(scope="module")
def docs(helm: Helm) -> list[Doc]:
    return helm.render(api_versions=MONITORING_APIS)


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _order(name: str, phase: str, reason: str, ready: str | None, since: datetime, **meta: Any) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": ready, "lastTransitionTime": _iso(since)}] if ready else []
    return {
        "metadata": {"namespace": "support", "name": name, "creationTimestamp": _iso(since), **meta},
        "status": {"phase": phase, "reason": reason, "conditions": conditions},
    }


def test_the_watcher_exports_orders_by_phase_and_how_long_each_is_not_ready() -> None:
    now = datetime.now(UTC)
    orders = [
        _order("ready", "Ready", "Serving", "True", now - timedelta(hours=5)),
        _order("waiting", "Pending", "ResourceClaimExhausted", "False", now - timedelta(minutes=90)),
        _order("new", "Pending", "Planning", None, now - timedelta(minutes=2)),
        _order("going", "Pending", "Deleting", "False", now - timedelta(hours=3), deletionTimestamp=_iso(now)),
    ]
    registry = CollectorRegistry()
    collector = OrderStatusCollector()
    registry.register(collector)
    assert "ai_inference_order_not_ready_seconds{" not in generate_latest(registry).decode()  # nothing watched yet
    collector.watch(lambda: orders)
    by_phase = {
        (labels["phase"], labels["reason"]): value
        for metric in registry.collect()
        if metric.name == "ai_inference_orders"
        for _, labels, value, *_ in metric.samples
    }
    assert by_phase == {
        ("Ready", "Serving"): 1,
        ("Pending", "ResourceClaimExhausted"): 1,
        ("Pending", "Planning"): 1,
        ("Pending", "Deleting"): 1,
    }
    not_ready = {
        labels["name"]: value
        for metric in registry.collect()
        if metric.name == "ai_inference_order_not_ready_seconds"
        for _, labels, value, *_ in metric.samples
    }
    # Ready and being-deleted orders are left out; the others count from Ready's last transition,
    # else from their creation.
    assert set(not_ready) == {"waiting", "new"}
    assert 90 * 60 - 5 <= not_ready["waiting"] <= 90 * 60 + 30
    assert 2 * 60 - 5 <= not_ready["new"] <= 2 * 60 + 30


def test_the_observer_registers_its_order_gauges_on_the_default_registry() -> None:
    from prometheus_client import REGISTRY

    from worker.observer import metrics

    assert metrics.ORDER_STATUS in REGISTRY._collector_to_names
    observer = (CHART_DIR.parents[2] / "worker" / "observer" / "observer.py").read_text()
    assert "ORDER_STATUS.watch(" in observer


def _exprs(docs: list[Doc]) -> dict[str, str]:
    rule = find(docs, "PrometheusRule", "ai-inference")
    return {r["alert"]: r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]}


def test_the_order_and_workflow_task_alerts(docs: list[Doc], helm: Helm) -> None:
    exprs = _exprs(docs)
    assert "ai_inference_order_not_ready_seconds" in exprs["D8AIInferenceOrderNotReady"]
    assert exprs["D8AIInferenceOrderNotReady"].rstrip().endswith("> 3600")
    failing = exprs["D8AIInferenceWorkflowTaskFailing"]
    assert (
        'increase(temporal_workflow_task_execution_failed{job="ai-inference",task_queue="ai-inference"}[10m])'
        in failing
    )
    rule = find(docs, "PrometheusRule", "ai-inference")
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert alerts["D8AIInferenceWorkflowTaskFailing"]["for"] == "15m"
    tuned = helm.render(
        {
            "monitoring.prometheusRule.orderNotReadyMinutes": 120,
            "monitoring.prometheusRule.workflowTaskFailingMinutes": 5,
            "aiInference.temporal.taskQueue": "inference",
        },
        api_versions=MONITORING_APIS,
    )
    exprs = _exprs(tuned)
    assert exprs["D8AIInferenceOrderNotReady"].rstrip().endswith("> 7200")
    assert 'task_queue="inference"' in exprs["D8AIInferenceWorkflowTaskFailing"]


def test_every_alert_reads_only_the_modules_own_job(docs: list[Doc]) -> None:
    """A tenant's series of the module's metric names (its own monitor, its own pods) cannot fire or
    silence an alert: every selector of every rule names the job the module's PodMonitors pin on the
    worker and the watcher, and those PodMonitors pin it on every endpoint (the runtime's its own)."""
    for alert, expr in _exprs(docs).items():
        selectors = re.findall(r"\b((?:ai_inference|temporal)_[a-z_]+)(\{[^}]*\})?", expr)
        assert selectors, alert
        for metric, matchers in selectors:
            assert 'job="ai-inference"' in matchers, (alert, metric, expr)
    monitors = {m["metadata"]["name"]: m for m in of_kind(docs, "PodMonitor")}
    for name, job in (
        ("ai-inference-worker", "ai-inference"),
        ("ai-inference-watcher", "ai-inference"),
        ("ai-inference-runtime", "ai-inference-runtime"),
    ):
        for endpoint in monitors[name]["spec"]["podMetricsEndpoints"]:
            assert {"action": "replace", "targetLabel": "job", "replacement": job} in endpoint["relabelings"], name
    assert monitors["ai-inference-runtime"]["spec"]["sampleLimit"] > 0
    adapter = yaml.safe_load((CHART_DIR / "files" / "prometheus-adapter-rules.yaml").read_text())
    for rule in adapter["rules"]:
        assert 'job="ai-inference-runtime"' in rule["seriesQuery"]
        assert 'job="ai-inference-runtime"' in rule["metricsQuery"]


def test_every_module_metric_the_rules_and_the_module_dashboard_read_exists(docs: list[Doc]) -> None:
    module_metrics = set(
        re.findall(
            r'"(ai_inference_[a-z_]+)"', (CHART_DIR.parents[2] / "worker" / "observer" / "metrics.py").read_text()
        )
    )
    module_metrics |= {"ai_inference_capacity_preemptions_total", "ai_inference_donor_held_replicas"}
    counters = {"ai_inference_watcher_signals", "ai_inference_watcher_events", "ai_inference_watcher_probes"}
    exported = (
        module_metrics
        | {f"{c}_total" for c in counters}
        | {f"ai_inference_watcher_resync_seconds_{s}" for s in ("bucket", "sum", "count")}
    )
    dashboard = json.loads(find(docs, "ConfigMap", "ai-inference-dashboard-module")["data"]["ai-inference-module.json"])
    texts = [t["expr"] for p in dashboard["panels"] for t in p["targets"]] + list(_exprs(docs).values())
    used = {m for text in texts for m in re.findall(r"\b(ai_inference_[a-z_]+|temporal_[a-z_]+)", text)}
    assert used - exported - set(SDK_METRICS) == set()
    joined = " ".join(texts)
    # What the issue asks of the module dashboard: orders by phase and reason, time to Ready by step,
    # planner latency.
    assert "sum by (phase, reason) (ai_inference_orders)" in joined
    for step in ORDER_STEPS:
        assert step in joined
    assert 'activity_type="plan_launch"' in joined
    assert "/ 1000" in joined  # the SDK's histograms are in milliseconds


def test_pod_monitors_scrape_the_ports_the_processes_serve(docs: list[Doc]) -> None:
    for component in ("worker", "watcher"):
        monitor = find(docs, "PodMonitor", f"ai-inference-{component}")
        container = find(docs, "Deployment", f"ai-inference-{component}")["spec"]["template"]["spec"]["containers"][0]
        ports = {p["name"] for p in container["ports"]}
        assert [(e["port"], e["path"]) for e in monitor["spec"]["podMetricsEndpoints"]] == [
            ("health", "/metrics"),
            ("sdk-metrics", "/metrics"),
        ]
        assert {"health", "sdk-metrics"} <= ports
        assert container["args"][container["args"].index("--metrics-port") + 1] == "9464"
    planner = find(docs, "PodMonitor", "ai-inference-planner")
    (endpoint,) = planner["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["scheme"]) == ("https", "https")
    assert endpoint["tlsConfig"]["ca"]["secret"] == {"name": "ai-inference-planner-tls", "key": "ca.crt"}
    assert endpoint["tlsConfig"]["serverName"] == f"ai-inference-planner.{NAMESPACE}.svc"


def test_the_adapter_rule_for_the_hpa_metric_ships_as_a_config_map(docs: list[Doc], helm: Helm) -> None:
    config = find(docs, "ConfigMap", "ai-inference-prometheus-adapter-rules")
    shipped = yaml.safe_load(config["data"]["config.yaml"])
    assert shipped == yaml.safe_load((CHART_DIR / "files" / "prometheus-adapter-rules.yaml").read_text())
    (rule,) = shipped["rules"]
    assert rule["name"]["as"] == "vllm_num_requests_waiting"
    assert "vllm:num_requests_waiting" in rule["seriesQuery"]
    # The metric the orders' HPAs ask for.
    autoscaling = (CHART_DIR.parents[2] / "activities" / "builders" / "autoscaling.py").read_text()
    assert "vllm_num_requests_waiting" in autoscaling
    names = {
        m["metadata"]["name"]
        for m in of_kind(helm.render({"monitoring.prometheusAdapterRules.enabled": False}), "ConfigMap")
    }
    assert "ai-inference-prometheus-adapter-rules" not in names
