"""``ai-inference watch`` is the watcher's name; ``watcher`` still runs it, hidden from --help."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from worker.cli import app


def test_watch_is_listed_and_watcher_is_a_hidden_alias() -> None:
    listing = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert listing.exit_code == 0
    commands = [line.split()[1] for line in listing.output.splitlines() if line.startswith("│ ") and line.split()[1:]]
    assert "watch" in commands
    assert "watcher" not in commands


@pytest.mark.parametrize("command", ["worker", "watch", "watcher"])
def test_watch_and_worker_take_health_and_metrics_ports(command: str) -> None:
    shown = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "--health-port" in shown.output
    assert "--metrics-port" in shown.output
