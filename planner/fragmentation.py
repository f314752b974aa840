"""Fragmentation-aware choice: the idea of FGD ("Beware of Fragmentation", Weng et al., USENIX ATC'23). Pure.

A node's free accelerator capacity is *fragmented* for a kind of order when that order cannot use it:
all of it when the order cannot run on the node at all (not enough CPU or memory, no device of a class
the order may use with room, too few free whole devices), else the part on devices the order cannot
take (a device of a class it may not use, a device with less free share than it asks; for whole-device
orders every partly used device). The node's *expected fragmentation* weighs that by how often each
kind of order came recently (``RecentDemand.weight``). Among the places an order fits, the plan picks
the one whose node's expected fragmentation grows least (the "fragmentation gradient"), so that the
capacity left stays usable by the orders that usually come.

Growths are compared by the paper's score (``growth_score``: 100 x the sigmoid of the growth's
decrease in devices, truncated to an integer, as the published FGD plugin scores a node), so that
growths a few hundredths of a device apart count as equal, and among equal scores the node first by
name wins, as in the paper's scheduler (its vendored Kubernetes scheduler picks the smallest node
name among the best scores): a first fit over a fixed order, which fills a prefix of the nodes and
keeps the rest whole (the planner's rank, ``planner.fit.Candidate.rank``; on the node, the device
with the least free memory). On the openb trace the exact growth is too greedy: it spreads orders
over nodes for differences no recent order would notice. gpushare80, seed 42, GPU allocation % at
100-130 % arrived: exact growth 88.2-88.5, the score with best fit among equal scores 88.8-89.1, the
score with the first node by name 89.0-89.2 (the paper's FGD 89.1-89.3; docs/planner.md).

Capacity is counted in percent of a device (a whole device is 100). For orders that use no device
all of a node's free capacity is a fragment, wherever they run (the paper's plugin counts its CPU-only
tasks so): their share of the weights scales every growth down and shifts it by minus their share of
the capacity the order takes, which moves the score's steps. The figures are memoized by
what they depend on (the node's free CPU and memory up to the thresholds the recent orders draw, and
its devices' free shares and classes), so that identical nodes are judged once.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

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
    # (CPU threshold index, memory threshold index, weight) of each kind in the group.
    members: tuple[tuple[int, int, float], ...]
    weight: float


class Workload:
    """The recent demands compiled for judging nodes. Build once per demand list (``workload_of``)."""

    def __init__(self, demands: Sequence[RecentDemand]) -> None:
        total = sum(d.weight for d in demands) or 1.0
        # Kinds that use no device can use none of a node's free accelerator capacity: all of it is a
        # fragment for them, wherever they run (as the paper's plugin counts CPU-only tasks).
        self.idle = sum(d.weight for d in demands if d.deviceCount == 0) / total
        self.cpus = sorted({d.cpuMilli for d in demands})
        self.mems = sorted({d.memoryMiB for d in demands})
        grouped: dict[tuple[int, int, frozenset[str] | None], list[tuple[int, int, float]]] = {}
        for d in demands:
            if d.deviceCount == 0:
                continue
            percent = WHOLE if d.deviceCount > 1 else d.sharePercent
            classes = frozenset(d.deviceClasses) if d.deviceClasses is not None else None
            grouped.setdefault((d.deviceCount, percent, classes), []).append(
                (self.cpus.index(d.cpuMilli), self.mems.index(d.memoryMiB), d.weight / total)
            )
        self.groups = tuple(
            _Group(k, p, c, tuple(m), sum(w for _, _, w in m))
            for (k, p, c), m in sorted(grouped.items(), key=lambda kv: (kv[0][0], kv[0][1], sorted(kv[0][2] or ())))
        )
        self._memo: dict[tuple[object, ...], float] = {}
        # Tells workloads apart in what is kept across plans (unlike id(), never reused).
        self.serial = next(_SERIALS)

    @property
    def empty(self) -> bool:
        return not self.groups

    def fragmentation(self, cpu_free: int | None, mem_free: int | None, devices: Sequence[DeviceView]) -> float:
        """The node's expected fragmentation, in percent of a device."""
        ci = len(self.cpus) if cpu_free is None else bisect.bisect_right(self.cpus, cpu_free)
        mi = len(self.mems) if mem_free is None else bisect.bisect_right(self.mems, mem_free)
        # The figure does not depend on the devices' order: any order that puts equal views together
        # keys alike (a frozenset's hash is stable within the process).
        views = tuple(sorted(devices, key=lambda v: (v[0], hash(v[1]))))
        key = (ci, mi, views)
        found = self._memo.get(key)
        if found is not None:
            return found
        total_free = sum(f for f, _ in views)
        value = 0.0
        if total_free > 0:
            value = self.idle * total_free
            for g in self.groups:
                runs = sum(w for c, m, w in g.members if c < ci and m < mi)
                usable = self._usable(g, views)
                # Kinds that cannot run here (CPU, memory, devices) see all of the free capacity as fragments.
                value += (g.weight - runs) * total_free
                value += runs * (total_free - usable if usable is not None else total_free)
        if len(self._memo) > 200_000:
            self._memo.clear()
        self._memo[key] = value
        return value

    @staticmethod
    def _usable(g: _Group, views: Sequence[DeviceView]) -> int | None:
        """The free capacity the group's kind can use on these devices, None when it cannot run at all."""
        threshold = min(g.percent, WHOLE)
        usable = 0
        fitting = 0
        for free, classes in views:
            if g.classes is not None and not (classes & g.classes):
                continue
            if free >= threshold:
                usable += free
                fitting += 1
        if g.count <= 1:
            return usable if fitting >= 1 else None
        return usable if fitting >= g.count else None


def growth_score(delta: float) -> int:
    """The paper's score of a growth of ``delta`` percent of a device (FGD's plugin: 100 x sigmoid of
    the decrease in devices, truncated): 50 for no growth, higher for a decrease, lower for a growth.
    One step is about 4 % of a device near 0 and wider further out."""
    x = max(-50.0, min(50.0, delta / WHOLE))
    return int(100 / (1 + math.exp(x)))


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


__all__ = ["WHOLE", "DeviceView", "RecentDemand", "Workload", "growth_score", "workload_of"]
