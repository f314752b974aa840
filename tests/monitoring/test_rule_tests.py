"""Every alert of the chart is unit-tested under promtool: it fires, with its labels and annotations,
and it stays quiet where it should; tuned values move the thresholds under Prometheus' rule engine;
the rules as Deckhouse renders them are the same and pass ``promtool check rules``.

The unit-test files are tests/metrics/rules/*.yaml, run by tests/metrics/test_alert_rules.py against
the chart's PrometheusRule (rendered with the pinned helm, ``devstack.metrics.rules``), which fails
for an alert no file names. Here every alert must have at least one case where it fires — every
label and annotation of the rule expected (promtool compares them whole) — and one where it does
not (``exp_alerts: []``): a new alert with only half of that fails. ``rules/tuned.yaml`` (here) runs
against the rules rendered with ``TUNED_VALUES``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from devstack.metrics.rules import alert_rule_groups
from tests.chart.helm import CHART_DIR, Helm
from tests.metrics.promtool import RULES_FILE, Promtool
from tests.metrics.test_alert_rules import RULE_TEST_FILES

TUNED = Path(__file__).parent / "rules" / "tuned.yaml"
TUNED_VALUES: dict[str, Any] = {
    "monitoring": {"prometheusRule": {"orderNotReadyMinutes": 120, "workflowTaskFailingMinutes": 5}},
    "aiInference": {"temporal": {"taskQueue": "inference"}},
}
DECKHOUSE_EXAMPLE = CHART_DIR.parents[2] / "deploy" / "examples" / "moduleconfig" / "moduleconfig-minimal.yaml"


def _alerts(groups: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for group in groups["groups"] for rule in group["rules"] if "alert" in rule}


def coverage_gaps(groups: dict[str, Any], test_files: list[Path]) -> list[str]:
    """What the unit tests in ``test_files`` leave untested of the alerts of ``groups``."""
    fires: dict[str, list[dict[str, Any]]] = {}
    quiet: dict[str, int] = {}
    for path in test_files:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test") or ():
                name = case["alertname"]
                if case.get("exp_alerts"):
                    fires.setdefault(name, []).extend(case["exp_alerts"])
                else:
                    quiet[name] = quiet.get(name, 0) + 1
    gaps: list[str] = []
    for name, rule in sorted(_alerts(groups).items()):
        if name not in fires:
            gaps.append(f"{name}: no case where it fires")
        if name not in quiet:
            gaps.append(f"{name}: no case where it stays quiet (exp_alerts: [])")
        for expected in fires.get(name, ()):
            missing = set(rule.get("labels") or {}) - set(expected.get("exp_labels") or {})
            missing |= set(rule.get("annotations") or {}) - set(expected.get("exp_annotations") or {})
            if missing:
                gaps.append(f"{name}: a firing case expects none of {sorted(missing)}")
    return gaps


def test_every_alert_fires_with_its_labels_and_annotations_and_stays_quiet_in_a_unit_test(helm: Helm) -> None:
    groups = alert_rule_groups(helm.binary)
    assert len(_alerts(groups)) >= 4
    assert coverage_gaps(groups, RULE_TEST_FILES) == []


def test_the_coverage_check_names_what_a_new_alert_lacks(tmp_path: Path) -> None:
    groups = {
        "groups": [
            {
                "name": "g",
                "rules": [
                    {"alert": "New", "expr": "up == 0", "labels": {"tier": "cluster"}, "annotations": {"summary": "s"}},
                    {"alert": "Half", "expr": "up == 0", "labels": {"tier": "cluster"}},
                    {"record": "r", "expr": "up"},
                ],
            }
        ]
    }
    half = tmp_path / "half.yaml"
    half.write_text(
        yaml.safe_dump(
            {
                "tests": [
                    {
                        "alert_rule_test": [
                            {"eval_time": "1m", "alertname": "Half", "exp_alerts": [{"exp_labels": {}}]},
                        ]
                    }
                ]
            }
        )
    )
    assert coverage_gaps(groups, [half]) == [
        "Half: no case where it stays quiet (exp_alerts: [])",
        "Half: a firing case expects none of ['tier']",
        "New: no case where it fires",
        "New: no case where it stays quiet (exp_alerts: [])",
    ]


def test_tuned_values_move_the_thresholds_under_promtool(promtool: Promtool, helm: Helm, tmp_path: Path) -> None:
    tuned = alert_rule_groups(helm.binary, TUNED_VALUES)
    rules = tmp_path / RULES_FILE
    rules.write_text(yaml.safe_dump(tuned, sort_keys=False))
    promtool.check_rules(rules)
    promtool.test_rules(TUNED, rules)
    alerts = _alerts(tuned)
    assert "120 minutes" in alerts["D8AIInferenceOrderNotReady"]["annotations"]["summary"]
    assert "for 5 minutes" in alerts["D8AIInferenceWorkflowTaskFailing"]["annotations"]["description"]
    assert alerts["D8AIInferenceWorkflowTaskFailing"]["for"] == "5m"


def test_the_rules_deckhouse_renders_are_the_chart_rules_and_pass_promtool(
    promtool: Promtool, helm: Helm, tmp_path: Path
) -> None:
    """Deckhouse renders the module from its ModuleConfig (``aiInference`` from the openapi defaults,
    ``global`` from the platform): the same rules as plain helm, valid for Prometheus."""
    from tests.chart.test_module import deckhouse_values

    values = deckhouse_values(yaml.safe_load(DECKHOUSE_EXAMPLE.read_text()))
    deckhouse = alert_rule_groups(helm.binary, values)
    assert deckhouse == alert_rule_groups(helm.binary)
    rules = tmp_path / RULES_FILE
    rules.write_text(yaml.safe_dump(deckhouse, sort_keys=False))
    promtool.check_rules(rules)
