"""The harness's FGD (benchmarks/openb_fgd.py) and the side-by-side table (benchmarks/openb_table.py),
on hand-made nodes and tasks: the openb data is not needed, the full replay is a benchmark."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.openb import BestFit, NodeSpec, State, Task, main, replay, sequence
from benchmarks.openb_fgd import FGD, FragmentationMeasure, plugin_score
from benchmarks.openb_table import load, table


def task(name: str, gpus: int, milli: int, cpu: int = 4000, memory: int = 8192, spec: tuple[str, ...] = ()) -> Task:
    return Task(name, cpu, memory, gpus, milli, spec)


def test_the_papers_fragmentation_of_a_node() -> None:
    """Three kinds, equally popular: a 50 % share asking 8 cores, two whole GPUs, no GPU. A node with
    GPUs 40 % and 100 % free and 16 cores: for the share, the 40 % GPU is a fragment (less free than
    it asks); for the two-GPU task, the node has one full GPU, so all 140 % is a fragment; for the
    CPU-only task, all of it. With 4 cores the share cannot run either: all 140 %."""
    none: tuple[str, ...] = ()
    kinds = Counter({(8000, 1, 500, none): 1, (1000, 2, 1000, none): 1, (1000, 0, 0, none): 1})
    f = FragmentationMeasure(kinds, ["T4"])
    assert f("T4", 16000, [400, 1000]) == pytest.approx((400 + 1400 + 1400) / 3)
    assert f("T4", 4000, [400, 1000]) == pytest.approx((1400 + 1400 + 1400) / 3)
    # A kind tied to another GPU model cannot run here: all of it is a fragment for it.
    tied = FragmentationMeasure(Counter({(1000, 1, 500, ("A10",)): 1}), ["T4", "A10"])
    assert tied("T4", 16000, [1000]) == pytest.approx(1000)
    assert tied("A10", 16000, [1000]) == pytest.approx(0)


def test_the_plugin_score_is_an_integer_sigmoid_of_the_growth() -> None:
    """A Kubernetes score plugin's integer score: 100 x sigmoid(the growth's decrease in GPUs)."""
    assert plugin_score(0) == 50
    assert plugin_score(5) == plugin_score(40) == 49  # up to 4 % of a GPU: one step below
    assert plugin_score(-39) == 50
    assert plugin_score(-54) == 51
    assert plugin_score(8000) == 0
    assert plugin_score(-8000) == 99
    assert plugin_score(1e15) == 0


def test_fgd_takes_the_place_that_grows_fragmentation_least() -> None:
    """Half-GPU tasks are what comes. A 30 % task: on the GPU with 60 % free it leaves 30 %, a fragment
    for them (+30 % of a GPU); on an empty GPU it leaves 70 %, usable (+0): FGD takes the empty one,
    where best fit takes the fuller."""
    nodes = [NodeSpec("a", 64000, 262144, 1, "T4"), NodeSpec("b", 64000, 262144, 1, "T4")]
    tasks = [task(f"h{i}", 1, 500, cpu=1000) for i in range(10)]
    state = State(list(nodes))
    state.take(0, [0], task("first", 1, 400, cpu=1000))
    fgd = FGD(nodes, tasks, score="exact")
    assert fgd.place(state, task("second", 1, 300, cpu=1000)) == (1, [0])
    assert BestFit().place(state, task("second", 1, 300, cpu=1000)) == (0, [0])
    # Equal growths: the node first by name (the first in the list).
    empty = State(list(nodes))
    assert FGD(nodes, tasks).place(empty, task("x", 1, 500, cpu=1000)) == (0, [0])


def test_fgd_rescores_a_node_only_when_it_changed_and_replays_within_capacity() -> None:
    nodes = [
        NodeSpec("n0", 32000, 131072, 2, "T4"),
        NodeSpec("n1", 32000, 131072, 2, "T4"),
        NodeSpec("n2", 96000, 393216, 8, "G2"),
    ]
    tasks = [
        task("a", 1, 500),
        task("b", 1, 250),
        task("c", 1, 1000),
        task("d", 2, 1000),
        task("e", 0, 0, cpu=6000),
        task("f", 1, 700, spec=("T4",)),
        task("g", 4, 1000, cpu=20000),
    ]
    capacity = 1000 * sum(n.gpus for n in nodes)
    arrivals = sequence(tasks, 3, capacity)
    for score in ("plugin", "exact"):
        # State.take asserts that nothing is over-allocated.
        result = replay(nodes, arrivals, 3, FGD(nodes, tasks, score=score))
        assert result.failed < result.tasks
        assert 0 < result.columns[max(result.columns)] <= 100
        again = replay(nodes, arrivals, 3, FGD(nodes, tasks, score=score))
        assert again.columns == result.columns


def _data(tmp_path: Path) -> Path:
    nodes = [NodeSpec("n0", 32000, 131072, 2, "T4"), NodeSpec("n1", 96000, 393216, 4, "G2")]
    tasks = [task("t0", 1, 500), task("t1", 1, 300), task("t2", 1, 1000), task("t3", 2, 1000), task("t4", 0, 0)]
    (tmp_path / "openb_node_list_gpu_node.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        + "".join(f"{n.name},{n.cpuMilli},{n.memoryMiB},{n.gpus},{n.model}\n" for n in nodes)
    )
    (tmp_path / "openb_pod_list_tiny.csv").write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
        + "".join(f"{t.name},{t.cpuMilli},{t.memoryMiB},{t.numGpu},{t.gpuMilli},\n" for t in tasks)
    )
    columns = ["workload", "sc_policy", "tune", "seed", "total_gpus", *[str(k) for k in range(131)]]
    with (tmp_path / "published_allocation_ratio.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for seed, value in ((42, 90.0), (43, 92.0)):
            writer.writerow(["openb_pod_list_tiny", "06-FGD", 1.3, seed, 6, *([value] * 131)])
    return tmp_path


def test_the_table_puts_every_policy_beside_the_published_fgd(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _data(tmp_path)
    out = tmp_path / "results.jsonl"
    args = ["--data", str(data), "--table", "--seeds", "1", "2", "3", "--out", str(out)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    rows = load([out])
    assert sorted({r["policy"] for r in rows}) == ["bestfit", "fgd", "planner", "random"]
    assert sorted({r["seed"] for r in rows}) == [1, 2, 3]
    for label in ("| tiny | 3 | planner |", "| tiny | 3 | harness FGD |", "| tiny | 3 | harness best fit |"):
        assert label in printed
    assert "| tiny | 3 | random |" in printed
    assert "| tiny | 2 | published FGD | 91.00 ± 1.00 |" in printed
    assert "**average over the lists**" in printed
    # Kept results are not replayed again, and --from prints the same table from them.
    assert main(args) == 0
    assert len(load([out])) == len(rows)
    capsys.readouterr()
    assert main(["--data", str(data), "--from", str(out)]) == 0
    assert capsys.readouterr().out.strip() == table(rows, data).strip()
