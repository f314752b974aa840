"""The vLLM metric names the module's own files use, read from those files.

Sources (each is read if present; the ones that exist in this tree today are required by the test):

* the chart's dashboards, ``deploy/charts/ai-inference/dashboards/*.json`` — PromQL in the panels;
* the chart's alert rules, every template that renders a ``PrometheusRule``;
* the custom-metrics adapter rules, ``deploy/charts/ai-inference/files/prometheus-adapter-rules.yaml``;
* the HPA the builders make: its Pods metric is the adapter's name for a vLLM series, the colon
  written as an underscore (metric API names cannot carry a colon): ``vllm_X`` is ``vllm:X``;
* the stand-in runtime, ``dev/devstack/standins/runtime.py`` — the series it serves.

Names are series names as a query writes them: a counter's ``_total``, a histogram's
``_bucket``/``_sum``/``_count`` included.
"""

from __future__ import annotations

import re
from pathlib import Path

from activities.builders.autoscaling import build_autoscaler
from tests import factories as f

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "charts" / "ai-inference"
DASHBOARDS = CHART / "dashboards"
TEMPLATES = CHART / "templates"
ADAPTER_RULES = CHART / "files" / "prometheus-adapter-rules.yaml"
STANDIN_RUNTIME = REPO / "dev" / "devstack" / "standins" / "runtime.py"

# A vLLM series in PromQL or Python text: ``vllm:`` then a metric name (no image tag matches: those
# read ``vllm-openai:v0.33.0``).
VLLM_NAME = re.compile(r"(?<![\w:-])vllm:[a-zA-Z_][a-zA-Z0-9_:]*")
# The custom-metrics API's spelling of a vLLM series (HPA, adapter ``as:``).
ADAPTED_NAME = re.compile(r"^vllm_([a-zA-Z_][a-zA-Z0-9_]*)$")


def names_in(text: str) -> set[str]:
    return set(VLLM_NAME.findall(text))


def _rule_templates() -> list[Path]:
    return sorted(path for path in TEMPLATES.rglob("*.yaml") if "kind: PrometheusRule" in path.read_text())


def hpa_metric_names() -> set[str]:
    """The vLLM series the builders' HPA scales on (``vllm_X`` from the metrics API is ``vllm:X``)."""
    hpa = build_autoscaler(f.inputs())
    assert hpa is not None, "the default order's class scales, so the builders make an HPA"
    names: set[str] = set()
    for metric in hpa["spec"]["metrics"]:
        name = ((metric.get("pods") or metric.get("object") or metric.get("external") or {}).get("metric") or {}).get(
            "name"
        )
        if name is None:
            continue
        adapted = ADAPTED_NAME.match(name)
        assert adapted, f"the HPA scales on {name!r}, which is not the metrics API spelling of a vLLM series"
        names.add(f"vllm:{adapted.group(1)}")
    return names


def used_metric_names() -> dict[str, set[str]]:
    """Source (a path relative to the repository, or "HPA (builders)") -> the vLLM names it uses."""
    sources: dict[str, set[str]] = {}
    for path in [*sorted(DASHBOARDS.glob("*.json")), *_rule_templates(), ADAPTER_RULES, STANDIN_RUNTIME]:
        if path.exists():
            sources[str(path.relative_to(REPO))] = names_in(path.read_text())
    sources["HPA (builders)"] = hpa_metric_names()
    return sources
