"""Trace replay with departures: how much GPU allocation a periodic repack (``planner.repack``) adds.

    .venv/bin/python -m benchmarks.openb_departures [--lists gpushare40 ...] [--seeds 42 43]
        [--nodes 200] [--rounds 3] [--repack-every 1.0] [--max-moves 16]

``benchmarks/openb.py`` replays the paper's method: tasks arrive and never leave, so a plan made once
is never wrong later, and a repack has nothing to win. Here tasks leave.

* **Arrivals.** ``--rounds`` sequences of the paper's method (``openb.sequence``: the list shuffled by
  the seed, filled to 1.3 x the capacity), one after the other, seeds ``seed``, ``seed + 1``, ...; one
  task arrives per tick. A task that finds no place is dropped (as in the paper).
* **Lifetimes.** Each task's own, from the trace: its ``deletion_time - creation_time`` (the gpushare
  and gpuspec lists record them; the multigpu lists do not, and are refused). They are scaled by one
  factor so that their mean, each counted up to the end of the replay, is one round's arrivals: the
  tasks that arrive within one mean lifetime ask for 1.3 x the capacity, so the cluster runs full and
  a task that does not fit is a task that leaves capacity unused. The trace's lifetimes are
  heavy-tailed (gpushare40: median 511 s, mean 23,331 s), so most tasks stay a short while and a few
  for a long time: the churn that strands shares.
* **Repack.** ``planner+repack`` is the planner's policy with a repack pass every ``--repack-every``
  % of a round's arrivals, at most ``--max-moves`` moves a pass; each move is made at once (the module
  makes it make-before-break, which the proposal allows: every target has room with the source held).
* **Figures**, after the first round (the warm-up, while the cluster fills): the GPU allocation ratio
  averaged over the ticks, the GPU tasks that found no place (%), and for the repack the moves made and
  the devices its passes freed.
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.openb import (
    DEFAULT_DATA,
    NodeSpec,
    Planner,
    Policy,
    State,
    Task,
    load_nodes,
    load_tasks,
    make_policy,
    sequence,
)
from planner.recipes import RecipeBook, load_recipe_book

POLICIES = ("planner", "planner+repack", "bestfit")
DEFAULT_LISTS = ("gpushare40", "gpushare60", "gpushare80")


@dataclass
class DepartureResult:
    policy: str
    seed: int
    arrivals: int
    allocation: float  # mean GPU allocation ratio (%) over the measured ticks
    failedGpu: float  # GPU tasks that found no place (%), measured ticks
    moves: int = 0
    freed: int = 0
    seconds: float = 0.0


def arrivals(tasks: Sequence[Task], seed: int, capacity: int, rounds: int) -> tuple[list[Task], list[int], int]:
    """The arrival stream (each task renamed ``name@tick``: one holder per arrival), each task's
    lifetime in ticks, and one round's length."""
    stream: list[Task] = []
    first = 0
    for r in range(rounds):
        one = sequence(tasks, seed + r, capacity)
        first = first or len(one)
        stream += one
    timed = [t.lifetime for t in tasks]
    if not any(timed):
        raise ValueError("the task list records no lifetimes (creation_time, deletion_time): use a gpushare list")
    factor = _scale(timed, first, first * rounds)
    renamed = [dataclasses.replace(t, name=f"{t.name}@{tick}") for tick, t in enumerate(stream)]
    lifetimes = [max(1, round(t.lifetime * factor)) for t in stream]
    return renamed, lifetimes, first


def _scale(lifetimes: Sequence[int], mean_ticks: int, horizon: int) -> float:
    """The one factor that makes the lifetimes' mean ``mean_ticks``, each counted up to the replay's
    ``horizon`` (a task that outlives the replay holds its place to the end, and no longer)."""
    low, high = 0.0, float(horizon)
    for _ in range(60):
        mid = (low + high) / 2
        if statistics.fmean(min(life * mid, horizon) for life in lifetimes) < mean_ticks:
            low = mid
        else:
            high = mid
    return high


def replay(
    nodes: Sequence[NodeSpec],
    tasks: Sequence[Task],
    seed: int,
    kind: str,
    book: RecipeBook,
    *,
    rounds: int = 3,
    repack_every: float = 1.0,
    max_moves: int | None = 16,
) -> DepartureResult:
    state = State(list(nodes))
    capacity = state.capacity
    stream, lifetimes, round_length = arrivals(tasks, seed, capacity, rounds)
    repacking = kind == "planner+repack"
    policy: Policy = make_policy("planner" if repacking else kind, nodes, tasks, seed, book)
    every = max(1, round(round_length * repack_every / 100))
    leaving: list[tuple[int, str]] = []
    placed: dict[str, tuple[int, list[int]]] = {}
    running: dict[str, Task] = {}
    allocation: list[float] = []
    gpu_tasks = failed = moves = freed = 0
    started = time.perf_counter()
    for tick, task in enumerate(stream):
        while leaving and leaving[0][0] <= tick:
            _, name = heapq.heappop(leaving)
            i, gpus = placed.pop(name)
            gone = running.pop(name)
            state.release(i, gpus, gone)
            policy.release(state, i, gpus, gone)
        if repacking and tick and tick % every == 0:
            assert isinstance(policy, Planner)
            shares = {n: t for n, t in running.items() if t.numGpu == 1 and t.gpuMilli < 1000}
            before = _used_gpus(state)
            for name, _, _, j, h in policy.repack(state, shares, max_moves):
                placed[name] = (j, [h])
                moves += 1
            freed += before - _used_gpus(state) if tick >= round_length else 0
        measured = tick >= round_length
        spot = policy.place(state, task)
        if spot is None:
            failed += measured and task.numGpu > 0
        else:
            i, gpus = spot
            state.take(i, gpus, task)
            placed[task.name] = (i, list(gpus))
            running[task.name] = task
            heapq.heappush(leaving, (tick + lifetimes[tick], task.name))
        if measured:
            gpu_tasks += task.numGpu > 0
            allocation.append(100 * state.allocated / capacity)
    return DepartureResult(
        kind,
        seed,
        len(stream),
        statistics.fmean(allocation) if allocation else 0.0,
        100 * failed / gpu_tasks if gpu_tasks else 0.0,
        moves,
        freed,
        time.perf_counter() - started,
    )


def _used_gpus(state: State) -> int:
    return sum(free < 1000 for gpus in state.gpus for free in gpus)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--lists", nargs="*", default=list(DEFAULT_LISTS))
    parser.add_argument("--seeds", nargs="*", type=int, default=[42])
    parser.add_argument("--policies", nargs="*", default=list(POLICIES))
    parser.add_argument("--nodes", type=int, default=200, help="an evenly spaced sample of N nodes (0: all)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repack-every", type=float, default=1.0, help="%% of a round's arrivals between passes")
    parser.add_argument("--max-moves", type=int, default=16, help="moves a pass at most (0: no bound)")
    args = parser.parse_args(argv)
    if not (args.data / "openb_node_list_gpu_node.csv").exists():
        print(f"no openb data under {args.data} (see ../shared/data/openb/README.md)", file=sys.stderr)
        return 2
    book = load_recipe_book()
    nodes = load_nodes(args.data)
    if args.nodes:
        nodes = nodes[:: max(1, len(nodes) // args.nodes)][: args.nodes]
    gpus = sum(n.gpus for n in nodes)
    print(
        f"{len(nodes)} nodes, {gpus} GPUs; {args.rounds} rounds of arrivals (the first is the warm-up), "
        f"repack every {args.repack_every} % of a round, at most {args.max_moves or 'any'} moves a pass"
    )
    for name in args.lists:
        tasks = load_tasks(args.data, name)
        print(f"\n{name}:  {'policy':<16} {'allocation %':>12} {'GPU tasks failed %':>19} {'moves':>6} {'freed':>6}")
        results: dict[str, list[DepartureResult]] = {}
        for seed in args.seeds:
            for kind in args.policies:
                result = replay(
                    nodes,
                    tasks,
                    seed,
                    kind,
                    book,
                    rounds=args.rounds,
                    repack_every=args.repack_every,
                    max_moves=args.max_moves or None,
                )
                results.setdefault(kind, []).append(result)
                print(
                    f"  seed {seed:<5} {kind:<16} {result.allocation:12.2f} {result.failedGpu:19.2f} "
                    f"{result.moves:6d} {result.freed:6d}  ({result.seconds:.0f} s)",
                    flush=True,
                )
        for kind, rows in results.items():
            print(
                f"  mean       {kind:<16} {statistics.fmean(r.allocation for r in rows):12.2f} "
                f"{statistics.fmean(r.failedGpu for r in rows):19.2f}"
            )
        if "planner" in results and "planner+repack" in results:
            gain = [
                b.allocation - a.allocation for a, b in zip(results["planner"], results["planner+repack"], strict=True)
            ]
            print(
                f"  the repack adds {statistics.fmean(gain):+.2f} points of GPU allocation (mean of {len(gain)} seeds)"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
