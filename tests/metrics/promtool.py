"""promtool as a subprocess: the chart's alert rules judged by Prometheus' own rule engine.

``rules_dir(helm, directory)`` writes the chart's PrometheusRule (rendered with the pinned helm,
``devstack.metrics.rules``) as ``ai-inference.rules.yaml``; a unit-test file of ``promtool test
rules`` names it in ``rule_files`` and is run from the same directory. ``series_values`` writes a
list of scraped samples in promtool's expanding notation (``_`` no sample, ``stale`` a staleness
marker, as Prometheus writes when a target's scrape lacks a series it had).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from devstack.metrics.rules import write_alert_rules

RULES_FILE = "ai-inference.rules.yaml"


@dataclass(frozen=True)
class Promtool:
    binary: Path

    def __call__(self, *args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.binary), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)

    def check_rules(self, rules: Path) -> None:
        result = self("check", "rules", str(rules))
        assert result.returncode == 0, f"promtool check rules {rules}:\n{result.stdout}{result.stderr}"

    def test_rules(self, test_file: Path, rules: Path) -> None:
        """Run one unit-test file against ``rules`` (copied beside it): fails with promtool's words."""
        workdir = rules.parent
        target = workdir / test_file.name
        if test_file.resolve() != target.resolve():
            shutil.copyfile(test_file, target)
        result = self("test", "rules", target.name, cwd=workdir)
        assert result.returncode == 0, f"promtool test rules {test_file.name}:\n{result.stdout}{result.stderr}"


def rules_dir(helm: Path, directory: Path) -> Path:
    """The chart's alert rules written to ``directory/ai-inference.rules.yaml``; returns that path."""
    return write_alert_rules(helm, directory / RULES_FILE)


def series_values(samples: Sequence[float | None]) -> str:
    """promtool's notation of one series sampled at each interval: ``None`` where the scrape lacked
    it — ``stale`` right after a sample (what Prometheus writes then), ``_`` otherwise."""
    words: list[str] = []
    previous: float | None = None
    for value in samples:
        if value is None:
            words.append("stale" if previous is not None else "_")
        else:
            words.append(repr(float(value)).removesuffix(".0"))
        previous = value
    return " ".join(words)


def series_selector(name: str, labels: dict[str, str]) -> str:
    inner = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def write_test_file(path: Path, tests: list[dict[str, Any]], interval: str = "1m") -> Path:
    """A unit-test file over the chart's rules (evaluated every ``interval``)."""
    path.write_text(
        yaml.safe_dump({"rule_files": [RULES_FILE], "evaluation_interval": interval, "tests": tests}, sort_keys=False)
    )
    return path
