"""Would moving other orders make room? For an order that does not fit now. Pure.

``ai-inference plan`` prints it under a refusal: capacity that exists but lies in fragments no one
order can use is the case where moving (replanning) a few orders helps, and the case where nothing
but more capacity does is told apart from it.

The search, cheapest first:

1. The order fits now: nothing to move.
2. It does not fit even with every other order's allocation gone (every device empty): no move can
   help (the refusal is about the model, the class or the nodes, not about other orders).
3. Node by node, fewest other orders' allocations first (at most ``max_nodes``): the node's devices
   emptied of the others' allocations; when the order then fits, each allocation taken off is put back
   elsewhere — on another node, on a device of the same product and placement with room for it (a
   share on a shareable device with room for its share and memory; a whole device on an empty one),
   largest first, the fullest device that holds it (best fit) — on the snapshot where the order's
   replica is already held. The first node where every one finds a place is the answer, with the moves.
4. None: moving the orders off any one node does not make room.

What it does not judge: the CPU and memory of the moved orders' pods on their new nodes (the
snapshot does not say which pods hold which allocation), and which orders may be moved (priority,
a class that pins them): it says whether room *can* be made, as a hint for an administrator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from inference_api.plan import LaunchPlan
from planner.inventory import Device, DeviceAllocation, InventorySnapshot, occupancy, related_devices
from planner.planning import PlanningRequest, plan_launch
from planner.recipes import RecipeBook, load_recipe_book


@dataclass(frozen=True)
class Move:
    """One allocation to move: whose, from which device to which (``node/device``)."""

    holder: str
    source: str
    target: str


@dataclass(frozen=True)
class RoomByMoving:
    """The answer: ``possible`` (None: the order fits now), where the order would go, the moves, why."""

    possible: bool | None
    message: str
    node: str | None = None
    moves: tuple[Move, ...] = ()
    plan: LaunchPlan | None = None


def room_by_moving(request: PlanningRequest, recipes: RecipeBook | None = None, *, max_nodes: int = 64) -> RoomByMoving:
    """Whether moving other orders' allocations would make room for the order (see the module)."""
    book = recipes or load_recipe_book()
    single = request.model_copy(update={"replicas": 1})
    now = plan_launch(single, book)
    if now.plan is not None:
        return RoomByMoving(None, "the order fits now: nothing has to move", now.plan.nodeName, plan=now.plan)
    snapshot = request.inventory
    holder = request.holder

    def others(device: Device) -> list[DeviceAllocation]:
        return [a for a in device.allocations if a.holder != holder]

    emptied = _without(snapshot, {d.key for d in snapshot.devices if others(d)}, holder)
    if plan_launch(single.model_copy(update={"inventory": emptied}), book).plan is None:
        return RoomByMoving(
            False,
            "no: the order does not fit even with every other order moved away; it needs other accelerators, "
            "a class that allows more, or nodes that can take its pod",
        )
    load: dict[str, int] = {}
    for d in snapshot.devices:
        load[d.node] = load.get(d.node, 0) + len(others(d))
    candidates = sorted((n for n, count in load.items() if count), key=lambda n: (load[n], n))[:max_nodes]
    for node in candidates:
        keys = {d.key for d in snapshot.devices if d.node == node and others(d)}
        freed = _without(snapshot, keys, holder)
        found = plan_launch(single.model_copy(update={"inventory": freed}), book).plan
        if found is None or found.nodeName != node:
            continue
        moves = _relocate(freed, found, [(d, a) for d in snapshot.devices if d.key in keys for a in others(d)])
        if moves is None:
            continue
        listed = ", ".join(f"{m.holder} from {m.source} to {m.target}" for m in moves)
        return RoomByMoving(
            True,
            f"yes: moving {len(moves)} allocation(s) off {node} makes room there ({listed})",
            node,
            tuple(moves),
            found,
        )
    tried = len(candidates)
    return RoomByMoving(
        False,
        f"no: moving the other orders off any one node does not make room ({tried} node(s) tried); "
        "capacity has to be added or freed",
    )


def _without(snapshot: InventorySnapshot, keys: set[str], holder: str | None) -> InventorySnapshot:
    """The snapshot with the devices ``keys`` emptied of every allocation but the order's own."""
    devices = [
        d.model_copy(update={"allocations": [a for a in d.allocations if a.holder == holder]}) if d.key in keys else d
        for d in snapshot.devices
    ]
    return snapshot.model_copy(update={"devices": devices})


def _relocate(
    freed: InventorySnapshot, placed: LaunchPlan, moved: list[tuple[Device, DeviceAllocation]]
) -> list[Move] | None:
    """A place off the freed node for each moved allocation, with the order's replica held; None when
    one has none."""
    held: dict[str, list[DeviceAllocation]] = {d.key: list(d.allocations) for d in freed.devices}
    by_key = {d.key: d for d in freed.devices}
    related = {k: tuple(v) for k, v in related_devices(freed).items()}
    for name in placed.deviceNames:
        key = f"{placed.nodeName}/{name}"
        device = by_key[key]
        part = (
            DeviceAllocation(holder="(the order)")
            if placed.sharePercent >= 100 or not device.allowMultipleAllocations
            else DeviceAllocation(
                holder="(the order)", sharePercent=placed.sharePercent, memoryMiB=placed.memoryRequestMiB
            )
        )
        held[key].append(part)

    def current(device: Device) -> Device:
        return device.model_copy(update={"allocations": held[device.key]})

    def room(device: Device, allocation: DeviceAllocation, source: Device) -> float | None:
        """Free memory left after the allocation lands there (best fit ranks by it); None: no room."""
        if device.node == placed.nodeName or device.productName != source.productName:
            return None
        if device.placement != source.placement:
            return None
        occ = occupancy(current(device), related=[current(r) for r in related.get(device.key, ())])
        if occ.exclusive:
            return None
        if not source.allowMultipleAllocations or (allocation.sharePercent >= 100 and allocation.memoryMiB is None):
            return math.inf if occ.empty else None
        if not device.allowMultipleAllocations or occ.sharePercent + allocation.sharePercent > 100:
            return None
        need = allocation.memoryMiB if allocation.memoryMiB is not None else 0
        if device.memoryMiB is not None and occ.memoryMiB + need > device.memoryMiB:
            return None
        return math.inf if device.memoryMiB is None else device.memoryMiB - occ.memoryMiB - need

    moves: list[Move] = []
    largest_first = sorted(moved, key=lambda m: (-m[1].sharePercent, -(m[1].memoryMiB or 0), m[0].key, m[1].holder))
    for source, allocation in largest_first:
        best: tuple[float, str] | None = None
        for device in freed.devices:
            left = room(device, allocation, source)
            if left is not None and (best is None or (left, device.key) < best):
                best = (left, device.key)
        if best is None:
            return None
        held[best[1]].append(allocation)
        moves.append(Move(allocation.holder, source.key, best[1]))
    return moves


__all__ = ["Move", "RoomByMoving", "room_by_moving"]
