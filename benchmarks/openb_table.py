"""The side-by-side table of the trace replay (``benchmarks/openb.py --table``): the planner, the
harness's FGD (``benchmarks/openb_fgd.py``), best fit and random replayed in one run on the same
sequences (one per list and seed), every list, means and standard errors over the seeds, beside the
paper's published FGD (the mean of its ten seeds).

    .venv/bin/python -m benchmarks.openb --table --seeds 42 43 44 45 46 47 48 49 50 51 --jobs 2 \\
        --out /tmp/openb.jsonl

Each (list, seed) replays every policy on the same arrival sequence; a result is one JSON line
appended to ``--out`` as soon as it is done (a run that stops can be resumed: what ``--out`` already
holds is not replayed again), and ``--from FILE ...`` prints the table of results kept earlier
without replaying anything. The standard error of a mean is the seeds' standard deviation over the
square root of their number; a difference between two policies is taken seed by seed (they replay
the same sequence), then averaged.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Iterable, Sequence
from multiprocessing import get_context
from pathlib import Path
from typing import Any

POLICIES = ("planner", "fgd", "bestfit", "random")
# The columns the goal is judged on (GPU allocation % at 100-130 % arrived).
COLUMNS = (100, 110, 120, 130)


def _replay_one(job: tuple[str, str, int, tuple[str, ...], bool]) -> list[dict[str, Any]]:
    """Every policy on one list's sequence for one seed (run in a worker process)."""
    from benchmarks.openb import load_nodes, load_tasks, make_policy, replay, sequence
    from planner.recipes import load_recipe_book

    data, name, seed, policies, real_memory = job
    nodes = load_nodes(Path(data))
    tasks = load_tasks(Path(data), name)
    capacity = 1000 * sum(n.gpus for n in nodes)
    arrivals = sequence(tasks, seed, capacity)
    book = load_recipe_book()
    out = []
    for kind in policies:
        result = replay(nodes, arrivals, seed, make_policy(kind, nodes, tasks, seed, book, real_memory=real_memory))
        out.append(
            {
                "list": name,
                "seed": seed,
                "policy": kind,
                "realMemory": real_memory,
                "columns": {str(k): _column(result.columns, k) for k in COLUMNS},
                "tasks": result.tasks,
                "failed": result.failed,
                "plans": result.plans,
                "planSeconds": result.planSeconds,
                "seconds": result.seconds,
            }
        )
    return out


def _column(columns: dict[int, float], k: int) -> float:
    """Column k; when no record's arrived share rounds to k (a short list), the last one before it (no
    task came between: the allocation is what it was)."""
    if k in columns:
        return columns[k]
    below = [j for j in columns if j < k]
    return columns[max(below)] if below else 0.0


def load(paths: Iterable[Path]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in paths:
        if path.exists():
            rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows


def replay_all(
    data: Path,
    lists: Sequence[str],
    seeds: Sequence[int],
    policies: Sequence[str] = POLICIES,
    jobs: int = 1,
    out: Path | None = None,
    real_memory: bool = False,
) -> list[dict[str, Any]]:
    """Replay what ``out`` does not hold yet; every result (kept and new)."""
    rows = load([out]) if out is not None else []
    done = {(r["list"], r["seed"], r["policy"]) for r in rows if r.get("realMemory", False) == real_memory}
    todo = [
        (str(data), name, seed, tuple(p for p in policies if (name, seed, p) not in done), real_memory)
        for name in lists
        for seed in seeds
    ]
    todo = [job for job in todo if job[3]]
    started = time.perf_counter()

    def keep(results: list[dict[str, Any]]) -> None:
        rows.extend(results)
        if out is not None:
            with out.open("a") as f:
                for r in results:
                    f.write(json.dumps(r) + "\n")
        first = results[0]
        print(
            f"  {first['list']} seed {first['seed']}: "
            + ", ".join(f"{r['policy']} {_mean_of(r):.2f}" for r in results)
            + f" ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )

    if jobs > 1 and len(todo) > 1:
        with get_context("spawn").Pool(jobs) as pool:
            for results in pool.imap_unordered(_replay_one, todo):
                keep(results)
    else:
        for job in todo:
            keep(_replay_one(job))
    return rows


def _mean_of(row: dict[str, Any]) -> float:
    """A result's mean over the columns 100-130."""
    return statistics.fmean(float(row["columns"][str(k)]) for k in COLUMNS)


def _stats(values: Sequence[float]) -> tuple[float, float]:
    """(mean, standard error)."""
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else float("nan")
    return mean, se


def _cell(values: Sequence[float]) -> str:
    mean, se = _stats(values)
    return f"{mean:.2f} ± {se:.2f}" if not math.isnan(se) else f"{mean:.2f}"


def table(rows: Sequence[dict[str, Any]], data: Path, policies: Sequence[str] = POLICIES) -> str:
    """The markdown tables: every list's policies by column, then the planner's lead over the
    harness's FGD per list and on average."""
    from benchmarks.openb import published_seeds

    lists = sorted({r["list"] for r in rows})
    by: dict[tuple[str, str], dict[int, dict[int, float]]] = {}
    for r in rows:
        by.setdefault((r["list"], r["policy"]), {})[r["seed"]] = {k: float(r["columns"][str(k)]) for k in COLUMNS}
    seeds_of = {name: sorted(set.intersection(*(set(by.get((name, p), {})) for p in policies))) for name in lists}
    lines = [
        "GPU allocation ratio (%) at 100 / 110 / 120 / 130 % arrived; mean ± standard error over the seeds "
        "(published FGD: the paper's mean ± standard error over its 10 seeds).",
        "",
        "| list | seeds | policy | 100 % | 110 % | 120 % | 130 % | mean 100-130 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in lists:
        seeds = seeds_of[name]
        if not seeds:
            continue
        for p in policies:
            runs = by[(name, p)]
            cells = [_cell([runs[s][k] for s in seeds]) for k in COLUMNS]
            overall = _cell([statistics.fmean(runs[s][k] for k in COLUMNS) for s in seeds])
            label = "harness FGD" if p == "fgd" else "harness best fit" if p == "bestfit" else p
            lines.append(f"| {name} | {len(seeds)} | {label} | " + " | ".join(cells) + f" | {overall} |")
        pub = published_seeds(data, name).get("06-FGD")
        if pub:
            cells = [_cell([v[k] for v in pub.values()]) for k in COLUMNS]
            overall = _cell([statistics.fmean(v[k] for k in COLUMNS) for v in pub.values()])
            lines.append(f"| {name} | {len(pub)} | published FGD | " + " | ".join(cells) + f" | {overall} |")
    lines += [
        "",
        "Planner - harness FGD (seed by seed, the same sequences), and harness FGD - published FGD, "
        "in points of GPU allocation, mean over 100-130 % arrived:",
        "",
        "| list | planner - harness FGD | at 100 / 110 / 120 / 130 % | harness FGD - published FGD |",
        "|---|---|---|---|",
    ]
    leads: list[float] = []
    for name in lists:
        seeds = seeds_of[name]
        if not seeds or "planner" not in policies or "fgd" not in policies:
            continue
        planner, fgd = by[(name, "planner")], by[(name, "fgd")]
        diff = [statistics.fmean(planner[s][k] - fgd[s][k] for k in COLUMNS) for s in seeds]
        per_column = " / ".join(f"{statistics.fmean(planner[s][k] - fgd[s][k] for s in seeds):+.2f}" for k in COLUMNS)
        mean, se = _stats(diff)
        leads.append(mean)
        pub = published_seeds(data, name).get("06-FGD")
        vs_pub = "—"
        if pub:
            ours = statistics.fmean(statistics.fmean(fgd[s][k] for k in COLUMNS) for s in seeds)
            theirs = statistics.fmean(statistics.fmean(v[k] for k in COLUMNS) for v in pub.values())
            vs_pub = f"{ours - theirs:+.2f}"
        lines.append(f"| {name} | {mean:+.2f} ± {se:.2f} | {per_column} | {vs_pub} |")
    if leads:
        lines.append(f"| **average over the lists** | **{statistics.fmean(leads):+.2f}** | | |")
    return "\n".join(lines)


__all__ = ["POLICIES", "load", "replay_all", "table"]
