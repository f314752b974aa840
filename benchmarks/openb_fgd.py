"""FGD in the trace replay: the policy of "Beware of Fragmentation" (Weng et al., USENIX ATC'23),
written from the paper's description for ``benchmarks/openb.py`` (no code of its simulator).

The paper's measure. A task m asks for CPU and GPU: no GPU, a share of one GPU (0 < d < 1) or d
whole GPUs of one node; it may name the GPU models it runs on. A node's unallocated GPU capacity is
a *fragment* for m when m cannot use it:

* m asks for no GPU: all of the node's free GPU capacity (m can use none of it, wherever it runs);
* m cannot run on the node at all (too little free CPU, a GPU model it does not take, too few GPUs
  with room): all of it;
* otherwise the free capacity of each GPU with less free than min(d, 1) (a share that small can
  hold no part of m: for a multi-GPU task, every partly used GPU).

The node's *expected fragmentation* F_n(M) weighs that over the target workload M, the task kinds
with their popularity (here: the list's tasks, each kind weighed by how often it occurs; a kind is
the task's CPU, GPU count, GPU share and GPU models — the paper's task has no memory). FGD places an
arriving task where F grows least: for every node that can take it and every way to put it there
(a share: each GPU with room; whole GPUs: the fully free ones), the growth F_n(after) - F_n(before),
and the smallest wins (the "fragmentation gradient").

How ties are broken and how growths are compared is the scheduler's part. The paper implements FGD
as a Kubernetes scheduler plugin, whose node scores are integers from 0 to 100: ``score="plugin"``
maps a growth of x GPUs to int(100 x sigmoid(-x)) (50 for no growth; about 4 % of a GPU a step near
0), and among equal scores the node first by name wins (a fixed order), on the node the GPU with the
best growth and then the lowest index. ``score="exact"`` compares the growths themselves (to 1e-9),
the same tie rules. Every node's CPU and memory bind every task (the harness's rule, ``State``);
memory plays no part in the measure.

Speed: a node's growth for a kind of task changes only when the node changes. Each kind keeps a
heap of (rank, node, node version); a task of that kind rescores only the nodes changed since the
kind's last task, and stale entries are dropped when they surface. Figures of F are memoized by the
node's model, free CPU and sorted free GPUs.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.openb import KindHeaps, NodeSpec, Policy, Rank, State, Task

WHOLE_MILLI = 1000

# (node model, free CPU, free milli-GPU per GPU sorted) → F
_StateKey = tuple[str, int, tuple[int, ...]]


@dataclass(frozen=True)
class _Group:
    """Kinds that ask for the same GPUs on this model: count GPUs of at least ``need`` milli each."""

    count: int
    need: int
    cpus: tuple[int, ...]  # the kinds' CPU asks, ascending
    cumulative: tuple[float, ...]  # popularity of the kinds asking at most cpus[i]
    total: float


class FragmentationMeasure:
    """F_n(M) of the paper for one target workload, per node model."""

    def __init__(self, kinds: Counter[tuple[int, int, int, tuple[str, ...]]], models: Sequence[str]) -> None:
        """``kinds``: (cpu milli, GPU count, milli per GPU, GPU models or ()) → how many tasks."""
        total = sum(kinds.values()) or 1
        self.models = tuple(sorted(set(models)))
        self.static: dict[str, float] = {}
        self.groups: dict[str, tuple[_Group, ...]] = {}
        for model in self.models:
            static = 0.0
            grouped: dict[tuple[int, int], list[tuple[int, float]]] = {}
            for (cpu, count, milli, spec), n in kinds.items():
                p = n / total
                if count == 0 or (spec and model not in spec):
                    static += p
                    continue
                need = milli if count == 1 else WHOLE_MILLI
                grouped.setdefault((count, need), []).append((cpu, p))
            groups = []
            for (count, need), members in sorted(grouped.items()):
                by_cpu: dict[int, float] = {}
                for cpu, p in members:
                    by_cpu[cpu] = by_cpu.get(cpu, 0.0) + p
                cpus = tuple(sorted(by_cpu))
                cumulative = []
                acc = 0.0
                for c in cpus:
                    acc += by_cpu[c]
                    cumulative.append(acc)
                groups.append(_Group(count, need, cpus, tuple(cumulative), acc))
            self.static[model] = static
            self.groups[model] = tuple(groups)
        self._memo: dict[_StateKey, float] = {}

    def __call__(self, model: str, cpu_free: int, gpus: Sequence[int]) -> float:
        """The node's expected fragmentation, in milli-GPU."""
        ordered = tuple(sorted(gpus))
        key = (model, cpu_free, ordered)
        found = self._memo.get(key)
        if found is not None:
            return found
        free = sum(ordered)
        value = 0.0
        if free:
            value = self.static[model] * free
            for g in self.groups[model]:
                i = bisect.bisect_right(g.cpus, cpu_free)
                runs = g.cumulative[i - 1] if i else 0.0
                value += (g.total - runs) * free
                if runs:
                    value += runs * _fragment(ordered, g.count, g.need, free)
        if len(self._memo) > 500_000:
            self._memo.clear()
        self._memo[key] = value
        return value


def _fragment(ordered: tuple[int, ...], count: int, need: int, free: int) -> int:
    """The free capacity a task of ``count`` GPUs of ``need`` milli each cannot use on these GPUs
    (ascending): all of it when too few GPUs have room, else the GPUs' free below ``need``."""
    i = bisect.bisect_left(ordered, need)
    if len(ordered) - i < count:
        return free
    return sum(ordered[:i])


def plugin_score(delta_milli: float) -> int:
    """A Kubernetes score plugin's integer score of a growth of ``delta_milli`` (higher is better)."""
    x = max(-50.0, min(50.0, delta_milli / WHOLE_MILLI))
    return int(100 / (1 + math.exp(x)))


class FGD(Policy):
    """The FGD policy on the harness's ``State`` (see the module's docstring)."""

    name = "fgd"

    def __init__(self, nodes: Sequence[NodeSpec], tasks: Sequence[Task], score: str = "plugin") -> None:
        if score not in ("plugin", "exact"):
            raise ValueError(f"unknown score {score}")
        self.name = "fgd" if score == "plugin" else "fgd-exact"
        self.score = score
        kinds: Counter[tuple[int, int, int, tuple[str, ...]]] = Counter(
            (t.cpuMilli, t.numGpu, t.gpuMilli if t.numGpu == 1 else WHOLE_MILLI, t.spec) for t in tasks
        )
        self.measure = FragmentationMeasure(kinds, [n.model for n in nodes])
        self.heaps = KindHeaps(len(nodes))

    def place(self, state: State, task: Task) -> tuple[int, list[int]] | None:
        measure = self.measure
        plugin = self.score == "plugin"

        def score(i: int) -> tuple[Rank, tuple[int, ...]] | None:
            fit = state.fitting_gpus(i, task)
            if not fit:
                return None
            model = state.nodes[i].model
            gpus = state.gpus[i]
            cpu = state.cpu[i]
            before = measure(model, cpu, gpus)
            after_cpu = cpu - task.cpuMilli
            options: list[tuple[tuple[int, ...], float]]
            if task.numGpu == 0:
                options = [((), measure(model, after_cpu, gpus))]
            elif task.numGpu > 1 or task.gpuMilli >= WHOLE_MILLI:
                chosen = tuple(fit[: task.numGpu])
                after = list(gpus)
                for g in chosen:
                    after[g] -= WHOLE_MILLI
                options = [(chosen, measure(model, after_cpu, after))]
            else:
                # A share: each GPU with room (one per level of free share: equal GPUs grow alike).
                options = []
                levels: set[int] = set()
                for g in fit:
                    if gpus[g] in levels:
                        continue
                    levels.add(gpus[g])
                    after = list(gpus)
                    after[g] -= task.gpuMilli
                    options.append(((g,), measure(model, after_cpu, after)))
            best: tuple[Rank, tuple[int, ...]] | None = None
            for chosen, value in options:
                delta = value - before
                rank: Rank = (-plugin_score(delta),) if plugin else (round(delta, 9),)
                if best is None or rank < best[0]:
                    best = (rank, chosen)
            return best

        found = self.heaps.best(task.kind, score)
        if found is None:
            return None
        i, chosen = found
        self.heaps.changed(i)
        return i, list(chosen)


__all__ = ["FGD", "FragmentationMeasure", "plugin_score"]
