"""Bookings: plans the planner service answered whose claims the cluster has not allocated yet. Pure.

Between a plan and its allocation lie the StatefulSet, the pod, the claim made from the template and
the scheduler: seconds to minutes in which the inventory shows nothing of the plan. Without
bookings every order planned in that window sees the same free capacity, and the scheduler is left
with claims it cannot allocate (issue #13). Like kube-scheduler's *assumed pods*, the service
remembers each plan it answered as a :class:`Booking` and counts it against the capacity of every
later plan until the order's claims are allocated (then the allocations themselves count), the order
plans again (the new plan replaces it), or ``ttl`` passes.

Claims of an order that the cluster shows unallocated and no booking covers (the planner restarted,
replicas beyond the booked ones) are counted too, as :class:`OrderClaim` reservations of their
device class.

How a reservation is counted: :func:`reserve` turns each outstanding replica into a synthetic
:class:`~planner.inventory.DeviceAllocation` (holder: the order) on the snapshot's devices, so every
rule of the capacity stage (shares, memory, exclusive devices, a partition and its whole device)
applies to it unchanged, and a replan of the order does not count its own booking against it. A
booking is put on the devices its plan named while they still have room there (what the planner
just decided, on this same accounting); otherwise, and for an unbooked claim, on the devices of its
class, best fit: the device with the least free memory that still holds it, as the planner packs.
The scheduler, not the plan, picks the device a claim gets; a reservation is a stand-in for capacity
of the class, placed where the planner itself would have put it. A reservation with room nowhere
(the cluster is already over-committed) is left out and reported, not forced.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from inference_api.plan import LaunchPlan
from planner.cel_selectors import select_devices
from planner.inventory import Device, DeviceAllocation, InventorySnapshot, Occupancy, allocated_mib, related_devices
from planner.nodes import ENDPOINT_FRONT_DEMAND
from planner.quantity import Quantity


@dataclass(frozen=True)
class Booking:
    """One answered plan of one order: what each of its replicas will claim, and where the plan put it."""

    holder: str
    deviceClass: str
    deviceCount: int
    # Compute share of each device (100: the whole device).
    sharePercent: int
    # Device memory each device's claim asks for (the claim's gpu.deckhouse.io/memory); None: the whole device.
    memoryMiB: int | None
    replicas: int
    # When it was answered (the service's monotonic clock, seconds).
    bookedAt: float
    node: str | None = None
    devices: tuple[str, ...] = ()
    # What each replica's pod requests of its node (the plan's cpu and memory): held on the node too.
    podCpuMilli: int = 0
    podMemoryMiB: int = 0
    # Where the plan put each replica beyond the first (node, devices), when it placed several.
    more: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def of_plan(cls, holder: str, plan: LaunchPlan, now: float, replicas: int | None = None) -> Booking:
        """The booking of an answered plan; its memory is what the order's claim template will ask.
        ``replicas``: the plan's placements (one when it made none per replica)."""
        share = plan.sharePercent
        memory = None
        if share < 100:
            memory = plan.memoryRequestMiB or plan.modelMemoryMiB
            if memory is None:
                memory = math.ceil(plan.acceleratorMemoryGiB * 1024 * share / 100)
        return cls(
            holder=holder,
            deviceClass=plan.deviceClass,
            deviceCount=plan.deviceCount,
            sharePercent=share,
            memoryMiB=memory,
            replicas=replicas if replicas is not None else max(1, len(plan.replicaPlacements)),
            bookedAt=now,
            node=plan.nodeName,
            devices=tuple(plan.deviceNames),
            # The whole pod: the engine's requests and the endpoint front's beside it.
            podCpuMilli=math.ceil(Quantity.of(plan.cpu).value * 1000) + ENDPOINT_FRONT_DEMAND.cpuMilli,
            podMemoryMiB=math.ceil(Quantity.of(plan.memory).value / (1024 * 1024)) + ENDPOINT_FRONT_DEMAND.memoryMiB,
            more=tuple((p.nodeName, tuple(p.deviceNames)) for p in plan.replicaPlacements[1:]),
        )

    def placement(self, i: int) -> tuple[str | None, tuple[str, ...]]:
        """Where the plan put replica ``i`` (None, (): it named no place for it)."""
        if i == 0:
            return self.node, self.devices
        if i - 1 < len(self.more):
            return self.more[i - 1]
        return None, ()

    def matches(self, claim: OrderClaim) -> bool:
        """Whether the claim is one a replica of this plan makes (class, device count, memory request)."""
        if claim.reserved:
            return claim.holder == self.holder
        return (
            claim.holder == self.holder
            and claim.deviceClass == self.deviceClass
            and claim.deviceCount == self.deviceCount
            and claim.memoryMiB == self.memoryMiB
        )


@dataclass(frozen=True)
class OrderClaim:
    """A ResourceClaim of an order's replica, as the informers see it."""

    holder: str  # <namespace>/<order>
    name: str
    deviceClass: str
    deviceCount: int = 1
    # The claim's gpu.deckhouse.io/memory request, MiB; None: whole devices.
    memoryMiB: int | None = None
    allocated: bool = False
    # A pinned order's planned placement that the snapshot already holds (its claim template reserves
    # it): it settles one replica of the order's booking, whatever its shape.
    reserved: bool = False


@dataclass(frozen=True)
class Pruned:
    """What :func:`prune` kept and dropped (holder → why: ``allocated`` or ``expired``)."""

    kept: tuple[Booking, ...]
    dropped: Mapping[str, str] = field(default_factory=dict)


def outstanding(booking: Booking, claims: Iterable[OrderClaim]) -> int:
    """Replicas of the booking the cluster does not show allocated yet."""
    allocated = sum(1 for c in claims if c.allocated and booking.matches(c))
    return max(0, booking.replicas - allocated)


def by_holder(claims: Iterable[OrderClaim]) -> dict[str, list[OrderClaim]]:
    """The claims of each holder, in the order given. A booking matches its own holder's claims alone
    (``Booking.matches``), so each booking looks at these, not at every claim of the cluster: a plan
    in a burst of orders looked at bookings x claims (a million matches at 1,000 orders)."""
    out: dict[str, list[OrderClaim]] = {}
    for claim in claims:
        out.setdefault(claim.holder, []).append(claim)
    return out


def prune(bookings: Iterable[Booking], claims: Sequence[OrderClaim], now: float, ttl: float) -> Pruned:
    """Drop the bookings whose claims are all allocated (the allocations count now) and those older than ``ttl``."""
    kept: list[Booking] = []
    dropped: dict[str, str] = {}
    claims_of = by_holder(claims)
    for booking in bookings:
        if now - booking.bookedAt >= ttl:
            dropped[booking.holder] = "expired"
        elif outstanding(booking, claims_of.get(booking.holder, ())) == 0:
            dropped[booking.holder] = "allocated"
        else:
            kept.append(booking)
    return Pruned(tuple(kept), dropped)


@dataclass(frozen=True)
class Need:
    """One replica to reserve: ``deviceCount`` devices of one node, each held as ``sharePercent`` and
    ``memoryMiB`` (None: the whole device; a share of None: sized on the device, as the planner would)."""

    holder: str
    deviceClass: str
    deviceCount: int
    sharePercent: int | None
    memoryMiB: int | None
    node: str | None = None
    devices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Reservation:
    """The snapshot with the reservations on it, and the replicas that had room nowhere."""

    snapshot: InventorySnapshot
    placed: tuple[tuple[Need, tuple[str, ...]], ...] = ()
    unplaced: tuple[Need, ...] = ()


def needs(bookings: Iterable[Booking], claims: Sequence[OrderClaim]) -> list[Need]:
    """The replicas to reserve: each booking's outstanding ones (oldest booking first), then the
    unallocated claims no booking covers. A booking covers at most its outstanding replicas among
    its order's unallocated claims of its shape; claims beyond (more replicas than booked, an older
    plan's) are reserved on their own."""
    out: list[Need] = []
    pending = sorted((c for c in claims if not c.allocated), key=lambda c: (c.holder, c.name))
    claims_of = by_holder(claims)
    pending_of = by_holder(pending)
    covered: set[tuple[str, str]] = set()
    for booking in sorted(bookings, key=lambda b: (b.bookedAt, b.holder)):
        count = outstanding(booking, claims_of.get(booking.holder, ()))
        for i in range(count):
            # Where the plan put the replica (each placement it made, in order); else where it fits best.
            node, devices = booking.placement(i)
            out.append(
                Need(
                    booking.holder,
                    booking.deviceClass,
                    booking.deviceCount,
                    booking.sharePercent,
                    booking.memoryMiB,
                    node,
                    devices,
                )
            )
        mine = [c for c in pending_of.get(booking.holder, ()) if booking.matches(c)]
        covered.update((c.holder, c.name) for c in mine[:count])
    for claim in pending:
        if (claim.holder, claim.name) in covered:
            continue
        share = 100 if claim.memoryMiB is None else None
        out.append(Need(claim.holder, claim.deviceClass, claim.deviceCount, share, claim.memoryMiB))
    return out


def reserve(snapshot: InventorySnapshot, bookings: Iterable[Booking], claims: Sequence[OrderClaim]) -> Reservation:
    """The snapshot with every outstanding booked replica and every unbooked pending claim held on its
    devices (see the module's docstring), greedily, oldest booking first."""
    wanted = needs(bookings, claims)
    if not wanted:
        return Reservation(snapshot)
    holdings = _Holdings(snapshot)
    members: dict[str, _Pool] = {}
    placed: list[tuple[Need, tuple[str, ...]]] = []
    unplaced: list[Need] = []
    for need in wanted:
        if need.deviceClass not in members:
            device_class = snapshot.device_class(need.deviceClass)
            selection = select_devices(device_class, snapshot.devices) if device_class is not None else None
            chosen_devices = selection.devices if selection is not None and selection.decidable else ()
            slots = tuple(holdings.slot(d) for d in chosen_devices)
            members[need.deviceClass] = _Pool(slots, frozenset(slot.key for slot in slots))
        pool = members[need.deviceClass]
        chosen = _named(need, pool, holdings) or _best_fit(need, pool, holdings)
        if chosen is None:
            unplaced.append(need)
            continue
        for slot, part in chosen:
            holdings.hold(slot, need.holder, part)
        placed.append((need, tuple(slot.key for slot, _ in chosen)))
    return Reservation(holdings.snapshot(), tuple(placed), tuple(unplaced))


@dataclass(frozen=True, eq=False)
class _Slot:
    """A device with its key computed once (``Device.key`` formats it on every read)."""

    key: str
    device: Device


@dataclass(frozen=True)
class _Pool:
    """The devices of one class, and their keys."""

    slots: tuple[_Slot, ...]
    keys: frozenset[str]


# What a need holds of one device: (share percent, memory MiB; None: the whole device).
Part = tuple[int, int | None]
Fits = Sequence[tuple[_Slot, Part]]


class _Holdings:
    """The snapshot's allocations with the reservations added so far, and each device's occupancy.

    An occupancy is computed once and dropped when a reservation lands on its device or on one
    sharing its silicon: every need looks at every device of its class, so recomputing it from the
    allocations each time made a plan cost bookings x devices x allocations (seconds in a burst of
    orders, when hundreds of bookings are outstanding)."""

    def __init__(self, snapshot: InventorySnapshot) -> None:
        self._snapshot = snapshot
        self.slots = {d.key: _Slot(d.key, d) for d in snapshot.devices}
        self._related = {key: tuple(d.key for d in ds) for key, ds in related_devices(snapshot).items()}
        self._held: dict[str, list[DeviceAllocation]] = {}
        self._occupied: dict[str, Occupancy] = {}

    def slot(self, device: Device) -> _Slot:
        return self.slots[device.key]

    def allocations(self, key: str) -> Sequence[DeviceAllocation]:
        held = self._held.get(key)
        return held if held is not None else self.slots[key].device.allocations

    def used(self, slot: _Slot) -> Occupancy:
        """What the device holds now, reservations included (``planner.inventory.occupancy``'s rules)."""
        known = self._occupied.get(slot.key)
        if known is not None:
            return known
        device = slot.device
        mine = self.allocations(slot.key)
        share = min(100, sum(a.sharePercent for a in mine))
        memory = sum(allocated_mib(device, a) for a in mine)
        exclusive = bool(mine) and not device.allowMultipleAllocations
        if any(self.allocations(r) for r in self._related.get(slot.key, ())):
            exclusive = True
        self._occupied[slot.key] = found = Occupancy(sharePercent=share, memoryMiB=memory, exclusive=exclusive)
        return found

    def free(self, slot: _Slot) -> float:
        memory = slot.device.memoryMiB
        return math.inf if memory is None else memory - self.used(slot).memoryMiB

    def room(self, need: Need, slot: _Slot) -> Part | None:
        """What the need holds of the device, when it has room; None when it has none."""
        now = self.used(slot)
        if now.exclusive:
            return None
        device = slot.device
        memory = need.memoryMiB
        share = need.sharePercent
        if share is None:  # a memory request of an unbooked claim: the share the planner would give it
            share = 100 if not device.memoryMiB else min(100, math.ceil(100 * (memory or 0) / device.memoryMiB))
        if memory is None or not device.allowMultipleAllocations:
            # A whole device (or one that cannot be shared): it must be empty.
            return (100, None) if now.empty else None
        if now.sharePercent + share > 100:
            return None
        if device.memoryMiB is not None and now.memoryMiB + memory > device.memoryMiB:
            return None
        return (share, memory)

    def hold(self, slot: _Slot, holder: str, part: Part) -> None:
        share, memory = part
        held = self._held.setdefault(slot.key, list(slot.device.allocations))
        held.append(DeviceAllocation(holder=holder, sharePercent=share, memoryMiB=memory))
        self._occupied.pop(slot.key, None)
        for other in self._related.get(slot.key, ()):
            self._occupied.pop(other, None)

    def snapshot(self) -> InventorySnapshot:
        """The snapshot with the reservations on it (the devices nothing was reserved on unchanged)."""
        devices = [
            d if (held := self._held.get(d.key)) is None else d.model_copy(update={"allocations": held})
            for d in self._snapshot.devices
        ]
        return replace_devices(self._snapshot, devices)


def _named(need: Need, pool: _Pool, holdings: _Holdings) -> Fits | None:
    """The devices the plan named, when they are all of the class and all still have room."""
    if need.node is None or len(need.devices) != need.deviceCount:
        return None
    out: list[tuple[_Slot, Part]] = []
    for name in need.devices:
        slot = holdings.slots.get(f"{need.node}/{name}")
        if slot is None or slot.key not in pool.keys:
            return None
        part = holdings.room(need, slot)
        if part is None:
            return None
        out.append((slot, part))
    return out


def _best_fit(need: Need, pool: _Pool, holdings: _Holdings) -> Fits | None:
    """``deviceCount`` devices of one node with room, the fullest first; among nodes, the least free memory in all."""
    if need.deviceCount == 1:
        # One device: the fullest with room, ties by node then name (what the general rule picks).
        one: tuple[float, str, str, _Slot, Part] | None = None
        for slot in pool.slots:
            part = holdings.room(need, slot)
            if part is not None:
                candidate = (holdings.free(slot), slot.device.node, slot.device.name, slot, part)
                if one is None or candidate[:3] < one[:3]:
                    one = candidate
        return None if one is None else [(one[3], one[4])]
    by_node: dict[str, list[tuple[float, str, _Slot, Part]]] = {}
    for slot in pool.slots:
        part = holdings.room(need, slot)
        if part is not None:
            by_node.setdefault(slot.device.node, []).append((holdings.free(slot), slot.device.name, slot, part))
    best: tuple[float, str, list[tuple[float, str, _Slot, Part]]] | None = None
    for node, fits in by_node.items():
        if len(fits) < need.deviceCount:
            continue
        chosen = sorted(fits, key=lambda f: (f[0], f[1]))[: need.deviceCount]
        total = sum(f[0] for f in chosen)
        if best is None or (total, node) < (best[0], best[1]):
            best = (total, node, chosen)
    if best is None:
        return None
    return [(slot, part) for _, _, slot, part in best[2]]


def with_booked_pods(reservation: Reservation, bookings: Iterable[Booking]) -> InventorySnapshot:
    """The reservation's snapshot with each reserved replica's pod requests held on its node as well,
    so that a later plan does not count CPU and memory a booked pod will take (unchanged when the
    snapshot judges no nodes)."""
    snapshot = reservation.snapshot
    if snapshot.nodes is None or not reservation.placed:
        return snapshot
    by_holder = {b.holder: b for b in bookings}
    extra: dict[str, list[int]] = {}
    for need, keys in reservation.placed:
        booking = by_holder.get(need.holder)
        if booking is None or not keys:
            continue
        held = extra.setdefault(keys[0].split("/", 1)[0], [0, 0, 0])
        held[0] += booking.podCpuMilli
        held[1] += booking.podMemoryMiB
        held[2] += 1
    if not extra:
        return snapshot
    nodes = [
        n.model_copy(
            update={
                "requestedCpuMilli": n.requestedCpuMilli + extra[n.name][0],
                "requestedMemoryMiB": n.requestedMemoryMiB + extra[n.name][1],
                "podCount": n.podCount + extra[n.name][2],
            }
        )
        if n.name in extra
        else n
        for n in snapshot.nodes
    ]
    return snapshot.model_copy(update={"nodes": nodes})


def replace_devices(snapshot: InventorySnapshot, devices: list[Device]) -> InventorySnapshot:
    """The snapshot with its devices replaced (no re-validation: keys are unchanged)."""
    return snapshot.model_copy(update={"devices": devices})


__all__ = [
    "Booking",
    "Need",
    "OrderClaim",
    "Pruned",
    "Reservation",
    "by_holder",
    "needs",
    "outstanding",
    "prune",
    "reserve",
    "with_booked_pods",
]
