"""The chart's alerts judged by Prometheus' own rule engine: ``promtool test rules``.

Each file of ``tests/metrics/rules/`` is one promtool unit-test file (one test here each) over the
chart's PrometheusRule, rendered with the pinned helm and written as ``ai-inference.rules.yaml``
(``rule_files`` names it): input series in promtool's notation, and the alerts expected at given
times — labels and rendered annotations, pending states through ``ALERTS``. A new alert gets its
file there; ``test_every_alert_has_a_rule_test`` fails until it has one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from devstack.metrics.rules import alert_names, alert_rule_groups
from tests.chart.helm import Helm
from tests.metrics.promtool import RULES_FILE, Promtool

RULE_TESTS = Path(__file__).parent / "rules"
RULE_TEST_FILES = sorted(RULE_TESTS.glob("*.yaml"))


def alerts_under_test(path: Path) -> set[str]:
    doc = yaml.safe_load(path.read_text())
    return {case["alertname"] for test in doc["tests"] for case in test.get("alert_rule_test", [])}


def test_the_rule_test_files_read_the_chart_rules() -> None:
    assert RULE_TEST_FILES, f"no promtool unit-test files in {RULE_TESTS}"
    for path in RULE_TEST_FILES:
        assert yaml.safe_load(path.read_text())["rule_files"] == [RULES_FILE], path.name


def test_every_alert_has_a_rule_test(helm: Helm) -> None:
    alerts = set(alert_names(alert_rule_groups(helm.binary)))
    assert alerts >= {"D8AIInferenceCapacityPreempted", "D8AIInferenceDonorHeldAtLoweredBound"}
    tested = set().union(*(alerts_under_test(path) for path in RULE_TEST_FILES))
    assert alerts - tested == set(), f"alerts of the chart without a promtool test in {RULE_TESTS}"


def test_the_chart_rules_pass_promtool_check(promtool: Promtool, rules_workdir: Path) -> None:
    promtool.check_rules(rules_workdir / RULES_FILE)


@pytest.mark.parametrize("test_file", RULE_TEST_FILES, ids=[p.stem for p in RULE_TEST_FILES])
def test_promtool_unit_tests(promtool: Promtool, rules_workdir: Path, test_file: Path) -> None:
    promtool.test_rules(test_file, rules_workdir / RULES_FILE)


def test_a_wrong_expectation_fails(promtool: Promtool, rules_workdir: Path) -> None:
    """The harness reports promtool's failure (a file that expects no alert where one fires)."""
    wrong = rules_workdir / "wrong.yaml"
    series = (
        'ai_inference_capacity_preemptions_total{job="ai-inference",device_class="d",recipient_namespace="n",'
        'recipient="r"}'
    )
    wrong.write_text(
        yaml.safe_dump(
            {
                "rule_files": [RULES_FILE],
                "evaluation_interval": "1m",
                "tests": [
                    {
                        "interval": "1m",
                        "input_series": [{"series": series, "values": "0 0 1 1"}],
                        "alert_rule_test": [
                            {"eval_time": "3m", "alertname": "D8AIInferenceCapacityPreempted", "exp_alerts": []}
                        ],
                    }
                ],
            }
        )
    )
    with pytest.raises(AssertionError, match="D8AIInferenceCapacityPreempted"):
        promtool.test_rules(wrong, rules_workdir / RULES_FILE)
