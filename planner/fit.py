"""Stages 3 and 4 of a plan, size and capacity: the candidates that hold the model and have room. Pure.

Size: the share rule (phase 2.4) on each device, with up to maxAcceleratorCount devices of one node in
tensor parallel when one is too small (powers of two; a MIG partition is never spanned). Capacity:
what other orders hold, the model memory and the MPS compute share accounted independently. A
one-device candidate is the best fit of its shape, found by bisecting the shape's devices sorted by
free memory; several devices are the ones the order holds first, then the fullest.

``Candidate.rank`` is the order of preference among the candidates that fit (``planner.planning``).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from inference_api.plan import LaunchPlanRequest, RecipeSource, Toleration
from inference_api.types import PlacementType, SharingMode
from planner.fragmentation import Workload, growth_rank
from planner.inventory import AllocationId, Device, Occupancy, allocated_mib
from planner.model_facts import estimate_cpu, estimate_memory_gib, weights_gib
from planner.nodes import ENDPOINT_FRONT_DEMAND, NodeProblem, PodDemand, free_cpu_milli, free_memory_mib, node_problem
from planner.placement import Shape, Slot, class_sets
from planner.policy import EffectivePolicy, tensor_parallel_sizes
from planner.recipes import RecipeChoice
from planner.refusals import Trace
from planner.share import ShareDecision, assign_share
from planner.snapshot import SnapshotIndex, free_mib

_SOURCE_RANK = {RecipeSource.COMPILED: 0, RecipeSource.PRESET: 1, RecipeSource.FALLBACK: 2}


@dataclass(frozen=True)
class Candidate:
    deviceClass: str
    classOrder: int
    devices: tuple[Device, ...]
    mode: SharingMode
    share: ShareDecision
    choice: RecipeChoice
    perDeviceNeedMiB: int
    held: bool
    freeMiB: float
    wasteMiB: float
    # Growth of the node's expected fragmentation (``planner.fragmentation``); 0 without recent demands.
    fragDelta: float = 0.0
    # With recent demands: the growth as compared (``growth_rank``, lower is better), then among equal
    # growths the node first by name (``tieNode``; "" without recent demands). The node's free device
    # capacity (percent of a device) and free CPU (milli) before, for the trace.
    fragRank: float = 0.0
    tieNode: str = ""
    nodeFree: float = 0.0
    nodeCpuFree: float = 0.0

    @property
    def count(self) -> int:
        return len(self.devices)

    @property
    def economy(self) -> tuple[int, float]:
        """What the place takes of the cluster, for "never more device than the order needs": (the
        devices it takes whole, the memory it takes in MiB). A whole device — one that cannot be
        shared, a partition, a share of 100 — takes all of its memory; a share takes its part of the
        device's memory (or the memory it requests, when that is more). Unknown memory: infinite."""
        whole = self.share.percent >= 100
        taken = 0.0
        for d in self.devices:
            if d.memoryMiB is None:
                return (len(self.devices) if whole else 0, math.inf)
            part = d.memoryMiB * self.share.percent / 100
            taken += d.memoryMiB if whole else max(part, float(self.perDeviceNeedMiB))
        return (len(self.devices) if whole else 0, taken)

    def rank(self) -> tuple[object, ...]:
        return (
            _SOURCE_RANK[self.choice.source],
            self.count,
            self.economy,
            0 if self.mode is SharingMode.SHARED else 1,
            0 if self.held else 1,
            self.fragRank,
            self.tieNode,
            self.freeMiB,
            self.wasteMiB,
            self.classOrder,
            self.deviceClass,
            self.devices[0].node,
            tuple(d.name for d in self.devices),
        )


class Judge:
    """What a plan judges beyond the devices: the nodes (``planner.nodes``) and, with recent demands,
    the fragmentation a placement adds (``planner.fragmentation``). Memoized for one plan."""

    def __init__(
        self,
        index: SnapshotIndex,
        tolerations: Sequence[Toleration] = (),
        demand: PodRequests | None = None,
        workload: Workload | None = None,
        device_count: int | None = None,
        *,
        judge_nodes: bool = True,
        node_selector: Mapping[str, str] | None = None,
    ) -> None:
        self.index = index
        self.nodeSelector = dict(node_selector or {})
        self.judgeNodes = judge_nodes
        self.tolerations = tuple(tolerations)
        self.demand = demand or PodRequests()
        self.workload = workload if workload is not None and not workload.empty else None
        self.deviceCount = device_count
        # What else a node's judgement depends on, for results kept across plans.
        self.context = (
            self.workload.serial if self.workload else 0,
            repr(self.tolerations),
            repr(sorted(self.nodeSelector.items())),
            device_count,
            judge_nodes,
        )
        self.problems: dict[str, NodeProblem] = {}
        self._node: dict[tuple[str, int, int], NodeProblem | None] = {}
        self._before: dict[str, _NodeState] = {}

    def pod(self, count: int, choice: RecipeChoice) -> PodDemand:
        cpu = self.demand.cpuMilli if self.demand.cpuMilli is not None else 1000 * int(estimate_cpu(count))
        if self.demand.memoryMiB is not None:
            memory = self.demand.memoryMiB
        else:
            parameters = choice.parameters
            weights = weights_gib(parameters, choice.quantization) if parameters else choice.needMiB / 1024
            memory = 1024 * estimate_memory_gib(weights)
        # Where the planner estimated the engine's requests, the pod is the module's own: its endpoint
        # front requests a share of the node too. A demand given (a trace's task) is the whole pod's.
        if self.demand.cpuMilli is None:
            cpu += ENDPOINT_FRONT_DEMAND.cpuMilli
        if self.demand.memoryMiB is None:
            memory += ENDPOINT_FRONT_DEMAND.memoryMiB
        return PodDemand(cpu, memory)

    def node_problem(self, node: str, count: int, choice: RecipeChoice) -> NodeProblem | None:
        """Why the node cannot take the replica's pod (recorded for the refusal), None when it can."""
        nodes = self.index.nodes
        if nodes is None or not self.judgeNodes:
            return None
        key = (node, count, id(choice))
        if key in self._node:
            return self._node[key]
        record = nodes.get(node)
        problem = (
            NodeProblem.MISSING
            if record is None
            else node_problem(record, self.pod(count, choice), self.tolerations, node_selector=self.nodeSelector)
        )
        self._node[key] = problem
        if problem is not None:
            self.problems.setdefault(node, problem)
        return problem

    # ------------------------------------------------------------------ fragmentation

    def state(self, node: str, occupancies: Mapping[str, Occupancy]) -> _NodeState:
        """The node as fragmentation sees it now (memoized for the plan)."""
        found = self._before.get(node)
        if found is not None:
            return found
        assert self.workload is not None
        record = self.index.nodes.get(node) if self.index.nodes is not None else None
        cpu = free_cpu_milli(record) if record is not None else None
        memory = free_memory_mib(record) if record is not None else None
        members = _fragment_members(self.index, node)
        frees = [free_percent(d, occupancies[key]) for key, d, _ in members]
        before = self.workload.fragmentation(cpu, memory, [(f, c) for f, (_, _, c) in zip(frees, members, strict=True)])
        state = _NodeState(cpu, memory, members, frees, before)
        self._before[node] = state
        return state

    def frag_delta(
        self, devices: Sequence[Device], percent: int, pod: PodDemand, occupancies: Mapping[str, Occupancy]
    ) -> float:
        """How much the node's expected fragmentation grows when the devices each give ``percent``."""
        if self.workload is None:
            return 0.0
        state = self.state(devices[0].node, occupancies)
        return self.delta(state, {d.key for d in devices}, percent, pod)

    def judged(
        self, candidate: Candidate, percent: int, pod: PodDemand, occupancies: Mapping[str, Occupancy]
    ) -> Candidate:
        """The candidate with its node's fragmentation growth, its score and the node's best-fit figures."""
        if self.workload is None:
            return candidate
        state = self.state(candidate.devices[0].node, occupancies)
        delta = self.delta(state, {d.key for d in candidate.devices}, percent, pod)
        return dataclasses.replace(
            candidate,
            fragDelta=delta,
            fragRank=growth_rank(delta),
            tieNode=candidate.devices[0].node,
            nodeFree=state.free,
            nodeCpuFree=state.cpu if state.cpu is not None else 0,
        )

    def delta(self, state: _NodeState, taken: Collection[str], percent: int, pod: PodDemand) -> float:
        assert self.workload is not None
        after = [
            (max(0, f - percent) if key in taken else f, c)
            for f, (key, _, c) in zip(state.frees, state.members, strict=True)
        ]
        cpu_after = None if state.cpu is None else state.cpu - pod.cpuMilli
        memory_after = None if state.memory is None else state.memory - pod.memoryMiB
        return self.workload.fragmentation(cpu_after, memory_after, after) - state.before


@dataclass(frozen=True)
class _NodeState:
    cpu: int | None
    memory: int | None
    members: list[tuple[str, Device, frozenset[str]]]
    frees: list[int]
    before: float

    @property
    def free(self) -> int:
        """The node's free device capacity, in percent of a device."""
        return sum(self.frees)


def _fragment_members(index: SnapshotIndex, node: str) -> list[tuple[str, Device, frozenset[str]]]:
    """The node's devices fragmentation counts (whole devices: a partition's capacity is its parent's),
    with the device classes that select each. Kept on the snapshot."""
    members: dict[str, list[tuple[str, Device, frozenset[str]]]] = index.cached("fragmentMembers", dict)
    found = members.get(node)
    if found is None:
        sets = class_sets(index)
        found = members[node] = [
            (d.key, d, sets.get(d.key, frozenset())) for d in index.byNode.get(node, ()) if d.parentDevice is None
        ]
    return found


@dataclass(frozen=True)
class PodRequests:
    """Pod requests that replace the plan's estimates (an explicit demand); None: estimated."""

    cpuMilli: int | None = None
    memoryMiB: int | None = None


def free_percent(device: Device, occ: Occupancy) -> int:
    """The share of the device still free, in percent: compute and memory both bound it."""
    if occ.exclusive:
        return 0
    free = 100 - occ.sharePercent
    if device.memoryMiB:
        free = min(free, (100 * (device.memoryMiB - occ.memoryMiB)) // device.memoryMiB)
    return max(0, free)


def fit(
    request: LaunchPlanRequest,
    policy: EffectivePolicy,
    index: SnapshotIndex,
    shapes: list[Shape],
    choices: dict[str | None, RecipeChoice],
    trace: Trace,
    judge: Judge | None = None,
) -> tuple[list[Candidate], set[str]]:
    """(the candidates that fit, the device classes with a device big enough for the model)."""
    judge = judge or Judge(index)
    # A move made before it breaks: the new place must have room beside what the order holds.
    own = frozenset() if request.besideCurrent else index.own(request.holder, request.currentPlan)
    occupancies, touched = index.occupancies(own)
    # A repack's target ranks as a device the order holds ranks: after what the place takes of the
    # cluster (Candidate.rank's economy), before fragmentation and best fit. Only the rank reads it.
    preferred = request.preferDevice
    if preferred is not None and preferred in index.byKey:
        own = own | {(preferred, -1)}
        touched = {**touched, preferred: occupancies[preferred]}

    feasible: list[Candidate] = []
    sized_classes: set[str] = set()
    sizes_all = tensor_parallel_sizes(policy.maxAcceleratorCount)
    if judge.deviceCount is not None:
        sizes_all = [judge.deviceCount]
    for shape in shapes:
        first = shape.first
        choice = choices[first.family]
        # One device first: when it holds the model, every group of the shape uses one device.
        single = _decide_share(first.device, first.mode, choice.needMiB, policy)
        need_one = _requested(single, choice.needMiB)
        if single.admitsNeed and sizes_all[0] == 1:
            sized_classes.add(first.deviceClass)
            if judge.workload is not None:
                found = _fragmentation_single(shape, occupancies, own, single, choice, judge)
                if found is None:
                    trace.busyGroups.extend(g.slots for g in shape.groups)
                else:
                    feasible.append(found)
                continue
            best = _best_single(shape, occupancies, touched, own, single, need_one, judge, choice)
            if best is None:
                trace.busyGroups.extend(g.slots for g in shape.groups)
                continue
            feasible.extend(_candidates([best], 1, single, need_one, choice, occupancies, own))
            continue
        # A process sees one MIG partition: vLLM cannot span partitions.
        sizes = sizes_all if first.device.placement is PlacementType.WHOLE_DEVICE else [1]
        for g in shape.groups:
            group = g.slots
            sized = _size(group[0], choice, sizes, len(group), policy)
            if sized is None or len(sized) == 2:
                if sized is not None:
                    need, share = sized[0], sized[1]
                    assert isinstance(share, ShareDecision)
                    assert isinstance(need, int)
                    trace.tooSmall.extend((s.deviceClass, s.device, need, share) for s in group)
                continue
            n, need, share = sized
            sized_classes.add(first.deviceClass)
            if judge.node_problem(group[0].device.node, n, choice) is not None:
                trace.busyGroups.append(group)
                continue
            with_room = [s for s in group if _has_room(s.device, occupancies[s.device.key], share, need)]
            if len(with_room) < n:
                trace.busyGroups.append(group)
                continue
            for candidate in _candidates(with_room, n, share, need, choice, occupancies, own):
                feasible.append(judge.judged(candidate, share.percent, judge.pod(n, choice), occupancies))
    trace.nodeProblems.update(judge.problems)
    return feasible, sized_classes


def _fragmentation_single(
    shape: Shape,
    occupancies: Mapping[str, Occupancy],
    own: frozenset[AllocationId],
    share: ShareDecision,
    choice: RecipeChoice,
    judge: Judge,
) -> Candidate | None:
    """The one-device candidate of the shape whose use grows its node's expected fragmentation least:
    the device the order holds first, then the growth (``growth_rank``), then the node first by name
    (the paper's scheduler's rule among equal growths), then the device with the least free memory
    (best fit), then name."""
    need = _requested(share, choice.needMiB)
    pod = judge.pod(1, choice)
    best: _NodeBest | None = None
    # A node's best is a function of its content and of the shape's parameters: kept on the snapshot
    # per parameters and node with the node's fingerprint, it is judged again only when the node
    # changed. Not for an order that holds allocations itself (its own devices rank first, which no
    # other plan shares).
    results: dict[str, _Kept] | None = None
    marks: dict[str, tuple[object, ...]] = {}
    if not own:
        kept = judge.index.cached("nodeBest", _NodeBests)
        params = (id(shape.byNode), share.percent, need, pod, judge.context)
        results = kept.of(params)
        marks = _fingerprints(judge.index)
    for node, pairs in shape.byNode.items():
        if results is None:
            node_best = _node_best(node, pairs, occupancies, share, need, pod, choice, judge, own)
        else:
            mark = marks[node]
            found = results.get(node)
            if found is not None and found[0] == mark:
                node_best, problem = found[1], found[2]
                if problem is not None:
                    # Kept from an earlier plan: this plan's refusal must still learn why the node failed.
                    judge.problems.setdefault(node, problem)
            else:
                node_best = _node_best(node, pairs, occupancies, share, need, pod, choice, judge, own)
                problem = judge.node_problem(node, 1, choice) if node_best is None else None
                results[node] = (mark, node_best, problem)
        if node_best is not None and (best is None or node_best[:_RANKED] < best[:_RANKED]):
            best = node_best
    if best is None:
        return None
    held, growth, node, free, _, node_free, cpu_free, delta, slot = best
    d = slot.device
    return Candidate(
        slot.deviceClass, slot.classOrder, (d,), slot.mode, share, choice, need,
        held == 0, free, _waste(d, share, need), delta, growth, node, node_free, cpu_free,
    )  # fmt: skip


# (0 when the order holds the device else 1, the growth as ranked, node, the device's free memory,
# device name; then the node's free device capacity and free CPU, the growth and the slot, not ranked)
_NodeBest = tuple[int, float, str, float, str, float, float, float, Slot]
_RANKED = 5


# (the node's fingerprint, its best device for the parameters, why the node cannot take the order)
_Kept = tuple[tuple[object, ...], "_NodeBest | None", NodeProblem | None]


class _NodeBests:
    """The nodes' best devices kept on a snapshot: parameters → node → (fingerprint, best, why the
    node cannot take it). Bounded: all of it is dropped past ``LIMIT`` entries."""

    LIMIT = 400_000

    def __init__(self) -> None:
        self._by: dict[tuple[object, ...], dict[str, _Kept]] = {}

    def of(self, params: tuple[object, ...]) -> dict[str, _Kept]:
        found = self._by.get(params)
        if found is None:
            if sum(map(len, self._by.values())) > self.LIMIT:
                self._by.clear()
            found = self._by[params] = {}
        return found


def _fingerprints(index: SnapshotIndex) -> dict[str, tuple[object, ...]]:
    """Every node's fingerprint on this plan's snapshot, computed on first use and kept for the plan.

    The fingerprint is what a node's judgement depends on that changes between plans on one
    snapshot: its record's requests and, per device, what its occupancy is made of (how many
    allocations, their shares and their memory). Not the identity of the last entry: a list emptied
    and refilled (an order gone, another moved back by a repack) may end in the very same object, or
    in a new one at a freed one's address."""
    found = index.fingerprints
    if found is not None:
        return found
    nodes = index.nodes
    found = {}
    for node, devices in index.byNode.items():
        marks = tuple([_held(d) if d.allocations else 0 for d in devices])
        record = nodes.get(node) if nodes is not None else None
        if record is not None:
            found[node] = (record.requestedCpuMilli, record.requestedMemoryMiB, record.podCount, marks)
        else:
            found[node] = marks
    index.fingerprints = found
    return found


def _held(device: Device) -> tuple[int, int, int]:
    """What ``occupancy`` reads of a device's own list: how many, the shares, the memory."""
    allocations = device.allocations
    return (
        len(allocations),
        sum(a.sharePercent for a in allocations),
        sum(allocated_mib(device, a) for a in allocations),
    )


def _node_best(
    node: str,
    pairs: Sequence[tuple[str, Slot]],
    occupancies: Mapping[str, Occupancy],
    share: ShareDecision,
    need: int,
    pod: PodDemand,
    choice: RecipeChoice,
    judge: Judge,
    own: frozenset[AllocationId] = frozenset(),
) -> _NodeBest | None:
    """The node's best device for the shape, ranked as ``_fragmentation_single`` ranks every device:
    held, the fragmentation growth, node, the device's free memory (best fit), name. None: no device
    of the node can take it."""
    if judge.node_problem(node, 1, choice) is not None:
        return None
    state: _NodeState | None = None
    levels: dict[int, tuple[float, float]] = {}
    best: _NodeBest | None = None
    for key, slot in pairs:
        d = slot.device
        occ = occupancies[key]
        if not _has_room(d, occ, share, need):
            continue
        if state is None:
            state = judge.state(node, occupancies)
        # The growth depends on the device's free share only: judged once per level.
        level = free_percent(d, occ)
        judged = levels.get(level)
        if judged is None:
            delta = judge.delta(state, (key,), share.percent, pod)
            judged = levels[level] = (growth_rank(delta), delta)
        held = 0 if own and _is_held(d, own) else 1
        cpu = state.cpu if state.cpu is not None else 0
        rank = (held, judged[0], node, free_mib(d, occ), d.name, state.free, cpu, judged[1], slot)
        if best is None or rank[:_RANKED] < best[:_RANKED]:
            best = rank
    return best


def _has_room(device: Device, occ: Occupancy, share: ShareDecision, need_mib: int) -> bool:
    """Model memory and the MPS compute share are accounted independently: both must have room."""
    if occ.exclusive:
        return False
    if share.percent >= 100:
        return occ.empty
    if occ.sharePercent + share.percent > 100:
        return False
    return device.memoryMiB is None or occ.memoryMiB + need_mib <= device.memoryMiB


def _waste(device: Device, share: ShareDecision, need_mib: int) -> float:
    if device.memoryMiB is None:
        return math.inf
    return device.memoryMiB * share.percent / 100 - need_mib


def _decide_share(device: Device, mode: SharingMode, need_mib: int, policy: EffectivePolicy) -> ShareDecision:
    return assign_share(
        need_mib=need_mib,
        device_mib=device.memoryMiB,
        sharing_mode=mode,
        placement=device.placement,
        allow_multiple_allocations=device.allowMultipleAllocations,
        min_share_percent=policy.minSharePercent,
        max_share_percent=policy.maxSharePercent,
        memory_policy=device.capacity_policy("memory"),
    )


def _requested(share: ShareDecision, need_mib: int) -> int:
    """The memory a share books: its request as the device's requestPolicy rounds it, else the need."""
    return share.requestMiB if share.requestMiB is not None else need_mib


def _is_held(device: Device, own: frozenset[AllocationId]) -> bool:
    return any(key == device.key for key, _ in own)


def _size(
    first: Slot, choice: RecipeChoice, sizes: list[int], members: int, policy: EffectivePolicy
) -> tuple[int, int, ShareDecision] | tuple[int, ShareDecision] | None:
    """The fewest devices of the group that hold the model (n, need, share); more only when fewer are
    too small. Too small: the last (need, share) tried; None when nothing was tried."""
    tried: tuple[int, ShareDecision] | None = None
    for n in (n for n in sizes if n <= members):
        need = math.ceil(choice.needMiB / n)
        share = _decide_share(first.device, first.mode, need, policy)
        need = _requested(share, need)
        tried = (need, share)
        if share.admitsNeed:
            return (n, need, share)
    return tried


def _best_single(
    shape: Shape,
    occupancies: Mapping[str, Occupancy],
    touched: Mapping[str, Occupancy],
    own: frozenset[AllocationId],
    share: ShareDecision,
    need: int,
    judge: Judge,
    choice: RecipeChoice,
) -> Slot | None:
    """The slot a one-device candidate of the shape takes: held first, then best fit, then node and
    name — every other part of the rank is the shape's. Devices the order's own allocations touch are
    judged one by one; the rest in the shape's order of free memory, from the first with room."""
    best: tuple[int, float, str, str, Slot] | None = None
    for key, occ in touched.items():
        slot = shape.byKey.get(key)
        if slot is None or not _has_room(slot.device, occ, share, need):
            continue
        if judge.node_problem(slot.device.node, 1, choice) is not None:
            continue
        d = slot.device
        rank = (0 if _is_held(d, own) else 1, free_mib(d, occ), d.node, d.name)
        if best is None or rank < best[:4]:
            best = (*rank, slot)
    if best is not None and best[0] == 0:
        return best[4]
    # Free memory of at least the need is necessary for room (a whole share needs an empty device).
    by_free = shape.byFree
    for i in range(bisect.bisect_left(shape.frees, need), len(by_free)):
        free, node, name, slot = by_free[i]
        key = slot.device.key
        if key in touched or not _has_room(slot.device, occupancies[key], share, need):
            continue
        if judge.node_problem(node, 1, choice) is not None:
            continue
        if best is None or (1, free, node, name) < best[:4]:
            best = (1, free, node, name, slot)
        break
    return best[4] if best is not None else None


def _candidates(
    with_room: Sequence[Slot],
    n: int,
    share: ShareDecision,
    need: int,
    choice: RecipeChoice,
    occupancies: Mapping[str, Occupancy],
    own: frozenset[AllocationId],
) -> Iterable[Candidate]:
    def free(slot: Slot) -> float:
        return free_mib(slot.device, occupancies[slot.device.key])

    if n == 1:
        for slot in with_room:
            yield Candidate(
                slot.deviceClass, slot.classOrder, (slot.device,), slot.mode, share, choice, need,
                _is_held(slot.device, own), free(slot), _waste(slot.device, share, need),
            )  # fmt: skip
        return
    # Several devices: the n that the order already holds first, then the fullest (best fit).
    ordered = sorted(with_room, key=lambda s: (not _is_held(s.device, own), free(s), s.device.name))
    chosen = ordered[:n]
    yield Candidate(
        chosen[0].deviceClass,
        chosen[0].classOrder,
        tuple(s.device for s in chosen),
        chosen[0].mode,
        share,
        choice,
        need,
        any(_is_held(s.device, own) for s in chosen),
        sum(free(s) for s in chosen),
        sum(_waste(s.device, share, need) for s in chosen),
    )
