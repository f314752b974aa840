"""The rule files of the metrics parts: the chart's alerts for Prometheus, the adapter's rules.

Both come from the chart, the one source of truth: the alerts are rendered from its
PrometheusRule template with the pinned helm (``monitoring.coreos.com/v1`` announced, as where
prometheus-operator runs) and written as a plain Prometheus rule file; the adapter's rule file is
``deploy/charts/ai-inference/files/prometheus-adapter-rules.yaml``, which the chart ships to
clusters as it is.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from devstack.cluster.paths import REPO_ROOT

CHART = REPO_ROOT / "deploy" / "charts" / "ai-inference"
ADAPTER_RULES = CHART / "files" / "prometheus-adapter-rules.yaml"
PROMETHEUS_RULE_API = "monitoring.coreos.com/v1/PrometheusRule"
RULE_NAME = "ai-inference"
# The chart's kubeVersion floor is 1.34; the pinned helm is version-stamped, but say it anyway.
KUBE_VERSION = "1.34.4"


class RulesError(RuntimeError):
    """The chart did not render the rules this stack needs."""


def alert_rule_groups(helm: Path, values: dict[str, Any] | None = None) -> dict[str, Any]:
    """The chart's PrometheusRule ``ai-inference`` as a Prometheus rule file: ``{"groups": [...]}``."""
    args = [str(helm), "template", "ai-inference", str(CHART), "--namespace", "d8-ai-inference"]
    args += ["--kube-version", KUBE_VERSION, "--api-versions", PROMETHEUS_RULE_API]
    if values:
        args += ["--values", "-"]
    result = subprocess.run(
        args, input=yaml.safe_dump(values) if values else None, capture_output=True, text=True, timeout=120
    )
    if result.returncode != 0:
        raise RulesError(f"helm template failed ({result.returncode}): {result.stderr.strip()[-2000:]}")
    for doc in yaml.safe_load_all(result.stdout):
        if doc and doc.get("kind") == "PrometheusRule" and doc["metadata"]["name"] == RULE_NAME:
            return {"groups": doc["spec"]["groups"]}
    raise RulesError(f"the chart rendered no PrometheusRule {RULE_NAME!r} (monitoring.prometheusRule.enabled false?)")


def write_alert_rules(helm: Path, path: Path, values: dict[str, Any] | None = None) -> Path:
    """Write the chart's alert rules to ``path`` (a Prometheus rule file); returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(alert_rule_groups(helm, values), sort_keys=False))
    return path


def alert_names(groups: dict[str, Any]) -> list[str]:
    """Every alert of a rule file's groups."""
    return [rule["alert"] for group in groups["groups"] for rule in group["rules"] if "alert" in rule]


def adapter_rules() -> dict[str, Any]:
    """The adapter's rule file as the chart ships it."""
    loaded: dict[str, Any] = yaml.safe_load(ADAPTER_RULES.read_text())
    return loaded
