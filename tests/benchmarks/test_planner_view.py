"""The planner view micro-benchmark (benchmarks/planner_view.py) runs, at a tiny size."""

from __future__ import annotations

import pytest

from benchmarks.planner_view import main


def test_the_benchmark_prints_its_figures(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--orders", "4", "8", "--repeat", "2"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[-2:]] == ["4", "8"]
    assert all(line.endswith("x") for line in lines[-2:])
