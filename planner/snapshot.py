"""The snapshot index: what one plan reads of its inventory snapshot, computed once per plan. Pure.

Devices by key, the devices that share silicon (a partition and its whole device), each device's
occupancy with no allocation of the order's own, and — for a replan — the order's own allocations
and the occupancy of the devices they touch. The index is built by ``plan_launch`` for each plan and
dropped with it: it is not kept across plans (the planner service reads a new inventory for every
request, so an index kept for a snapshot would never be asked for again).
"""

from __future__ import annotations

import math
from collections import ChainMap
from collections.abc import Mapping

from inference_api.plan import LaunchPlan
from planner.inventory import (
    AllocationId,
    Device,
    InventorySnapshot,
    Occupancy,
    occupancy,
    own_allocations,
    related_devices,
)


def free_mib(device: Device, occ: Occupancy) -> float:
    """Memory left on the device; unknown memory is infinite, so it ranks last (best fit cannot judge it)."""
    return math.inf if device.memoryMiB is None else device.memoryMiB - occ.memoryMiB


class SnapshotIndex:
    """One plan's view of one snapshot: ``byKey`` (device key → device), ``related`` (device key →
    the devices sharing its silicon) and ``base`` (device key → what others hold of it when the order
    holds nothing)."""

    def __init__(self, snapshot: InventorySnapshot) -> None:
        self.snapshot = snapshot
        self.byKey = {d.key: d for d in snapshot.devices}
        self.related = related_devices(snapshot)
        self.base = {d.key: occupancy(d, frozenset(), self.related.get(d.key, ())) for d in snapshot.devices}

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
