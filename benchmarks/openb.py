"""Trace replay: GPU packing on the public openb production trace, beside the FGD paper's published results.

    .venv/bin/python -m benchmarks.openb [--data ../shared/data/openb] [--lists gpushare40 ...]
        [--seeds 42] [--policies planner bestfit random] [--nodes N] [--arrivals N]

The trace (Alibaba, accompanying "Beware of Fragmentation", Weng et al., USENIX ATC'23) is a node list
of 1,213 GPU nodes (6,212 GPUs) and task lists; ``published_allocation_ratio.csv`` holds the paper's
simulator results per list, policy and seed. The replay follows the paper's method (the data's README):
the tasks, sorted by name, are shuffled with the seed; random tasks of the list are appended (with
replacement, seeded) until the next would take the requested GPU past 1.3 x the capacity (or random
tasks removed while above it); every task is scheduled once, in order, never leaving; a task that does
not fit is skipped; node CPU and memory bound every task, CPU-only tasks included. After each task the
arrived and the allocated milli-GPU are recorded; column k is the mean allocation of the records whose
arrived share rounds to k %. Python's random is not Go's, so a seed's sequence differs from the paper's
one of the same number: compare means, not seeds.

Policies:

* ``planner`` — each GPU task is an order through ``planner.plan_launch`` on one inventory snapshot of
  the whole cluster (devices, one DeviceClass per GPU model, nodes with allocatable CPU and memory), its
  plan then booked on the snapshot as the claim's allocation would be. A sharing task's ``gpu_milli``
  is the share it asks (minSharePercent = maxSharePercent, Shared); a task of several GPUs asks for that
  many whole devices of one node (Dedicated, ``ExplicitDemand.deviceCount``); ``gpu_spec`` becomes the
  class's allowed device classes; the task's CPU and memory are the pod's requests. The recent demands
  the fragmentation-aware choice weighs are the task list's kinds, weighted by how often they occur (the
  paper's "typical tasks", CPU-only kinds included). A CPU-only task is no order of this module: it is
  placed by the same rule (the best score of its node's fragmentation growth, then the node first by
  name).
* ``bestfit`` and ``random`` — the harness's own baselines on the same sequence, to check the harness
  against the paper's: best fit takes the node left with the least free GPU (then CPU) and, on it, the
  GPU with the least free share that fits; random takes a feasible node and a fitting GPU at random.

Memory of the undisclosed models (G1, G2, G3) is taken as 32 GiB and their hardware family as
ampere (P100's as volta: the recipe tables know no Pascal): shares are percent of a device and the
orders' model (10M parameters, the fallback recipe) is tiny, so neither binds before the share does.
"""

from __future__ import annotations

import argparse
import csv
import heapq
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inference_api.plan import OrderFacts, RuntimeFallbackFlag
from inference_api.types import AcceleratorPolicy, PlacementType, SharingMode
from planner.fragmentation import RecentDemand, Workload, growth_rank, workload_of
from planner.inventory import Device, DeviceAllocation, DeviceClass, InventorySnapshot, Node
from planner.planning import ExplicitDemand, PlanningRequest, plan_launch
from planner.recipes import RecipeBook, load_recipe_book
from planner.repack import PodRequests, propose_repack

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "openb"
DRIVER = "gpu.deckhouse.io"
# Every GPU is given the same memory (32 GiB): the trace's allocation ratio counts every GPU alike and
# its tasks ask a share of whichever GPU they land on, while the planner's economy rule (a share of a
# smaller GPU takes less memory) would rank the GPU models by memory, which the trace does not value.
# ``--gpu-memory real`` replays with the models' memories (the undisclosed G1-G3 as 32 GiB) instead.
GPU_MEMORY_GIB = 32
MEMORY_GIB = {"P100": 16, "T4": 16, "V100M16": 16, "V100M32": 32, "A10": 24}
UNDISCLOSED_GIB = 32
# The recipe tables have no Pascal family and the G models are undisclosed: the nearest family the
# tables know stands in (the tiny model's fallback recipe runs on all of them alike).
FAMILY = {"P100": "volta", "T4": "turing", "V100M16": "volta", "V100M32": "volta", "A10": "ampere"}
UNDISCLOSED_FAMILY = "ampere"
TUNE = 1.3
COLUMNS = (100, 110, 120, 130)
PUBLISHED_POLICIES = ("01-Random", "02-DotProd", "03-GpuClustering", "04-GpuPacking", "05-BestFit", "06-FGD")
# A model small enough for the smallest share on the smallest GPU (5 % of 16 GiB): the fallback recipe.
TINY_MODEL = OrderFacts(modelName="openb/tiny-10M", parameterCount="10M")


@dataclass(frozen=True)
class NodeSpec:
    name: str
    cpuMilli: int
    memoryMiB: int
    gpus: int
    model: str


@dataclass(frozen=True)
class Task:
    name: str
    cpuMilli: int
    memoryMiB: int
    numGpu: int
    gpuMilli: int
    spec: tuple[str, ...]
    # Seconds from its creation to its deletion in the trace (0: the list records no times).
    lifetime: int = 0

    @property
    def requested(self) -> int:
        """Milli-GPU the task asks for."""
        return self.numGpu * self.gpuMilli if self.numGpu else 0

    @property
    def kind(self) -> tuple[object, ...]:
        return (self.cpuMilli, self.memoryMiB, self.numGpu, self.gpuMilli, self.spec)


def load_nodes(data: Path) -> list[NodeSpec]:
    with (data / "openb_node_list_gpu_node.csv").open() as f:
        return [
            NodeSpec(r["sn"], int(r["cpu_milli"]), int(r["memory_mib"]), int(r["gpu"]), r["model"])
            for r in csv.DictReader(f)
        ]


def load_tasks(data: Path, name: str) -> list[Task]:
    with (data / f"openb_pod_list_{name}.csv").open() as f:
        return [
            Task(
                r["name"],
                int(r["cpu_milli"]),
                int(r["memory_mib"]),
                int(r["num_gpu"]),
                int(r["gpu_milli"]),
                tuple(sorted(set(filter(None, (r.get("gpu_spec") or "").split("|"))))),
                int(r["deletion_time"]) - int(r["creation_time"]) if r.get("deletion_time") else 0,
            )
            for r in csv.DictReader(f)
        ]


def task_lists(data: Path) -> list[str]:
    names = (p.name.removeprefix("openb_pod_list_").removesuffix(".csv") for p in data.glob("openb_pod_list_*.csv"))
    return sorted(names)


def sequence(tasks: Sequence[Task], seed: int, capacity_milli: int, tune: float = TUNE) -> list[Task]:
    """The paper's arrival sequence: shuffled, then filled (or thinned) to ``tune`` x the capacity."""
    ordered = sorted(tasks, key=lambda t: t.name)
    rng = random.Random(seed)
    out = list(ordered)
    rng.shuffle(out)
    target = tune * capacity_milli
    total = sum(t.requested for t in out)
    if total <= target:
        while True:
            extra = ordered[rng.randrange(len(ordered))]
            if total + extra.requested > target:
                break
            out.append(extra)
            total += extra.requested
    else:
        while total > target:
            total -= out.pop(rng.randrange(len(out))).requested
    return out


def recent_demands(tasks: Sequence[Task]) -> list[RecentDemand]:
    """The list's kinds of task, weighted by how often they occur."""
    counts = Counter(t.kind for t in tasks)
    out = []
    for kind, count in sorted(counts.items(), key=lambda kv: repr(kv[0])):
        cpu, memory, num_gpu, milli = (int(v) for v in kind[:4])  # type: ignore[call-overload]
        spec: tuple[str, ...] = tuple(kind[4])  # type: ignore[arg-type]
        out.append(
            RecentDemand(
                weight=count,
                deviceCount=num_gpu,
                sharePercent=max(1, min(100, milli // 10)) if num_gpu == 1 else 100,
                cpuMilli=cpu,
                memoryMiB=memory,
                deviceClasses=tuple(class_name(m) for m in spec) if spec else None,
            )
        )
    return out


def class_name(model: str) -> str:
    return f"openb-{model.lower()}"


# ---------------------------------------------------------------------------- the cluster state


@dataclass
class State:
    """What the replay holds: per node free CPU, memory and per-GPU free milli; what is allocated."""

    nodes: list[NodeSpec]
    cpu: list[int] = field(default_factory=list)
    mem: list[int] = field(default_factory=list)
    gpus: list[list[int]] = field(default_factory=list)
    allocated: int = 0

    def __post_init__(self) -> None:
        self.cpu = [n.cpuMilli for n in self.nodes]
        self.mem = [n.memoryMiB for n in self.nodes]
        self.gpus = [[1000] * n.gpus for n in self.nodes]

    @property
    def capacity(self) -> int:
        return 1000 * sum(n.gpus for n in self.nodes)

    def fitting_gpus(self, i: int, task: Task) -> list[int]:
        """GPU indexes of node i that can take (a part of) the task; [] when the node cannot take it."""
        node = self.nodes[i]
        if self.cpu[i] < task.cpuMilli or self.mem[i] < task.memoryMiB:
            return []
        if task.numGpu == 0:
            return [-1]
        if task.spec and node.model not in task.spec:
            return []
        need = 1000 if task.numGpu > 1 else task.gpuMilli
        fit = [g for g, free in enumerate(self.gpus[i]) if free >= need]
        return fit if len(fit) >= task.numGpu else []

    def take(self, i: int, gpus: Sequence[int], task: Task) -> None:
        self.cpu[i] -= task.cpuMilli
        self.mem[i] -= task.memoryMiB
        per = 1000 if task.numGpu > 1 else task.gpuMilli
        for g in gpus:
            assert self.gpus[i][g] >= per, "over-allocated a GPU"
            self.gpus[i][g] -= per
        assert self.cpu[i] >= 0, "over-allocated a node's CPU"
        assert self.mem[i] >= 0, "over-allocated a node's memory"
        self.allocated += task.requested

    def release(self, i: int, gpus: Sequence[int], task: Task) -> None:
        """A task leaves (benchmarks/openb_departures.py): what ``take`` took is free again."""
        self.cpu[i] += task.cpuMilli
        self.mem[i] += task.memoryMiB
        per = 1000 if task.numGpu > 1 else task.gpuMilli
        for g in gpus:
            self.gpus[i][g] += per
            assert self.gpus[i][g] <= 1000, "released more than a GPU holds"
        self.allocated -= task.requested


# ------------------------------------------------------------------------------- the policies


Rank = tuple[Any, ...]


class KindHeaps:
    """Per kind of task, the nodes ranked by ``score(node, task)`` (lower is better; None: the node
    cannot take it), rescored only when a node changed since the kind's last look."""

    def __init__(self, nodes: int) -> None:
        self.version = [0] * nodes
        self.log: list[int] = []
        self._heaps: dict[object, list[tuple[Rank, int, int, tuple[int, ...]]]] = {}
        self._seen: dict[object, int] = {}

    def changed(self, i: int) -> None:
        self.version[i] += 1
        self.log.append(i)

    def best(
        self, kind: object, score: Callable[[int], tuple[Rank, tuple[int, ...]] | None]
    ) -> tuple[int, tuple[int, ...]] | None:
        heap = self._heaps.get(kind)
        if heap is None:
            heap = self._heaps[kind] = []
            todo: Iterable[int] = range(len(self.version))
        else:
            todo = set(self.log[self._seen[kind] :])
        self._seen[kind] = len(self.log)
        version = self.version
        for i in todo:
            scored = score(i)
            if scored is not None:
                heapq.heappush(heap, (scored[0], i, version[i], scored[1]))
        while heap:
            _, i, v, gpus = heap[0]
            if v == version[i]:
                return i, gpus
            heapq.heappop(heap)
        return None


class Policy:
    name = "policy"
    plans = 0
    planSeconds = 0.0

    def place(self, state: State, task: Task) -> tuple[int, list[int]] | None:
        raise NotImplementedError

    def release(self, state: State, i: int, gpus: Sequence[int], task: Task) -> None:
        """A task placed by this policy leaves (``state`` is released by the replay): a policy that ranks
        nodes by version rescored the node."""
        heaps = getattr(self, "heaps", None)
        if isinstance(heaps, KindHeaps):
            heaps.changed(i)


class BestFit(Policy):
    name = "bestfit"

    def place(self, state: State, task: Task) -> tuple[int, list[int]] | None:
        best: tuple[tuple[float, ...], int, list[int]] | None = None
        per = 1000 if task.numGpu > 1 else task.gpuMilli
        for i, node in enumerate(state.nodes):
            fit = state.fitting_gpus(i, task)
            if not fit:
                continue
            if task.numGpu == 0:
                chosen: list[int] = []
            else:
                fit.sort(key=lambda g: (state.gpus[i][g], g))
                chosen = fit[: task.numGpu]
            gpu_left = sum(state.gpus[i]) - per * len(chosen)
            score = (
                gpu_left / (1000 * node.gpus),
                (state.cpu[i] - task.cpuMilli) / node.cpuMilli,
                float(i),
            )
            if best is None or score < best[0]:
                best = (score, i, chosen)
        return None if best is None else (best[1], best[2])


class RandomFit(Policy):
    name = "random"

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed * 7919 + 1)

    def place(self, state: State, task: Task) -> tuple[int, list[int]] | None:
        feasible = [(i, fit) for i in range(len(state.nodes)) if (fit := state.fitting_gpus(i, task))]
        if not feasible:
            return None
        i, fit = feasible[self.rng.randrange(len(feasible))]
        if task.numGpu == 0:
            return i, []
        return i, self.rng.sample(fit, task.numGpu)


class Planner(Policy):
    """Every GPU task an order through ``plan_launch``; CPU-only tasks by the fragmentation measure."""

    name = "planner"

    def __init__(
        self, nodes: Sequence[NodeSpec], demands: list[RecentDemand], book: RecipeBook, real_memory: bool = False
    ) -> None:
        self.book = book
        self.demands = demands
        self.workload: Workload = workload_of(demands)
        self.index = {n.name: i for i, n in enumerate(nodes)}
        self.snapshot = snapshot_of(nodes, real_memory)
        self.records = {n.name: n for n in self.snapshot.nodes or ()}
        self.devices = {d.key: d for d in self.snapshot.devices}
        self.classes = sorted({class_name(n.model) for n in nodes})
        # CPU-only tasks are placed by the harness (they are no orders): per kind, the nodes ranked,
        # rescored when they changed.
        self.heaps = KindHeaps(len(nodes))

    def request(self, task: Task) -> PlanningRequest:
        shared = task.numGpu == 1 and task.gpuMilli < 1000
        percent = task.gpuMilli // 10 if shared else None
        allowed = [class_name(m) for m in task.spec if class_name(m) in self.classes] if task.spec else None
        policy = AcceleratorPolicy(
            allowedDeviceClasses=allowed or None,
            allowedSharingModes=[SharingMode.SHARED if shared else SharingMode.DEDICATED],
            allowedPlacementTypes=[PlacementType.WHOLE_DEVICE],
            maxAcceleratorCount=task.numGpu,
            minSharePercent=percent,
            maxSharePercent=percent,
        )
        request = PlanningRequest(
            facts=TINY_MODEL,
            acceleratorPolicy=policy,
            runtimeFallback=RuntimeFallbackFlag(enabled=True),
            className="openb",
            demand=ExplicitDemand(deviceCount=task.numGpu, cpuMilli=task.cpuMilli, memoryMiB=task.memoryMiB),
            recentDemands=self.demands,
        )
        # The snapshot set after validation: validating it again (6,212 devices) on every request would
        # cost the replay more than some plans do.
        return request.model_copy(update={"inventory": self.snapshot})

    def place(self, state: State, task: Task) -> tuple[int, list[int]] | None:
        if task.spec and not any(class_name(m) in self.classes for m in task.spec):
            return None
        if task.numGpu == 0:
            chosen = self._cpu_only(state, task)
        else:
            # CPU seconds of this process: on a shared machine, what the plans cost, not what others took.
            started = time.process_time()
            outcome = plan_launch(self.request(task), self.book)
            self.planSeconds += time.process_time() - started
            self.plans += 1
            if outcome.plan is None:
                return None
            plan = outcome.plan
            assert plan.nodeName is not None
            i = self.index[plan.nodeName]
            chosen = (i, [int(name.removeprefix("gpu-")) for name in plan.deviceNames])
            for name in plan.deviceNames:
                self.devices[f"{plan.nodeName}/{name}"].allocations.append(
                    DeviceAllocation(holder=f"openb/{task.name}", sharePercent=plan.sharePercent)
                )
        if chosen is None:
            return None
        self._book(state, chosen[0], task, +1)
        return chosen

    def _book(self, state: State, i: int, task: Task, sign: int) -> None:
        """Node i's record takes (+1) or gives back (-1) the task's requests; its ranks are made again."""
        record = self.records[state.nodes[i].name]
        record.requestedCpuMilli += sign * task.cpuMilli
        record.requestedMemoryMiB += sign * task.memoryMiB
        self.heaps.changed(i)

    def release(self, state: State, i: int, gpus: Sequence[int], task: Task) -> None:
        node = state.nodes[i].name
        holder = f"openb/{task.name}"
        for g in gpus:
            device = self.devices[f"{node}/gpu-{g}"]
            device.allocations[:] = [a for a in device.allocations if a.holder != holder]
        self._book(state, i, task, -1)

    def repack(
        self, state: State, tasks: dict[str, Task], max_moves: int | None
    ) -> list[tuple[str, int, int, int, int]]:
        """A repack pass (``planner.repack``) over the shares, made on the snapshot and the replay's state:
        (task name, node, GPU it left, node, GPU it went to) for each move."""
        pods = {f"openb/{name}": PodRequests(t.cpuMilli, t.memoryMiB) for name, t in tasks.items()}
        proposal = propose_repack(self.snapshot, lambda holder: holder in pods, pods, max_moves=max_moves)
        made = []
        for move in proposal.moves:
            source, target = self.devices[move.source], self.devices[move.target]
            allocation = next(a for a in source.allocations if a.holder == move.holder)
            source.allocations[:] = [a for a in source.allocations if a.holder != move.holder]
            target.allocations.append(allocation)
            name = move.holder.removeprefix("openb/")
            task = tasks[name]
            i, j = self.index[source.node], self.index[target.node]
            g, h = int(source.name.removeprefix("gpu-")), int(target.name.removeprefix("gpu-"))
            state.release(i, [g], task)
            state.take(j, [h], task)
            self._book(state, i, task, -1)
            self._book(state, j, task, +1)
            made.append((name, i, g, j, h))
        return made

    def _cpu_only(self, state: State, task: Task) -> tuple[int, list[int]] | None:
        def score(i: int) -> tuple[Rank, tuple[int, ...]] | None:
            if state.cpu[i] < task.cpuMilli or state.mem[i] < task.memoryMiB:
                return None
            node = state.nodes[i]
            views = [(free // 10, frozenset({class_name(node.model)})) for free in state.gpus[i]]
            before = self.workload.fragmentation(state.cpu[i], state.mem[i], views)
            after = self.workload.fragmentation(state.cpu[i] - task.cpuMilli, state.mem[i] - task.memoryMiB, views)
            # As the planner ranks: the growth, then the node first by name.
            return (growth_rank(after - before), node.name), ()

        found = self.heaps.best(task.kind, score)
        return None if found is None else (found[0], [])


def snapshot_of(nodes: Sequence[NodeSpec], real_memory: bool = False) -> InventorySnapshot:
    """The cluster as the planner sees it: every GPU an MPS-shareable whole device of ``GPU_MEMORY_GIB``
    (``real_memory``: its model's), one DeviceClass per GPU model (selecting by product name), the
    nodes with their allocatable CPU and memory."""
    devices = [
        Device(
            name=f"gpu-{g}",
            node=n.name,
            productName=n.model,
            memoryMiB=(MEMORY_GIB.get(n.model, UNDISCLOSED_GIB) if real_memory else GPU_MEMORY_GIB) * 1024,
            hardwareFamily=FAMILY.get(n.model, UNDISCLOSED_FAMILY),
            placement=PlacementType.WHOLE_DEVICE,
            allowMultipleAllocations=True,
        )
        for n in nodes
        for g in range(n.gpus)
    ]
    classes = [
        DeviceClass(
            name=class_name(model),
            selectors=[f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].productName == "{model}"'],
        )
        for model in sorted({n.model for n in nodes})
    ]
    records = [Node(name=n.name, cpuMilli=n.cpuMilli, memoryMiB=n.memoryMiB) for n in nodes]
    return InventorySnapshot(devices=devices, deviceClasses=classes, nodes=records)


# ------------------------------------------------------------------------------------ replay


@dataclass
class Result:
    policy: str
    seed: int
    tasks: int
    failed: int
    failedGpu: int
    columns: dict[int, float]
    plans: int = 0
    planSeconds: float = 0.0
    seconds: float = 0.0

    @property
    def plans_per_second(self) -> float:
        return self.plans / self.planSeconds if self.planSeconds else 0.0


def replay(nodes: Sequence[NodeSpec], tasks: Sequence[Task], seed: int, policy: Policy) -> Result:
    state = State(list(nodes))
    capacity = state.capacity
    arrived = 0
    records: dict[int, list[float]] = {}
    failed = failed_gpu = 0
    started = time.perf_counter()
    for task in tasks:
        arrived += task.requested
        placed = policy.place(state, task)
        if placed is None:
            failed += 1
            failed_gpu += task.numGpu > 0
        else:
            i, gpus = placed
            state.take(i, gpus, task)
        records.setdefault(round(100 * arrived / capacity), []).append(100 * state.allocated / capacity)
    columns = {k: statistics.fmean(v) for k, v in records.items()}
    return Result(
        policy.name, seed, len(tasks), failed, failed_gpu, columns, policy.plans, policy.planSeconds,
        time.perf_counter() - started,
    )  # fmt: skip


def published(data: Path, name: str) -> dict[str, dict[int, float]]:
    """Policy → column → the mean over the paper's seeds."""
    return {
        p: {k: statistics.fmean(v[k] for v in by_seed.values() if k in v) for k in COLUMNS}
        for p, by_seed in published_seeds(data, name).items()
    }


def published_seeds(data: Path, name: str) -> dict[str, dict[int, dict[int, float]]]:
    """Policy → seed → column → the paper's figure."""
    out: dict[str, dict[int, dict[int, float]]] = {}
    with (data / "published_allocation_ratio.csv").open() as f:
        for row in csv.DictReader(f):
            if row["workload"] != f"openb_pod_list_{name}":
                continue
            columns = {k: float(row[str(k)]) for k in COLUMNS if row.get(str(k))}
            out.setdefault(row["sc_policy"], {})[int(float(row["seed"]))] = columns
    return out


def make_policy(
    kind: str, nodes: Sequence[NodeSpec], tasks: Sequence[Task], seed: int, book: RecipeBook, real_memory: bool = False
) -> Policy:
    if kind == "bestfit":
        return BestFit()
    if kind == "random":
        return RandomFit(seed)
    if kind == "planner":
        return Planner(nodes, recent_demands(tasks), book, real_memory)
    if kind in ("fgd", "fgd-exact"):
        from benchmarks.openb_fgd import FGD

        return FGD(nodes, tasks, score="exact" if kind == "fgd-exact" else "plugin")
    raise ValueError(f"unknown policy {kind}")


def _row(label: str, columns: dict[int, float], extra: str = "") -> str:
    cells = " ".join(f"{columns.get(k, float('nan')):6.2f}" for k in COLUMNS)
    return f"  {label:<24} {cells}  {extra}"


def run(
    data: Path,
    lists: Iterable[str],
    seeds: Sequence[int],
    kinds: Sequence[str],
    node_limit: int | None = None,
    arrivals_limit: int | None = None,
    real_memory: bool = False,
) -> list[tuple[str, Result]]:
    book = load_recipe_book()
    nodes = load_nodes(data)
    if node_limit:
        nodes = nodes[:: max(1, len(nodes) // node_limit)][:node_limit]
    capacity = 1000 * sum(n.gpus for n in nodes)
    out: list[tuple[str, Result]] = []
    for name in lists:
        tasks = load_tasks(data, name)
        print(f"\n{name}: {len(nodes)} nodes, {capacity // 1000} GPUs; GPU allocation ratio (%) at k % arrived")
        print(f"  {'':<24} " + " ".join(f"{k:>6}" for k in COLUMNS))
        pub = published(data, name)
        for policy_name in PUBLISHED_POLICIES:
            if policy_name in pub and not node_limit:
                print(_row(f"published {policy_name}", pub[policy_name], "(mean of 10 seeds)"))
        for seed in seeds:
            arrivals = sequence(tasks, seed, capacity)[:arrivals_limit]
            for kind in kinds:
                result = replay(nodes, arrivals, seed, make_policy(kind, nodes, tasks, seed, book, real_memory))
                extra = f"failed {result.failed}/{result.tasks} ({result.failedGpu} GPU tasks), {result.seconds:.0f} s"
                if result.plans:
                    extra += f", {result.plans_per_second:.1f} plans per CPU-second"
                print(_row(f"{kind} seed {seed}", result.columns, extra), flush=True)
                out.append((name, result))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--lists", nargs="*", help="task lists (e.g. gpushare40); default: every list in --data")
    parser.add_argument("--seeds", nargs="*", type=int, default=[42])
    parser.add_argument("--policies", nargs="*", default=["planner", "bestfit", "random"])
    parser.add_argument("--nodes", type=int, default=None, help="replay on an evenly spaced sample of N nodes")
    parser.add_argument(
        "--arrivals", type=int, default=None, help="replay only the first N arrivals (to measure plans per CPU-second)"
    )
    parser.add_argument(
        "--table",
        action="store_true",
        help="the side-by-side table: planner, harness FGD, best fit and random on the same sequences, every "
        "list, mean and standard error over --seeds, beside the published FGD (benchmarks/openb_table.py)",
    )
    parser.add_argument("--jobs", type=int, default=1, help="--table: replay (list, seed) pairs in N processes")
    parser.add_argument("--out", type=Path, default=None, help="--table: keep each result in this JSON-lines file")
    parser.add_argument(
        "--from", dest="sources", nargs="*", type=Path, default=None, help="--table: print the table of these files"
    )
    parser.add_argument(
        "--gpu-memory",
        choices=["same", "real"],
        default="same",
        help="every GPU 32 GiB (same, the default) or each model's memory (real)",
    )
    args = parser.parse_args(argv)
    if not (args.data / "openb_node_list_gpu_node.csv").exists():
        print(f"no openb data under {args.data} (see ../shared/data/openb/README.md)", file=sys.stderr)
        return 2
    real_memory = args.gpu_memory == "real"
    if args.table or args.sources is not None:
        from benchmarks.openb_table import POLICIES, load, replay_all, table

        policies = tuple(args.policies) if args.policies != ["planner", "bestfit", "random"] else POLICIES
        if args.sources is not None:
            rows = [r for r in load(args.sources) if r.get("realMemory", False) == real_memory]
        else:
            lists = args.lists or task_lists(args.data)
            rows = replay_all(args.data, lists, args.seeds, policies, args.jobs, args.out, real_memory)
            rows = [r for r in rows if r["list"] in lists and r["seed"] in args.seeds]
        print(table(rows, args.data, policies))
        return 0
    run(
        args.data,
        args.lists or task_lists(args.data),
        args.seeds,
        args.policies,
        args.nodes,
        args.arrivals,
        real_memory=real_memory,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
