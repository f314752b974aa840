"""The dashboards' queries without a stack: each parses as PromQL under promtool once its template
variables are substituted the way the live test (test_live_queries.py) substitutes them, and the
substitution follows Grafana's rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.helm import CHART_DIR, Helm
from tests.metrics.promtool import Promtool
from tests.monitoring.queries import (
    GrafanaRange,
    alert_signal,
    format_multi,
    panel_queries,
    regex_escape,
    substitute,
    variables,
)

DASHBOARDS = sorted((CHART_DIR / "dashboards").glob("*.json"))


def _dashboards() -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in DASHBOARDS]


def offline_values(dashboard: dict[str, Any]) -> dict[str, str]:
    """Every variable of ``dashboard``: the constants as written, query variables All."""
    values = GrafanaRange(0, 3 * 3600, 30).builtins()
    for variable in variables(dashboard):
        if variable["type"] == "constant":
            values[variable["name"]] = str(variable["query"])
        elif variable["type"] == "query":
            values[variable["name"]] = format_multi(None, variable.get("allValue"))
    return values


def test_every_dashboard_query_parses_as_promql_under_promtool(promtool: Promtool, tmp_path: Path) -> None:
    """promtool parses each query (a recording rule's expression): a syntax error, an unknown function
    or a variable the test cannot fill fails here, in the fast tier, before any stack runs."""
    rules: list[dict[str, str]] = []
    dashboards = _dashboards()
    for dashboard in dashboards:
        values = offline_values(dashboard)
        for index, query in enumerate(q for q in panel_queries([dashboard])):
            rules.append({"record": f"dashboard:query_{len(rules)}_{index}", "expr": substitute(query.expr, values)})
    assert len(rules) >= 28
    path = tmp_path / "dashboards.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    promtool.check_rules(path)


def test_a_broken_query_fails_promtool(promtool: Promtool, tmp_path: Path) -> None:
    path = tmp_path / "broken.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [{"record": "r", "expr": "sum by (le (x)"}]}]}))
    with pytest.raises(AssertionError, match="promtool check rules"):
        promtool.check_rules(path)


def test_panel_queries_walk_rows_and_name_each_target() -> None:
    dashboard = {
        "uid": "d",
        "panels": [
            {"title": "p", "targets": [{"refId": "A", "expr": "up"}, {"refId": "B", "expr": "x", "instant": True}]},
            {"type": "row", "title": "row", "panels": [{"title": "inner", "targets": [{"refId": "A", "expr": "y"}]}]},
            {"title": "text", "type": "text"},
        ],
    }
    assert [(q.key, q.instant) for q in panel_queries([dashboard])] == [
        ("d/p/A", False),
        ("d/p/B", True),
        ("d/inner/A", False),
    ]
    found = panel_queries(_dashboards())
    assert {q.dashboard for q in found} == {"ai-inference-module", "ai-inference-performance", "ai-inference-queries"}


def test_grafana_intervals_follow_its_formulas() -> None:
    short = GrafanaRange(0, 300, 2)  # 5 minutes scraped every 2 s
    assert short.builtins()["__interval"] == "2s"
    assert short.builtins()["__rate_interval"] == "8s"  # 4 x scrape interval
    assert short.builtins()["__range"] == "300s"
    day = GrafanaRange(0, 86400, 15)  # a day over 1000 points: 87 s a point
    assert day.interval_seconds == 87
    assert day.rate_interval_seconds == 102  # $__interval + scrape interval


def test_variables_are_written_as_grafanas_prometheus_data_source_writes_them() -> None:
    assert format_multi(None, ".*") == ".*"
    assert format_multi(["team-a"]) == "team-a"
    assert format_multi(["a", "b"]) == "(a|b)"
    # Inside a double-quoted PromQL string: \\. is the regex's escaped dot.
    assert regex_escape("Qwen/Qwen2.5") == "Qwen/Qwen2\\\\.5"
    with pytest.raises(ValueError, match="allValue"):
        format_multi(None)
    assert substitute('rate(x{q="$task_queue"}[$__rate_interval])', {"task_queue": "q", "__rate_interval": "8s"}) == (
        'rate(x{q="q"}[8s])'
    )
    assert substitute("${a}$b", {"a": "1", "b": "2"}) == "12"
    with pytest.raises(KeyError, match=r"\$namespace"):
        substitute('x{namespace=~"$namespace"}', {})


def test_an_alerts_signal_is_its_expression_without_the_threshold() -> None:
    assert alert_signal("sum by (a) (increase(x[10m])) > 0") == "sum by (a) (increase(x[10m]))"
    assert alert_signal('max by (n) (y{job="j"})\n  > 3600') == 'max by (n) (y{job="j"})'
    assert alert_signal("absent(up)") is None


def test_the_live_test_declares_only_real_alerts(helm: Helm) -> None:
    """The declarations of test_live_queries.py name alerts the chart has, every one of them."""
    from devstack.metrics.rules import alert_names, alert_rule_groups
    from tests.monitoring.test_live_queries import EMPTY_PANELS, EMPTY_SIGNALS, QUIET_ALERTS

    alerts = set(alert_names(alert_rule_groups(helm.binary)))
    assert set(QUIET_ALERTS) == alerts
    assert set(EMPTY_SIGNALS) <= alerts
    keys = {q.key for q in panel_queries(_dashboards())}
    assert set(EMPTY_PANELS) <= keys
