"""Fragmentation-aware choice: the idea of FGD ("Beware of Fragmentation", Weng et al., USENIX ATC'23),
with a measure that also counts how many more orders a node's CPU and memory can take. Pure.

A node's free accelerator capacity is *fragmented* for a kind of order when that order cannot use it.
The paper's measure: all of it when the order cannot run on the node at all (not enough CPU or
memory, no device of a class the order may use with room, too few free whole devices), else the part
on devices the order cannot take (a device of a class it may not use, a device with less free share
than it asks; for whole-device orders every partly used device). This one refines the last case by
what the node can still host: a kind asking a share of one device uses at most as many of the devices
with room as the node has CPU and memory for orders of that kind (``free CPU // its CPU``, likewise
memory), the emptiest first, and the rest is a fragment for it; a kind asking whole devices uses at
most as many as the node's memory has room for. The node's *expected fragmentation* weighs that by
how often each kind of order comes (``RecentDemand.weight``). Among the places an order fits, the
plan picks the one whose node's expected fragmentation grows least (the "fragmentation gradient"),
so that the capacity left stays usable by the orders that usually come; equal growths (to a
millionth of a device) go to the node first by name, as in the paper's scheduler.

Why the counts: the paper's measure calls all of a node's devices with room usable as soon as one
order of the kind fits in its CPU, so it cannot tell a node with CPU for one more order from one with
CPU for eight, and strands devices on nodes whose CPU runs out. On the openb trace (10 seeds, every
list, ``benchmarks/openb.py --table``) the counts keep 0.4-0.5 % of the GPUs more allocated than the
paper's measure on the same harness (docs/planner.md). With the paper's measure, comparing growths
exactly spread orders over emptier nodes and lost to the paper's coarse integer node score (its
plugin: 100 x sigmoid of the decrease, truncated); with the counts, the exact growth does best.

Capacity is counted in percent of a device (a whole device is 100). For orders that use no device
all of a node's free capacity is a fragment, wherever they run (the paper's plugin counts its CPU-only
tasks so): their share of the weights scales every growth down and shifts it by minus their share of
the capacity the order takes. The figures are memoized by what they depend on (the node's free CPU
and memory, its devices' free shares and classes), so that identical nodes are judged once.

Where the kinds come from (``planning.PlanningRequest.recentDemands``): a caller that knows the
workload names them (the trace replay passes its task list's kinds); the planner service, the
in-process planner and the dry run name none and plan by best fit, so that all of them make the same
plan from the same cluster. ``held_demands`` derives kinds from what the cluster holds, for the
service's stranded-capacity metric (a function of the cluster, the same in every replica).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter

from pydantic import BaseModel, ConfigDict, Field

from planner.inventory import InventorySnapshot

WHOLE = 100
_SERIALS = itertools.count(1)


class RecentDemand(BaseModel):
    """One kind of order that came recently, and how often."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    weight: float = Field(default=1.0, gt=0)
    deviceCount: int = Field(default=1, ge=0, description="Devices per replica; 0: the order uses none.")
    sharePercent: int = Field(default=WHOLE, ge=1, le=WHOLE, description="Share of each device.")
    cpuMilli: int = Field(default=0, ge=0)
    memoryMiB: int = Field(default=0, ge=0)
    deviceClasses: tuple[str, ...] | None = Field(default=None, description="Classes it may use; None: any.")


# A device as fragmentation sees it: its free share and the device classes that select it.
DeviceView = tuple[int, frozenset[str]]


@dataclass(frozen=True)
class _Group:
    count: int
    percent: int
    classes: frozenset[str] | None
    # (CPU milli, memory MiB, weight) of each kind in the group.
    members: tuple[tuple[int, int, float], ...]
    weight: float

    @property
    def shares(self) -> bool:
        """Kinds asking a share of one device (not whole devices)."""
        return self.count <= 1 and self.percent < WHOLE


class Workload:
    """The recent demands compiled for judging nodes. Build once per demand list (``workload_of``)."""

    def __init__(self, demands: Sequence[RecentDemand]) -> None:
        total = sum(d.weight for d in demands) or 1.0
        # Kinds that use no device can use none of a node's free accelerator capacity: all of it is a
        # fragment for them, wherever they run (as the paper's plugin counts CPU-only tasks).
        self.idle = sum(d.weight for d in demands if d.deviceCount == 0) / total
        grouped: dict[tuple[int, int, frozenset[str] | None], dict[tuple[int, int], float]] = {}
        for d in demands:
            if d.deviceCount == 0:
                continue
            percent = WHOLE if d.deviceCount > 1 else d.sharePercent
            classes = frozenset(d.deviceClasses) if d.deviceClasses is not None else None
            members = grouped.setdefault((d.deviceCount, percent, classes), {})
            members[(d.cpuMilli, d.memoryMiB)] = members.get((d.cpuMilli, d.memoryMiB), 0.0) + d.weight / total
        self.groups = tuple(
            _Group(k, p, c, tuple((cpu, mem, w) for (cpu, mem), w in sorted(m.items())), sum(m.values()))
            for (k, p, c), m in sorted(grouped.items(), key=lambda kv: (kv[0][0], kv[0][1], sorted(kv[0][2] or ())))
        )
        self._cpuCap = max((cpu for g in self.groups for cpu, _, _ in g.members), default=0) + 1
        self._memCap = max((mem for g in self.groups for _, mem, _ in g.members), default=0) + 1
        self._memo: dict[tuple[object, ...], float] = {}
        # Tells workloads apart in what is kept across plans (unlike id(), never reused).
        self.serial = next(_SERIALS)

    @property
    def empty(self) -> bool:
        return not self.groups

    def fragmentation(self, cpu_free: int | None, mem_free: int | None, devices: Sequence[DeviceView]) -> float:
        """The node's expected fragmentation, in percent of a device. ``None``: not judged (no limit)."""
        # The figure does not depend on the devices' order: sorted by free share (stable), the devices
        # of a node whose devices are of one class key alike whichever of them is used.
        views = tuple(sorted(devices, key=itemgetter(0)))
        # Free CPU (memory) beyond what the kind asking most would need for every device changes
        # nothing: capped there, nodes with room to spare key alike.
        if cpu_free is not None:
            cpu_free = min(cpu_free, self._cpuCap * len(views))
        if mem_free is not None:
            mem_free = min(mem_free, self._memCap * len(views))
        key = (cpu_free, mem_free, views)
        found = self._memo.get(key)
        if found is not None:
            return found
        total_free = sum(f for f, _ in views)
        value = 0.0
        if total_free > 0:
            value = self.idle * total_free
            for g in self.groups:
                room = [
                    free for free, classes in views if (g.classes is None or classes & g.classes) and free >= g.percent
                ]
                if len(room) < g.count:
                    value += g.weight * total_free
                    continue
                room.sort(reverse=True)
                for cpu, mem, weight in g.members:
                    # Kinds that cannot run here (CPU, memory) see all of the free capacity as fragments.
                    if (cpu_free is not None and cpu_free < cpu) or (mem_free is not None and mem_free < mem):
                        value += weight * total_free
                        continue
                    value += weight * (total_free - _usable(g, room, cpu_free, mem_free, cpu, mem))
        if len(self._memo) > 200_000:
            self._memo.clear()
        self._memo[key] = value
        return value


def _usable(g: _Group, room: list[int], cpu_free: int | None, mem_free: int | None, cpu: int, mem: int) -> float:
    """The free capacity one kind of the group can use on a node whose devices with room for it have
    ``room`` free (descending), when it runs there: a share kind as many of them, the emptiest first,
    as the node's CPU and memory have room for orders of the kind; a whole-device kind the devices its
    memory has room for (``count`` of them an order)."""
    if g.shares:
        n = len(room)
        if cpu and cpu_free is not None:
            n = min(n, cpu_free // cpu)
        if mem and mem_free is not None:
            n = min(n, mem_free // mem)
        return float(sum(room[:n]))
    usable = float(sum(room))
    if mem and mem_free is not None:
        usable = min(usable, float((mem_free // mem) * g.count * WHOLE))
    return usable


def growth_rank(delta: float) -> float:
    """How the plan compares growths: exactly, to a millionth of a percent of a device (so that float
    noise does not split equal growths, which go to the node first by name)."""
    return round(delta, 6) + 0.0


def held_demands(snapshot: InventorySnapshot) -> list[RecentDemand]:
    """The kinds of order the cluster holds, weighed by how many it holds: what a plan weighs when its
    caller names no kinds (``PlanningRequest.recentDemands`` None). A function of the snapshot alone,
    so every planner reading the same cluster weighs the same kinds.

    Each allocation of a share of a device is one order of that share (its compute share, or the part
    of the device's memory it holds when that is more); the whole devices one holder holds on one node
    are one order of that many devices. Allocations on partitions are left out (the measure counts
    whole devices). What the holders' pods ask of the node and which device classes their orders allow
    are not in the inventory: the kinds ask no CPU or memory and may use any class."""
    counts: dict[tuple[int, int], int] = {}
    whole: dict[tuple[str, str], int] = {}
    for device in snapshot.devices:
        if device.parentDevice is not None:
            continue
        for a in device.allocations:
            percent = a.sharePercent
            if a.memoryMiB is not None and device.memoryMiB:
                percent = max(percent, -(-100 * a.memoryMiB // device.memoryMiB))
            if percent >= WHOLE or not device.allowMultipleAllocations:
                whole[(a.holder, device.node)] = whole.get((a.holder, device.node), 0) + 1
            elif percent > 0:
                counts[(1, percent)] = counts.get((1, percent), 0) + 1
    for n in whole.values():
        counts[(n, WHOLE)] = counts.get((n, WHOLE), 0) + 1
    return [RecentDemand(weight=float(w), deviceCount=k, sharePercent=p) for (k, p), w in sorted(counts.items())]


_WORKLOADS: dict[tuple[RecentDemand, ...], Workload] = {}


def workload_of(demands: Sequence[RecentDemand]) -> Workload:
    """The compiled workload of a demand list, kept by content (the memo of its figures with it)."""
    key = tuple(demands)
    found = _WORKLOADS.get(key)
    if found is None:
        if len(_WORKLOADS) > 16:
            _WORKLOADS.clear()
        found = _WORKLOADS[key] = Workload(demands)
    return found


__all__ = [
    "WHOLE",
    "DeviceView",
    "RecentDemand",
    "Workload",
    "growth_rank",
    "held_demands",
    "workload_of",
]
