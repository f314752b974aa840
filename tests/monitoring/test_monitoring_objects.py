"""The monitors, the rule and the dashboards render for plain kube-prometheus-stack and for Deckhouse.

* kube-prometheus-stack (prometheus-operator's ``monitoring.coreos.com/v1`` served, no Deckhouse):
  PodMonitors and the PrometheusRule carry ``monitoring.labels`` (its Prometheus selects its release's
  label), the dashboards are ConfigMaps labelled ``grafana_dashboard: "1"`` with the folder in
  ``grafana_folder``, what its Grafana's dashboard sidecar loads;
* Deckhouse (``deckhouse.io/v1/GrafanaDashboardDefinition`` served too): the same monitors and rule
  (``prometheus: main``), the dashboards as cluster-scoped GrafanaDashboardDefinitions named as
  Deckhouse's modules name theirs; also when rendered from Deckhouse-shaped values;
* ``monitoring.grafanaDashboards.kind`` forces either shape; ``Auto`` follows the API server.

Each dashboard object carries the chart's dashboard file, with the module dashboard's task queue the
worker's (``aiInference.temporal.taskQueue``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tests.chart.helm import CHART_DIR, NAMESPACE, Doc, Helm, find, of_kind, template_args

OPERATOR_APIS = (
    "monitoring.coreos.com/v1/PodMonitor",
    "monitoring.coreos.com/v1/ServiceMonitor",
    "monitoring.coreos.com/v1/PrometheusRule",
)
DECKHOUSE_APIS = (*OPERATOR_APIS, "deckhouse.io/v1/GrafanaDashboardDefinition")
DASHBOARDS = ("module", "performance", "queries")
POD_MONITORS = {"ai-inference-worker", "ai-inference-watcher", "ai-inference-planner", "ai-inference-runtime"}
FOLDER = "AI Inference"
DECKHOUSE_EXAMPLE = CHART_DIR.parents[2] / "deploy" / "examples" / "moduleconfig" / "moduleconfig-minimal.yaml"


def dashboard_file(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CHART_DIR / "dashboards" / f"{name}.json").read_text())
    return loaded


def task_queue(dashboard: dict[str, Any]) -> str:
    return str(next(v for v in dashboard["templating"]["list"] if v["name"] == "task_queue")["query"])


def same_dashboard(rendered: dict[str, Any], name: str, queue: str = "ai-inference") -> None:
    """The rendered dashboard is the chart's file, its task queue constant ``queue``."""
    expected = dashboard_file(name)
    if name == "module":
        assert task_queue(rendered) == queue
        for variable in expected["templating"]["list"]:
            if variable["name"] == "task_queue":
                variable["query"] = queue
    assert rendered == expected, name


def config_map_dashboards(docs: list[Doc]) -> dict[str, dict[str, Any]]:
    found = {}
    for config_map in of_kind(docs, "ConfigMap"):
        if "grafana_dashboard" in config_map["metadata"].get("labels", {}):
            ((key, text),) = config_map["data"].items()
            found[config_map["metadata"]["name"]] = {"doc": config_map, "key": key, "json": json.loads(text)}
    return found


def definitions(docs: list[Doc]) -> dict[str, Doc]:
    return {d["metadata"]["name"]: d for d in of_kind(docs, "GrafanaDashboardDefinition")}


def assert_prometheus_operator_objects(docs: list[Doc], labels: dict[str, str]) -> None:
    monitors = of_kind(docs, "PodMonitor")
    assert {m["metadata"]["name"] for m in monitors} == POD_MONITORS
    rule = find(docs, "PrometheusRule", "ai-inference")
    for doc in (*monitors, rule):
        assert doc["apiVersion"] == "monitoring.coreos.com/v1"
        assert doc["metadata"]["namespace"] == NAMESPACE
        assert {"prometheus": "main", "module": "ai-inference", **labels}.items() <= doc["metadata"]["labels"].items()
    assert rule["metadata"]["labels"]["component"] == "rules"


def test_kube_prometheus_stack_gets_labelled_monitors_a_rule_and_sidecar_config_maps(helm: Helm) -> None:
    docs = helm.render({"monitoring.labels": {"release": "kube-prometheus-stack"}}, api_versions=OPERATOR_APIS)
    assert_prometheus_operator_objects(docs, {"release": "kube-prometheus-stack"})
    assert definitions(docs) == {}
    maps = config_map_dashboards(docs)
    assert set(maps) == {f"ai-inference-dashboard-{name}" for name in DASHBOARDS}
    for name in DASHBOARDS:
        found = maps[f"ai-inference-dashboard-{name}"]
        meta = found["doc"]["metadata"]
        assert meta["namespace"] == NAMESPACE
        assert meta["labels"]["grafana_dashboard"] == "1"
        assert meta["annotations"] == {"grafana_folder": FOLDER}
        assert found["key"] == f"ai-inference-{name}.json"
        same_dashboard(found["json"], name)


def test_deckhouse_gets_grafana_dashboard_definitions(helm: Helm) -> None:
    docs = helm.render(api_versions=DECKHOUSE_APIS)
    assert_prometheus_operator_objects(docs, {})
    assert config_map_dashboards(docs) == {}
    found = definitions(docs)
    assert set(found) == {f"d8-ai-inference-{name}" for name in DASHBOARDS}
    for name in DASHBOARDS:
        definition = found[f"d8-ai-inference-{name}"]
        assert definition["apiVersion"] == "deckhouse.io/v1"
        assert "namespace" not in definition["metadata"]  # cluster-scoped
        assert definition["metadata"]["labels"]["prometheus.deckhouse.io/grafana-dashboard"] == ""
        assert definition["metadata"]["labels"]["module"] == "ai-inference"
        assert set(definition["spec"]) == {"folder", "definition"}
        assert definition["spec"]["folder"] == FOLDER
        same_dashboard(json.loads(definition["spec"]["definition"]), name)


def test_deckhouse_shaped_values_render_the_same_objects(helm: Helm) -> None:
    """Rendered as Deckhouse renders the module (values from its ModuleConfig and the platform)."""
    from tests.chart.test_module import deckhouse_values

    values = deckhouse_values(yaml.safe_load(DECKHOUSE_EXAMPLE.read_text()))
    docs = helm.render(values, api_versions=DECKHOUSE_APIS)
    assert_prometheus_operator_objects(docs, {})
    assert set(definitions(docs)) == {f"d8-ai-inference-{name}" for name in DASHBOARDS}
    assert config_map_dashboards(docs) == {}


@pytest.mark.parametrize(
    ("kind", "apis", "shape"),
    [
        ("ConfigMap", DECKHOUSE_APIS, "ConfigMap"),
        ("GrafanaDashboardDefinition", (), "GrafanaDashboardDefinition"),
        ("Auto", (), "ConfigMap"),
        ("Auto", DECKHOUSE_APIS, "GrafanaDashboardDefinition"),
    ],
)
def test_the_kind_setting_forces_a_shape_or_follows_the_api_server(
    helm: Helm, kind: str, apis: tuple[str, ...], shape: str
) -> None:
    docs = helm.render(
        {"monitoring.grafanaDashboards.kind": kind, "monitoring.grafanaDashboards.folder": "Platform"},
        api_versions=apis,
    )
    maps, defs = config_map_dashboards(docs), definitions(docs)
    if shape == "ConfigMap":
        assert (len(maps), defs) == (3, {})
        assert {m["doc"]["metadata"]["annotations"]["grafana_folder"] for m in maps.values()} == {"Platform"}
    else:
        assert (maps, len(defs)) == ({}, 3)
        assert {d["spec"]["folder"] for d in defs.values()} == {"Platform"}


def test_an_unknown_kind_is_refused(helm: Helm) -> None:
    result = helm(*template_args({"monitoring.grafanaDashboards.kind": "Grafana"}), check=False)
    assert result.returncode != 0
    assert "/monitoring/grafanaDashboards/kind" in result.stderr


@pytest.mark.parametrize("apis", [OPERATOR_APIS, DECKHOUSE_APIS], ids=["configmap", "deckhouse"])
def test_the_module_dashboard_reads_the_workers_task_queue(helm: Helm, apis: tuple[str, ...]) -> None:
    docs = helm.render({"aiInference.temporal.taskQueue": "inference-eu"}, api_versions=apis)
    rendered = [m["json"] for m in config_map_dashboards(docs).values()] + [
        json.loads(d["spec"]["definition"]) for d in definitions(docs).values()
    ]
    module = next(d for d in rendered if d["uid"] == "ai-inference-module")
    same_dashboard(module, "module", "inference-eu")
    rule = find(docs, "PrometheusRule", "ai-inference")
    failing = next(
        r for g in rule["spec"]["groups"] for r in g["rules"] if r["alert"] == "D8AIInferenceWorkflowTaskFailing"
    )
    assert 'task_queue="inference-eu"' in failing["expr"]


def test_monitoring_labels_override_without_repeating_a_key(helm: Helm) -> None:
    labels = {"monitoring.labels": {"prometheus": "platform", "team": "ml"}}
    out = helm(*template_args(labels, ["monitoring.coreos.com/v1/PodMonitor"])).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert {m["metadata"]["name"] for m in of_kind(docs, "PodMonitor")} == POD_MONITORS
    for monitor in of_kind(docs, "PodMonitor"):
        assert monitor["metadata"]["labels"]["prometheus"] == "platform"
        assert monitor["metadata"]["labels"]["team"] == "ml"
    # Each label key once in the text helm wrote (a repeated key is an error to kubectl apply).
    for chunk in out.split("\n---"):
        if "kind: PodMonitor" in chunk:
            metadata = chunk.split("\nspec:")[0]
            assert metadata.count("\n    prometheus:") == 1, metadata
