"""A repack: which shares to move so that whole devices come free. Pure.

Plans are made once. A share planned onto a device that was the only one with room keeps it after
the other devices empty, and the devices stay half used: capacity that no order of a whole device,
and no large share, can use (the planner's stranded-devices metric counts them). A repack proposes
moves that consolidate those shares onto fewer devices, so that whole devices come free.

The search, greedy and cheapest first:

1. Candidates to empty: shareable devices whose every allocation is a movable share (a holder the
   caller may move, on one device, less than the whole device), the least used first (then by key).
2. For each candidate, each of its shares, largest first, gets a place on another device: the same
   product and placement, shareable, already in use (moving onto an empty device frees nothing), with
   room for its share and memory, and a node with room for its pod's CPU and memory. Best fit: the
   device left with the least free share, then the least free memory, then the key. When every share
   of the candidate has a place, the moves are kept and the device is freed; otherwise none of them is.
3. A device that received a share is never emptied in the same pass, and a freed device never
   receives one. So every move's target has room while its source still holds the share: each move
   can be made before it breaks (the new replica Ready before the old one goes), one at a time, in
   any order.

What it does not judge: which orders may move (the caller's ``movable``: an order whose class's
update policy allows a rolling move, not being deleted, Ready), and when (the caller's pace:
``max_moves`` a pass).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from planner.inventory import Device, DeviceAllocation, InventorySnapshot, allocated_mib, related_devices
from planner.moves import Move


@dataclass(frozen=True)
class PodRequests:
    """The CPU and memory a holder's pod requests: what moves with its share to the target's node."""

    cpuMilli: int = 0
    memoryMiB: int = 0


@dataclass(frozen=True)
class Repack:
    """The proposal: the moves, in the order to make them, and the devices (``node/device``) they free."""

    moves: tuple[Move, ...]
    freed: tuple[str, ...]
    message: str


def propose_repack(
    snapshot: InventorySnapshot,
    movable: Callable[[str], bool],
    pods: Mapping[str, PodRequests] | None = None,
    *,
    max_moves: int | None = None,
) -> Repack:
    """Moves of movable shares that free whole devices (see the module)."""
    pods = pods or {}
    related = related_devices(snapshot)
    held: dict[str, list[DeviceAllocation]] = {d.key: list(d.allocations) for d in snapshot.devices}
    free_cpu: dict[str, float] = {}
    free_mem: dict[str, float] = {}
    for node in snapshot.nodes or ():
        free_cpu[node.name] = math.inf if node.cpuMilli is None else node.cpuMilli - node.requestedCpuMilli
        free_mem[node.name] = math.inf if node.memoryMiB is None else node.memoryMiB - node.requestedMemoryMiB
    holders: dict[str, int] = {}
    for device in snapshot.devices:
        for allocation in device.allocations:
            holders[allocation.holder] = holders.get(allocation.holder, 0) + 1

    def shareable(device: Device) -> bool:
        return device.allowMultipleAllocations and not any(r.allocations for r in related.get(device.key, ()))

    def movable_share(allocation: DeviceAllocation) -> bool:
        return allocation.sharePercent < 100 and holders.get(allocation.holder) == 1 and movable(allocation.holder)

    candidates = [
        d for d in snapshot.devices if d.allocations and shareable(d) and all(movable_share(a) for a in d.allocations)
    ]
    candidates.sort(key=_least_used_first)
    by_key = {d.key: d for d in snapshot.devices}
    # The targets a share may go to: shareable devices in use, by product and placement, each kept as
    # (free share, free memory, key) in order, so the best fit is the first with room (a bisection).
    # A target's related devices are never held (a move never changes that): what it holds is its own.
    targets: dict[tuple[str | None, str], list[tuple[int, float, str]]] = {}
    for device in snapshot.devices:
        if device.allocations and shareable(device):
            targets.setdefault(_group(device), []).append(_room(device, held[device.key]))
    for entries in targets.values():
        entries.sort()

    def place(allocation: DeviceAllocation, source: Device) -> Device | None:
        """The best fit for the share off ``source``: the least free share, then memory, then key."""
        entries = targets.get(_group(source), [])
        pod = pods.get(allocation.holder, PodRequests())
        for k in range(bisect.bisect_left(entries, (allocation.sharePercent, -math.inf, "")), len(entries)):
            _, memory, key = entries[k]
            device = by_key[key]
            if key == source.key or memory < allocated_mib(device, allocation):
                continue
            if device.node != source.node and (
                free_cpu.get(device.node, math.inf) < pod.cpuMilli
                or free_mem.get(device.node, math.inf) < pod.memoryMiB
            ):
                continue
            return device
        return None

    def hold(device: Device, allocations: list[DeviceAllocation]) -> None:
        """``device`` now holds ``allocations``: its entry among the targets moves with it."""
        entries = targets[_group(device)]
        entries.pop(bisect.bisect_left(entries, _room(device, held[device.key])))
        held[device.key] = allocations
        if allocations:
            bisect.insort(entries, _room(device, allocations))

    freed: list[str] = []
    receivers: set[str] = set()
    moves: list[Move] = []
    for source in candidates:
        if max_moves is not None and len(moves) >= max_moves:
            break
        if source.key in receivers:
            continue
        shares = sorted(held[source.key], key=lambda a: (-a.sharePercent, -(a.memoryMiB or 0), a.holder))
        if max_moves is not None and len(moves) + len(shares) > max_moves:
            continue
        tentative: list[tuple[DeviceAllocation, Device]] = []
        for allocation in shares:
            target = place(allocation, source)
            if target is None:
                break
            hold(target, [*held[target.key], allocation])
            _take_pod(free_cpu, free_mem, pods.get(allocation.holder), source.node, target.node, +1)
            tentative.append((allocation, target))
        if len(tentative) < len(shares):
            for allocation, target in reversed(tentative):
                hold(target, [a for a in held[target.key] if a is not allocation])
                _take_pod(free_cpu, free_mem, pods.get(allocation.holder), source.node, target.node, -1)
            continue
        hold(source, [])
        freed.append(source.key)
        for allocation, target in tentative:
            receivers.add(target.key)
            moves.append(Move(allocation.holder, source.key, target.key))
    if not moves:
        return Repack((), (), "nothing to repack: no device can be emptied by moving its shares onto devices in use")
    return Repack(
        tuple(moves),
        tuple(freed),
        f"moving {len(moves)} share(s) frees {len(freed)} device(s): " + ", ".join(freed),
    )


def _least_used_first(device: Device) -> tuple[int, float, str]:
    """A candidate's rank: the most free share first, then the most free memory, then the key."""
    free, memory, key = _room(device, device.allocations)
    return -free, -memory, key


def _group(device: Device) -> tuple[str | None, str]:
    return device.productName, device.placement.value


def _room(device: Device, allocations: list[DeviceAllocation]) -> tuple[int, float, str]:
    """(free share, free memory, key) of a device holding ``allocations``."""
    taken = sum(a.sharePercent for a in allocations)
    memory = (
        math.inf if device.memoryMiB is None else device.memoryMiB - sum(allocated_mib(device, a) for a in allocations)
    )
    return 100 - taken, memory, device.key


def _take_pod(
    free_cpu: dict[str, float],
    free_mem: dict[str, float],
    pod: PodRequests | None,
    source: str,
    target: str,
    sign: int,
) -> None:
    """The moved pod's requests taken on the target's node (``sign`` -1: given back). Its source node is
    not credited: the old replica holds its requests until the new one is Ready (make-before-break)."""
    if pod is None or source == target:
        return
    for free, amount in ((free_cpu, pod.cpuMilli), (free_mem, pod.memoryMiB)):
        if target in free:
            free[target] -= sign * amount


__all__ = ["PodRequests", "Repack", "propose_repack"]
