"""The trace replay with departures (benchmarks/openb_departures.py) on a tiny slice: tasks leave, the
planner's snapshot and the replay's state stay one picture, and a repack frees GPUs without
over-filling any. Unit level (no openb data); the full replay is a benchmark, never run by CI."""

from __future__ import annotations

import statistics

import pytest

from benchmarks.openb import NodeSpec, Planner, State, Task, recent_demands
from benchmarks.openb_departures import arrivals, replay
from planner.recipes import load_recipe_book

NODES = [NodeSpec(f"n{i}", 32000, 131072, 2, "T4") for i in range(4)]
BOOK = load_recipe_book()


def task(name: str, milli: int, gpus: int = 1, lifetime: int = 100) -> Task:
    return Task(name, 2000, 4096, gpus, milli, (), lifetime)


def same_picture(planner: Planner, state: State) -> None:
    """Every GPU's allocations on the planner's snapshot are what the replay's state holds of it; every
    node's requests are the tasks' on it."""
    for i, node in enumerate(state.nodes):
        for g, free in enumerate(state.gpus[i]):
            device = planner.devices[f"{node.name}/gpu-{g}"]
            assert 10 * sum(a.sharePercent for a in device.allocations) == 1000 - free, (node.name, g)
        record = planner.records[node.name]
        assert record.requestedCpuMilli == node.cpuMilli - state.cpu[i]
        assert record.requestedMemoryMiB == node.memoryMiB - state.mem[i]


def place(planner: Planner, state: State, t: Task) -> tuple[int, list[int]]:
    spot = planner.place(state, t)
    assert spot is not None, t
    state.take(spot[0], spot[1], t)
    return spot


def test_a_task_that_leaves_gives_back_what_it_took_on_both_pictures() -> None:
    tasks = [task("a", 500), task("b", 300), task("c", 1000, gpus=2), task("d", 0, gpus=0)]
    state = State(list(NODES))
    planner = Planner(NODES, recent_demands(tasks), BOOK)
    spots = {t.name: place(planner, state, t) for t in tasks}
    same_picture(planner, state)
    for t in tasks:
        i, gpus = spots[t.name]
        state.release(i, gpus, t)
        planner.release(state, i, gpus, t)
        same_picture(planner, state)
    assert state.allocated == 0
    assert all(free == 1000 for gpus in state.gpus for free in gpus)
    # And the GPUs they left are planned again (no judgement kept from before they left).
    assert place(planner, state, task("e", 1000, gpus=2)) is not None


def test_a_repack_empties_a_gpu_and_the_pictures_agree() -> None:
    # Four 30 % shares, placed one by one: then all but one on each of two GPUs leave.
    shares = [task(f"s{k}", 300) for k in range(8)]
    state = State(list(NODES))
    planner = Planner(NODES, recent_demands(shares), BOOK)
    spots = {t.name: place(planner, state, t) for t in shares}
    used = {(i, g) for i, gpus in spots.values() for g in gpus}
    assert len(used) >= 3, spots  # shares spread over several GPUs
    # Keep one share per used GPU: the rest leave.
    kept: dict[tuple[int, int], Task] = {}
    for t in shares:
        i, gpus = spots[t.name]
        if (i, gpus[0]) in kept:
            state.release(i, gpus, t)
            planner.release(state, i, gpus, t)
        else:
            kept[(i, gpus[0])] = t
    before = sum(free < 1000 for gpus in state.gpus for free in gpus)
    moves = planner.repack(state, {t.name: t for t in kept.values()}, max_moves=None)
    same_picture(planner, state)
    after = sum(free < 1000 for gpus in state.gpus for free in gpus)
    # Three 30 % shares fit on one GPU: each move empties a GPU.
    assert moves, kept
    assert after == before - len(moves)
    assert all(0 <= free <= 1000 for gpus in state.gpus for free in gpus)


def test_lifetimes_are_the_trace_own_scaled_to_one_round_each_counted_to_the_end() -> None:
    tasks = [task(f"t{k}", 100 * (k % 5 + 1), lifetime=10 * (k + 1) ** 2) for k in range(40)]
    capacity = 1000 * sum(n.gpus for n in NODES)
    stream, lifetimes, round_length = arrivals(tasks, 42, capacity, rounds=3)
    assert len(stream) == len(lifetimes) > round_length > 0
    assert len({t.name for t in stream}) == len(stream)  # one holder per arrival
    horizon = 3 * round_length
    mean = statistics.fmean(min(life, horizon) for life in lifetimes)
    assert abs(mean - round_length) <= 0.15 * round_length
    # The order of lifetimes is the trace's: a task that lived longer there lives longer here.
    by_trace = sorted(zip((t.lifetime for t in stream), lifetimes, strict=True))
    assert [life for _, life in by_trace] == sorted(life for _, life in by_trace)


def test_a_list_without_lifetimes_is_refused() -> None:
    with pytest.raises(ValueError, match="no lifetimes"):
        arrivals([task("t", 500, lifetime=0)], 42, 8000, rounds=2)


@pytest.mark.parametrize("kind", ["planner", "planner+repack", "bestfit"])
def test_the_replay_with_departures_runs_every_policy_and_measures_after_the_warm_up(kind: str) -> None:
    tasks = [task(f"t{k}", (100, 250, 500, 1000)[k % 4], lifetime=50 + 30 * k) for k in range(24)]
    result = replay(NODES, tasks, 42, kind, BOOK, rounds=3, repack_every=5.0, max_moves=4)
    assert result.policy == kind
    assert 0 < result.allocation <= 100
    assert 0 <= result.failedGpu <= 100
    assert result.arrivals > 24
    if kind != "planner+repack":
        assert result.moves == 0
