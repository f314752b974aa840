"""The backend comparison (benchmarks/temporal_backends.py) at a tiny size, so the script cannot rot.

Not a timed test: both runs go end to end with three orders, on the dev server (a SQLite file) and
on the session's production Temporal, and every figure of the comparison must be read from both
reports (a label changed in benchmarks/scale.py would leave a hole in the table).
"""

from __future__ import annotations

import pytest

from benchmarks.temporal_backends import FIGURES, compare, figure, parse
from devstack.temporal_server import ProductionTemporal


@pytest.mark.temporal  # it starts the dev server too
async def test_both_backends_run_and_every_figure_is_compared(
    production_temporal: ProductionTemporal, capsys: pytest.CaptureFixture[str]
) -> None:
    tiny = "--orders 3 --day-orders 1 --resync-seconds 2 --day-cycles 1 --repeats 1 --sample 3 --cpu-window 1"
    args = parse([*tiny.split(), "--probe-interval", "1"])
    dev, prod = await compare(args, production_temporal)
    for label, name, pattern in FIGURES:
        for report in (dev, prod):
            value = figure(report, label, pattern)
            assert value is not None, f"{name}: not in the report {report.title!r}"
            assert value > 0, name
    # The server's own memory, not a neighbour's: a Temporal server is well over 50 MiB (nginx, the
    # dev server's terminator, is a few: it was once taken for the server).
    for report in (dev, prod):
        assert (figure(report, "Temporal server RSS", r"([\d.]+) MiB") or 0) > 50, report.title
    out = capsys.readouterr().out
    assert "== dev server vs PostgreSQL, 3 orders" in out
    assert "SQLite file" in out
    # What PostgreSQL holds: both databases, their biggest tables, its memory.
    for line in ("temporal size:", "temporal_visibility size:", "history_node:", "executions_visibility:"):
        assert line in out, out[-3000:]
    assert "PostgreSQL memory (PSS of all its processes)" in out
