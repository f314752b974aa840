"""Every dashboard panel's query and every alert's expression, run by a real Prometheus scraping the
module and the real engine.

The stack (``monitored``, one per module): the local control plane, Temporal, the module's worker
and observer in this process (tests/e2e/stand.py) with their Temporal SDK runtime serving its
Prometheus metrics (the ``sdk-metrics`` port of the chart), and a Prometheus built from source
(``devstack.metrics.servers``) scraping, every 2 s:

* job ``ai-inference``: the module's ``/metrics`` (prometheus-client's registry: the worker's and the
  observer's series) and the SDK runtime's ``temporal_*`` series — the two endpoints the chart's
  worker and watcher PodMonitors pin to that job;
* job ``ai-inference-runtime``: every running replica of every order, labelled ``namespace`` and
  ``pod`` as the chart's runtime PodMonitor labels them (``devstack.metrics.targets``): one order on
  the real engine (vLLM's CPU build serving the tiny model) and one on a stand-in runtime;

and evaluating the chart's PrometheusRule. The dashboards and the rules are the chart's, rendered with
the pinned helm for this stack's task queue (``aiInference.temporal.taskQueue``), as a cluster gets them.

The stack does what a healthy one does: two orders become Ready (the first waits minutes for its
engine to load the model), the engine answers chat completions, streamed and not. Then:

* every panel's target is run as Grafana runs it: template variables substituted — ``$namespace`` All
  (the dashboards' ``allValue``), ``$model`` the engine's model (so the runtime panels read the real
  engine's series), the constant ``$task_queue`` as the chart rendered it, ``$__rate_interval``,
  ``$__interval`` and ``$__range`` by Grafana's formulas for the stack's life as the dashboard range —
  as a range query over that range. It must not error, and must have a number at some point, unless
  ``EMPTY_PANELS`` says why a healthy stack has none (and then it must have none);
* every variable query (``label_values``) must answer, listing the engine's namespace and model;
* every alert: Prometheus evaluates its rule without error, its expression answers nothing now (none
  fires in a healthy stack, ``QUIET_ALERTS`` says why for each), and its signal — the expression
  without the threshold — has data over the stack's life unless ``EMPTY_SIGNALS`` says why not.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from kubernetes.client import ApiClient
from prometheus_client import REGISTRY, start_http_server
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from devstack.cluster.build import ensure_binaries
from devstack.cluster.launcher import LocalCluster, _free_ports
from devstack.metrics.servers import MODULE_JOB, MetricsServers, stop_processes
from devstack.metrics.targets import RUNTIME_JOB, TargetsWriter
from devstack.temporal_tls import LocalTemporal
from devstack.vllm_cpu_env import VllmCpuEnv
from tests.chart.helm import MONITORING_APIS, Helm, find, of_kind
from tests.e2e.stand import Stand, open_stand
from tests.engine.serving import ENGINE_STAND_OVERRIDES, RELEASES, Served, chat_body, request, serve_order
from tests.monitoring.queries import (
    GrafanaRange,
    PanelQuery,
    Prometheus,
    QueryError,
    alert_signal,
    finite_points,
    format_multi,
    panel_queries,
    substitute,
    variables,
)

pytestmark = [pytest.mark.engine, pytest.mark.cluster, pytest.mark.temporal]

ENGINE_ORDER = "tiny-monitored"
STANDIN_ORDER = "standin-monitored"
STANDIN_MODEL = {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}}
SCRAPE_SECONDS = 2
COMPLETIONS = 8

# Panels a healthy stack has no data for, and why. Each must then answer nothing (a failing workflow
# task here is a failure of the stack, not of the dashboard).
EMPTY_PANELS: dict[str, str] = {
    "ai-inference-module/Failing workflow tasks/A": (
        "no workflow task fails in a healthy stack: the SDK's temporal_workflow_task_execution_failed is "
        "born at the first failure (the alert on it fires in tests/metrics/rules/workflow-task-failing.yaml)"
    ),
}
# Why none of the chart's alerts fires in a healthy stack (every alert must be named here).
QUIET_ALERTS: dict[str, str] = {
    "D8AIInferenceCapacityPreempted": "no order waits for capacity: the class has devices to spare",
    "D8AIInferenceDonorHeldAtLoweredBound": "no preemption, so no donor is held",
    "D8AIInferenceOrderNotReady": "both orders are Ready within minutes; the threshold is 60",
    "D8AIInferenceWorkflowTaskFailing": "no workflow task fails",
}
# Alerts whose signal (the expression without its threshold) has no series in a healthy stack, and why.
EMPTY_SIGNALS: dict[str, str] = {
    "D8AIInferenceDonorHeldAtLoweredBound": (
        "ai_inference_donor_held_replicas has a series per held donor only, and nothing was preempted "
        "(tests/preemption/test_metrics_e2e.py holds one under a real Prometheus)"
    ),
    "D8AIInferenceWorkflowTaskFailing": EMPTY_PANELS["ai-inference-module/Failing workflow tasks/A"],
}


@dataclass
class Monitored:
    prometheus: Prometheus
    stand: Stand
    served: Served
    dashboards: list[dict[str, Any]]
    rules: dict[str, Any]
    started: float
    log: Path

    def span(self) -> GrafanaRange:
        """The dashboard range: the stack's life (Prometheus has nothing before it)."""
        return GrafanaRange(self.started, time.time(), SCRAPE_SECONDS)

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) if self.log.is_file() else ""


def rendered_monitoring(helm: Helm, task_queue: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The chart's dashboards (their JSON) and alert rule groups, rendered for this task queue."""
    docs = helm.render({"aiInference.temporal.taskQueue": task_queue}, api_versions=MONITORING_APIS)
    dashboards = [
        json.loads(text)
        for config_map in of_kind(docs, "ConfigMap")
        if (config_map["metadata"].get("labels") or {}).get("grafana_dashboard") == "1"
        for text in config_map["data"].values()
    ]
    rules = {"groups": find(docs, "PrometheusRule", "ai-inference")["spec"]["groups"]}
    return dashboards, rules


def send_completions(served: Served) -> None:
    """Chat completions through the order's endpoint, streamed and not, one per scrape or so."""
    for i in range(COMPLETIONS):
        status, body = request(
            served.url, "/v1/chat/completions", served.token, chat_body(served.model, stream=i % 2 == 1, max_tokens=12)
        )
        assert status == 200, f"completion {i}: HTTP {status} {body[:200]!r} ({RELEASES})"
        time.sleep(SCRAPE_SECONDS)


@pytest_asyncio.fixture(scope="module")
async def monitored(
    local_cluster: LocalCluster,
    kube_admin: ApiClient,
    temporal_server: LocalTemporal,
    engine_env: VllmCpuEnv,
    helm: Helm,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Monitored]:
    task_queue = f"ai-inference-{uuid.uuid4().hex[:6]}"
    dashboards, rules = rendered_monitoring(helm, task_queue)
    registry_port, sdk_port, prometheus_port = _free_ports(3)
    # The worker's and the observer's SDK runtime, serving temporal_* as `--metrics-port` does.
    runtime = Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=f"127.0.0.1:{sdk_port}")))
    client = await temporal_server.connect("admin", data_converter=pydantic_data_converter, runtime=runtime)
    state = tmp_path_factory.mktemp("monitored")
    servers = MetricsServers(
        state_dir=state,
        kubeconfig=local_cluster.kubeconfig("admin"),
        prometheus_port=prometheus_port,
        adapter_port=0,  # no adapter: this stack reads Prometheus only
        module_targets=(f"127.0.0.1:{registry_port}", f"127.0.0.1:{sdk_port}"),
        scrape_interval=f"{SCRAPE_SECONDS}s",
        evaluation_interval=f"{SCRAPE_SECONDS}s",
        binaries=ensure_binaries(("prometheus",), progress=None),
    )
    servers.targets_file.parent.mkdir(parents=True, exist_ok=True)
    servers.targets_file.write_text("[]\n")
    servers.rules_file.write_text(yaml.safe_dump(rules, sort_keys=False))
    (servers.prometheus_dir / "prometheus.yml").write_text(yaml.safe_dump(servers.prometheus_config(), sort_keys=False))
    log = state / "prometheus.log"
    writer = TargetsWriter(kube_admin, servers.targets_file, interval_seconds=1.0)
    http_server, _ = start_http_server(registry_port, addr="127.0.0.1", registry=REGISTRY)
    with log.open("ab") as out:
        process = subprocess.Popen(
            servers.prometheus_argv(), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=state
        )
    try:
        servers.wait_prometheus(60)
        writer.start()
        started = time.time()
        overrides = {
            **ENGINE_STAND_OVERRIDES,
            "temporal": {"taskQueue": task_queue},
            # A resync every 15 s, so the observer's resync histogram moves within the stack's life.
            "observer": {"resyncSeconds": 15},
        }
        async with open_stand(local_cluster, kube_admin, client, overrides) as stand:
            assert stand.settings.temporal.taskQueue == task_queue
            served = await serve_order(stand, ENGINE_ORDER)
            # A second order: the SDK's activity histograms are born at an activity type's first
            # completion, so a rate over them moves from its second on (the planner latency panel's
            # data is this order's plan), as in any cluster serving more than one order.
            stand.create_order(STANDIN_ORDER, STANDIN_MODEL)
            await stand.until_phase(STANDIN_ORDER, "Ready", timeout=180)
            await asyncio.to_thread(send_completions, served)
            # The last completion scraped, and rules evaluated over it.
            await asyncio.sleep(3 * SCRAPE_SECONDS)
            yield Monitored(Prometheus(servers.prometheus_url), stand, served, dashboards, rules, started, log)
    finally:
        writer.stop()
        stop_processes([process])
        http_server.shutdown()


def chart_alerts(rules: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for group in rules["groups"] for rule in group["rules"] if "alert" in rule}


def dashboard_values(
    dashboard: dict[str, Any], prometheus: Prometheus, span: GrafanaRange, model: str
) -> dict[str, str]:
    """The dashboard's variables as Grafana fills them: ``$namespace`` All, ``$model`` the engine's model."""
    selections: dict[str, list[str] | None] = {"namespace": None, "model": [model]}
    values = span.builtins()
    for variable in variables(dashboard):
        name, kind = variable["name"], variable["type"]
        if kind == "datasource":
            continue  # the panels' data source, never in an expression
        if kind == "constant":
            values[name] = str(variable["query"])
            continue
        assert kind == "query", f"{dashboard['uid']}: variable ${name} of type {kind}: teach the test"
        query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
        options = prometheus.label_values(substitute(query, values), span)
        assert options, f"{dashboard['uid']}: variable ${name} ({query}) lists nothing"
        assert name in selections, f"{dashboard['uid']}: variable ${name}: say what the test selects"
        chosen = selections[name]
        if chosen is not None:
            assert set(chosen) <= set(options), f"${name}: {chosen} not among {options}"
        values[name] = format_multi(chosen, variable.get("allValue"))
    return values


# -------------------------------------------------------------------------------------------- tests


def test_prometheus_scrapes_the_module_the_sdk_and_the_engine(monitored: Monitored) -> None:
    targets = monitored.prometheus.get("targets?state=active")["activeTargets"]
    by_job: dict[str, list[dict[str, Any]]] = {}
    for target in targets:
        by_job.setdefault(target["labels"]["job"], []).append(target)
    down = [f"{t['scrapeUrl']}: {t['lastError']}" for t in targets if t["health"] != "up"]
    assert not down, f"targets down: {down}\n{monitored.log_tail()}"
    assert len(by_job.get(MODULE_JOB, [])) == 2, by_job.keys()
    stand = monitored.stand
    pods = {(t["labels"].get("namespace"), t["labels"].get("pod")) for t in by_job.get(RUNTIME_JOB, [])}
    assert {(stand.namespace, f"{ENGINE_ORDER}-0"), (stand.namespace, f"{STANDIN_ORDER}-0")} <= pods, pods
    engine = monitored.prometheus.instant(
        f'count by (model_name) (vllm:num_requests_running{{namespace="{stand.namespace}",pod="{ENGINE_ORDER}-0"}})'
    )
    assert [s["metric"].get("model_name") for s in engine] == [monitored.served.model], (engine, RELEASES)
    sdk = monitored.prometheus.instant(
        f'count(temporal_activity_execution_latency_bucket{{job="{MODULE_JOB}",'
        f'task_queue="{stand.settings.temporal.taskQueue}"}})'
    )
    assert sdk, "no temporal_* series of the worker's task queue scraped"


def test_prometheus_evaluates_every_alert_rule_of_the_chart_without_error(monitored: Monitored) -> None:
    alerts = chart_alerts(monitored.rules)
    assert set(QUIET_ALERTS) == set(alerts), "every alert of the chart says why it is quiet in a healthy stack"
    loaded = {
        rule["name"]: rule
        for group in monitored.prometheus.get("rules?type=alert")["groups"]
        for rule in group["rules"]
    }
    assert set(loaded) == set(alerts), monitored.log_tail()
    for name, rule in loaded.items():
        assert rule["health"] == "ok", f"{name}: {rule['health']} {rule.get('lastError')}"
        assert rule["state"] == "inactive", f"{name} is {rule['state']} in a healthy stack: {rule['alerts']}"


def test_every_alert_expression_runs_fires_nothing_and_its_signal_has_data(monitored: Monitored) -> None:
    prometheus, span = monitored.prometheus, monitored.span()
    problems: list[str] = []
    counted = 0
    for name, rule in chart_alerts(monitored.rules).items():
        expr = str(rule["expr"])
        try:
            firing = prometheus.instant(expr)
        except QueryError as err:
            problems.append(f"{name}: expression fails: {err}")
            continue
        counted += 1
        if firing:
            problems.append(f"{name} fires in a healthy stack ({QUIET_ALERTS.get(name)}): {firing}")
        signal = alert_signal(expr)
        if signal is None:
            problems.append(f"{name}: no threshold comparison at the end of {expr!r}; declare its signal")
            continue
        try:
            points = finite_points(prometheus.range(signal, span))
        except QueryError as err:
            problems.append(f"{name}: signal {signal!r} fails: {err}")
            continue
        counted += 1
        if name in EMPTY_SIGNALS and points:
            problems.append(f"{name}: signal declared empty ({EMPTY_SIGNALS[name]}) has {points} points")
        elif name not in EMPTY_SIGNALS and not points:
            problems.append(f"{name}: signal {signal!r} has no data over the stack's life")
    print(f"\n{counted} alert expressions and signals run over {span.range_seconds}s")
    assert not problems, "\n".join(problems)


def test_every_dashboard_variable_lists_the_engines_namespace_and_model(monitored: Monitored) -> None:
    span = monitored.span()
    stand, model = monitored.stand, monitored.served.model
    runtime = [d for d in monitored.dashboards if any(v["name"] == "model" for v in variables(d))]
    assert {d["uid"] for d in runtime} == {"ai-inference-performance", "ai-inference-queries"}
    for dashboard in runtime:
        namespaces = monitored.prometheus.label_values("label_values(vllm:num_requests_running, namespace)", span)
        assert stand.namespace in namespaces
        values = dashboard_values(dashboard, monitored.prometheus, span, model)
        assert values["namespace"] == ".*"
        models = monitored.prometheus.label_values(
            substitute(
                next(v for v in variables(dashboard) if v["name"] == "model")["query"]["query"],
                values,
            ),
            span,
        )
        assert model in models, (models, RELEASES)


def test_every_dashboard_panel_query_runs_and_has_data(monitored: Monitored) -> None:
    prometheus, span = monitored.prometheus, monitored.span()
    queries = panel_queries(monitored.dashboards)
    keys = {q.key for q in queries}
    assert set(EMPTY_PANELS) <= keys, f"declared empty, but no such panel query: {set(EMPTY_PANELS) - keys}"
    assert len(keys) == len(queries), "two targets of one panel share a refId"
    problems: list[str] = []
    report: list[str] = []
    for dashboard in monitored.dashboards:
        values = dashboard_values(dashboard, prometheus, span, monitored.served.model)
        for query in (q for q in queries if q.dashboard == dashboard["uid"]):
            expr = substitute(query.expr, values)
            try:
                result = prometheus.instant(expr) if query.instant else prometheus.range(expr, span)
            except QueryError as err:
                problems.append(f"{query.key}: {expr}\n    fails: {err}")
                continue
            points = finite_points(result)
            report.append(f"{points:5d} points, {len(result):2d} series  {query.key}")
            problems += _judge(query, expr, points)
    panels = {(q.dashboard, q.panel) for q in queries}
    print(
        f"\n{len(monitored.dashboards)} dashboards, {len(panels)} panels, {len(queries)} queries over "
        f"{span.range_seconds}s (step {span.interval_seconds}s, $__rate_interval {span.rate_interval_seconds}s):\n  "
        + "\n  ".join(report)
    )
    assert not problems, "\n".join(problems) + f"\n{monitored.log_tail()}"


def _judge(query: PanelQuery, expr: str, points: int) -> list[str]:
    if query.key in EMPTY_PANELS:
        if points:
            return [f"{query.key}: declared empty ({EMPTY_PANELS[query.key]}) but has {points} points: {expr}"]
        return []
    if not points:
        return [f"{query.key}: no data over the stack's life: {expr}"]
    return []
