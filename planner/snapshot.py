"""The snapshot index: what one plan reads of its inventory snapshot. Pure.

Devices by key and by node, the devices that share silicon (a partition and its whole device), the
nodes by name, each device's occupancy with no allocation of the order's own, and — for a replan —
the order's own allocations and the occupancy of the devices they touch. The parts allocations do
not change are kept on the snapshot object and reused by every plan made on it; the occupancies are
computed by each plan (on first use) and dropped with it.
"""

from __future__ import annotations

import math
from collections import ChainMap
from collections.abc import Callable, Hashable, Mapping
from typing import TypeVar

from inference_api.plan import LaunchPlan
from planner.inventory import (
    EMPTY,
    AllocationId,
    Device,
    InventorySnapshot,
    Node,
    Occupancy,
    occupancy,
    own_allocations,
    related_devices,
)

_T = TypeVar("_T")


def free_mib(device: Device, occ: Occupancy) -> float:
    """Memory left on the device; unknown memory is infinite, so it ranks last (best fit cannot judge it)."""
    return math.inf if device.memoryMiB is None else device.memoryMiB - occ.memoryMiB


class _Base(dict[str, Occupancy]):
    """Every device's occupancy when the order holds nothing, computed on first use."""

    def __init__(self, by_key: Mapping[str, Device], related: Mapping[str, tuple[Device, ...]]) -> None:
        super().__init__()
        self._by_key = by_key
        self._related = related

    def __missing__(self, key: str) -> Occupancy:
        device = self._by_key[key]
        if not device.allocations and key not in self._related:
            self[key] = EMPTY
            return EMPTY
        value = occupancy(device, frozenset(), self._related.get(key, ()))
        self[key] = value
        return value


class SnapshotIndex:
    """One plan's view of one snapshot: ``byKey`` (device key → device), ``related`` (device key →
    the devices sharing its silicon), ``nodes`` (node name → node, None when the snapshot does not
    judge nodes) and ``base`` (device key → what others hold of it when the order holds nothing).

    What allocations do not change (devices by key and by node, shared silicon, nodes by name, the
    devices each class selects, stage 1's slots per policy) is computed once per snapshot object and
    kept on it (``InventorySnapshot._static``), so that a caller planning many orders on one snapshot
    whose allocations it updates (the trace replay, a planner service between inventory changes)
    pays for it once; the occupancies are the plan's own."""

    def __init__(self, snapshot: InventorySnapshot) -> None:
        self.snapshot = snapshot
        static = snapshot._static
        if "byKey" not in static:
            static["byKey"] = {d.key: d for d in snapshot.devices}
            static["related"] = related_devices(snapshot)
            by_node: dict[str, list[Device]] = {}
            for d in snapshot.devices:
                by_node.setdefault(d.node, []).append(d)
            static["byNode"] = by_node
            static["nodes"] = None if snapshot.nodes is None else {n.name: n for n in snapshot.nodes}
        self.static = static
        self.byKey: dict[str, Device] = static["byKey"]  # type: ignore[assignment]
        self.related: dict[str, tuple[Device, ...]] = static["related"]  # type: ignore[assignment]
        self.byNode: dict[str, list[Device]] = static["byNode"]  # type: ignore[assignment]
        self.nodes: dict[str, Node] | None = static["nodes"]  # type: ignore[assignment]
        self.base: dict[str, Occupancy] = _Base(self.byKey, self.related)
        # Every node's fingerprint for this plan (``planner.fit``), computed on first use.
        self.fingerprints: dict[str, tuple[object, ...]] | None = None

    def cached(self, key: Hashable, make: Callable[[], _T]) -> _T:
        """A value computed once per snapshot object (it must not depend on allocations)."""
        cache: dict[Hashable, object] = self.static.setdefault("derived", {})  # type: ignore[assignment]
        if key not in cache:
            cache[key] = make()
        return cache[key]  # type: ignore[return-value]

    def own(self, holder: str | None, current: LaunchPlan | None) -> frozenset[AllocationId]:
        """The allocations that are the order's own: its holder's, and those its current plan lends."""
        return own_allocations(
            self.snapshot,
            holder,
            held_node=current.nodeName if current else None,
            held_devices=current.deviceNames if current else (),
            held_share_percent=current.sharePercent if current else None,
            held_memory_mib=current.memoryRequestMiB if current else None,
            by_key=self.byKey,
        )

    def occupancies(self, own: frozenset[AllocationId]) -> tuple[Mapping[str, Occupancy], dict[str, Occupancy]]:
        """(every device's occupancy as the order sees it, the part its own allocations changed).

        The order's own allocations change what it sees of their devices and of their related
        devices; every other device keeps its ``base`` occupancy."""
        touched: dict[str, Occupancy] = {}
        for key, _ in own:
            for device in (self.byKey[key], *self.related.get(key, ())):
                if device.key not in touched:
                    touched[device.key] = occupancy(device, own, self.related.get(device.key, ()))
        return (ChainMap(touched, self.base) if touched else self.base), touched
