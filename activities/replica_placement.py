"""Where one replica of an autoscaled order goes, decided before its pod may be scheduled. Pure.

An autoscaled order's pods are made with the scheduling gate ``ai.deckhouse.io/replica-placement``
(``activities.builders.claim.REPLICA_PLACEMENT_GATE``): the pod exists, its ResourceClaim is made from
the order's template, and the scheduler leaves both alone until the gate goes. The observer's replica
placer (``worker.observer.replica_placer``) then decides the replica's device here, writes the claim's
allocation itself (``allocation_status``) and removes the gate; the scheduler binds a pod whose claim
is allocated to the node the allocation names and allocates nothing else. So every replica the
autoscaler adds is on a device the module chose — the place it judged free — and never on a place
planned for another order, which the DRA allocator cannot be told of.

The choice (``place_replica``): the claim's alternatives in their order (a steered order's
``firstAvailable``: ``planned``, then ``any``), each on the devices its class and its selectors select
(judged with the same CEL library as the planner's class selection); a device with room for what a
claim from the template consumes (``activities.inventory.template_allocation``: the memory request as
the device's requestPolicy rounds it, the share's default; a whole device otherwise), beside what the
snapshot holds there — every other claim's allocation and every other order's planned places (the
snapshot's reservations); on a node that takes the pod (ready, not cordoned, its taints tolerated,
CPU, memory and a pod slot left). Among those: the order's own planned devices first (the plan's
place for it), then the tightest fit (least device memory left, then the node with the fewest free
devices: pack, so whole devices stay whole), then by name, so one snapshot always gives one answer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from activities.builders.claim import MEMORY_CAPACITY, request_alternatives
from activities.inventory import MEMORY, SHARE_PERCENT, pod_requests, template_allocation
from inference_api.plan import Toleration
from planner.cel_selectors import SelectorError, matches
from planner.inventory import (
    AllocationId,
    Device,
    DeviceAllocation,
    DeviceClass,
    InventorySnapshot,
    Node,
    occupancy,
    related_devices,
)
from planner.nodes import PodDemand, node_problem
from planner.quantity import MIB, Quantity, is_quantity
from planner.share import consumed_capacity

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class Alternative:
    """One way a claim's device request may be met: ``exactly``, or one subrequest of ``firstAvailable``."""

    name: str | None  # the subrequest's name; None for ``exactly``
    deviceClass: str
    count: int
    memory: Quantity | None  # the request of gpu.deckhouse.io/memory (a share), None for a whole device
    selectors: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReplicaRequest:
    """What one replica's claim asks, and of whom: read from the claim, its pod and the order's template."""

    holder: str  # namespace/order
    request: str  # the claim's one device request's name
    alternatives: tuple[Alternative, ...]
    pod: PodDemand
    tolerations: tuple[Toleration, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    # The order's planned places (node, device), from its template's annotation: preferred.
    preferred: tuple[tuple[str, str], ...] = ()
    # How many of the order's own allocations in the snapshot are its planned places not allocated
    # yet (reservations made for exactly such a replica): lent to it on its planned devices.
    lend: int = 0


@dataclass(frozen=True)
class DevicePick:
    device: Device
    allocation: DeviceAllocation  # what the claim takes of it (a share: memory and percent; else all)
    left_mib: int  # device memory left beside it (0 for a whole device)
    untouched: bool  # nothing held the device before


@dataclass(frozen=True)
class ReplicaPlacement:
    node: str
    request: str  # the allocation result's request: ``gpu`` or ``gpu/<subrequest>``
    picks: tuple[DevicePick, ...]

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(p.device.name for p in self.picks)


@dataclass(frozen=True)
class NoPlace:
    """Why no device has room: one line, for the pod's condition and the order's status."""

    message: str


class UnreadableClaimError(ValueError):
    """The claim is not of the shape an order's template makes (one request, a class, a count)."""


def replica_request(
    claim: Obj,
    pod: Obj,
    holder: str,
    preferred: Sequence[tuple[str, str]] = (),
    lend: int = 0,
) -> ReplicaRequest:
    """The request of an order replica's claim and pod (both as the API server returned them)."""
    requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []
    if len(requests) != 1 or not requests[0].get("name"):
        raise UnreadableClaimError("the claim does not have exactly one named device request")
    alternatives = []
    first = requests[0]
    for alt in request_alternatives(first):
        device_class = alt.get("deviceClassName")
        if not device_class or alt.get("allocationMode", "ExactCount") != "ExactCount":
            raise UnreadableClaimError("a device request without a class or not an exact count")
        raw = ((alt.get("capacity") or {}).get("requests") or {}).get(MEMORY_CAPACITY)
        if raw is not None and not is_quantity(str(raw)):
            raise UnreadableClaimError(f"the memory request {raw!r} is not a quantity")
        selectors = tuple(
            str(s["cel"]["expression"]) for s in alt.get("selectors") or [] if (s.get("cel") or {}).get("expression")
        )
        alternatives.append(
            Alternative(
                name=alt.get("name") if first.get("firstAvailable") else None,
                deviceClass=str(device_class),
                count=int(alt.get("count") or 1),
                memory=Quantity.parse(str(raw)) if raw is not None else None,
                selectors=selectors,
            )
        )
    spec = pod.get("spec") or {}
    cpu, memory = pod_requests(spec)
    tolerations = []
    for t in spec.get("tolerations") or []:
        try:
            tolerations.append(Toleration.model_validate(t))
        except ValueError:
            continue
    return ReplicaRequest(
        holder=holder,
        request=str(first["name"]),
        alternatives=tuple(alternatives),
        pod=PodDemand(cpuMilli=cpu, memoryMiB=memory),
        tolerations=tuple(tolerations),
        node_selector=dict(spec.get("nodeSelector") or {}),
        preferred=tuple(preferred),
        lend=lend,
    )


def place_replica(snapshot: InventorySnapshot, request: ReplicaRequest) -> ReplicaPlacement | NoPlace:
    """The replica's node and devices (see the module's docstring), or why there is none."""
    related = related_devices(snapshot)
    nodes: dict[str, Node] | None = {n.name: n for n in snapshot.nodes} if snapshot.nodes is not None else None
    lent = _lent(snapshot, request)
    preferred = set(request.preferred)
    why: list[str] = []
    for alt in request.alternatives:
        device_class = snapshot.device_class(alt.deviceClass)
        if device_class is None:
            why.append(f"DeviceClass {alt.deviceClass} is not in the cluster")
            continue
        selecting = DeviceClass(name=device_class.name, selectors=[*device_class.selectors, *alt.selectors])
        by_node: dict[str, list[DevicePick]] = {}
        selected = 0
        for device in snapshot.devices:
            try:
                if not matches(selecting, device):
                    continue
            except SelectorError:
                continue  # the allocator would not allocate a device its selector errors on either
            selected += 1
            pick = _room(device, request.holder, alt.memory, lent, related.get(device.key, ()))
            if pick is not None:
                by_node.setdefault(device.node, []).append(pick)
        fitting: list[tuple[tuple[object, ...], str, list[DevicePick]]] = []
        refused_nodes = 0
        for node_name, picks in by_node.items():
            if len(picks) < alt.count:
                continue
            node = nodes.get(node_name) if nodes is not None else None
            if nodes is not None and (
                node is None
                or node_problem(node, request.pod, request.tolerations, node_selector=request.node_selector) is not None
            ):
                refused_nodes += 1
                continue
            chosen = sorted(picks, key=lambda p: _pick_rank(p, preferred))[: alt.count]
            rank = (
                -sum((node_name, p.device.name) in preferred for p in chosen),
                sum(p.left_mib for p in chosen),
                sum(p.untouched for p in picks),
                node_name,
            )
            fitting.append((rank, node_name, chosen))
        if fitting:
            _, node_name, chosen = min(fitting, key=lambda f: f[0])
            name = f"{request.request}/{alt.name}" if alt.name else request.request
            return ReplicaPlacement(node=node_name, request=name, picks=tuple(chosen))
        label = f"{alt.name} ({alt.deviceClass})" if alt.name else alt.deviceClass
        if selected == 0:
            why.append(f"{label}: no device selected")
        elif refused_nodes:
            why.append(f"{label}: {refused_nodes} node(s) with room on the devices cannot take the pod")
        else:
            why.append(f"{label}: none of {selected} device(s) has room for {alt.count} more")
    return NoPlace("no device has room for the replica: " + "; ".join(why))


def _lent(snapshot: InventorySnapshot, request: ReplicaRequest) -> frozenset[AllocationId]:
    """Up to ``request.lend`` of the order's own allocations on its planned devices: its reservations."""
    if request.lend <= 0:
        return frozenset()
    out: list[AllocationId] = []
    planned = set(request.preferred)
    for device in snapshot.devices:
        if (device.node, device.name) not in planned:
            continue
        for i, allocation in enumerate(device.allocations):
            if allocation.holder == request.holder and len(out) < request.lend:
                out.append((device.key, i))
    return frozenset(out)


def _room(
    device: Device, holder: str, memory: Quantity | None, lent: frozenset[AllocationId], related: Sequence[Device]
) -> DevicePick | None:
    """The device's pick when a claim from the template fits beside what others hold there."""
    taken = template_allocation(device, holder, memory)
    occ = occupancy(device, lent, related)
    if taken.memoryMiB is None and taken.sharePercent == 100:
        return DevicePick(device, taken, 0, True) if occ.empty else None
    if occ.exclusive:
        return None
    if device.memoryMiB is not None and occ.memoryMiB + (taken.memoryMiB or 0) > device.memoryMiB:
        return None
    if occ.sharePercent + taken.sharePercent > 100:
        return None
    left = (device.memoryMiB or 0) - occ.memoryMiB - (taken.memoryMiB or 0)
    return DevicePick(device, taken, max(0, left), occ.empty)


def _pick_rank(pick: DevicePick, preferred: set[tuple[str, str]]) -> tuple[object, ...]:
    return ((pick.device.node, pick.device.name) not in preferred, pick.left_mib, pick.device.name)


# ------------------------------------------------------------------------- the claim's allocation


def consumed(device: Device, memory: Quantity | None) -> dict[str, str]:
    """The allocation result's ``consumedCapacity`` of a claim from the template on a shareable device,
    as the DRA allocator writes it (KEP-5075): each capacity with a requestPolicy or requested — the
    memory request rounded by its policy, the share's default; nothing on a device that cannot be shared."""
    if not device.allowMultipleAllocations or memory is None:
        return {}
    out: dict[str, str] = {}
    for name, raw in device.capacity.items():
        bare = name.rpartition("/")[2]
        policy = device.capacityPolicies.get(name)
        if bare == MEMORY:
            amount = consumed_capacity(memory.value, Quantity.of(raw).value, policy)
        elif policy is not None or bare == SHARE_PERCENT:
            amount = consumed_capacity(None, Quantity.of(raw).value, policy)
        else:
            continue
        if amount is not None:
            out[name] = _quantity_text(amount, bare == MEMORY)
    return out


def _quantity_text(amount: Fraction, memory: bool) -> str:
    whole = math.ceil(amount)
    if memory and whole % MIB == 0:
        return f"{whole // MIB}Mi"
    return str(whole)


def allocation_status(placement: ReplicaPlacement, memory: Quantity | None, share_ids: Sequence[str]) -> dict[str, Any]:
    """``status.allocation`` of the claim placed: a result per device (``shareID`` on a shareable device:
    one of ``share_ids``, fresh UUIDs the caller makes) and the node selector of a node-local pool."""
    results = []
    for pick, share_id in zip(placement.picks, share_ids, strict=False):
        device = pick.device
        result: dict[str, Any] = {
            "request": placement.request,
            "driver": device.driver,
            "pool": device.pool or device.node,
            "device": device.name,
        }
        capacity = consumed(device, memory)
        if device.allowMultipleAllocations:
            result["shareID"] = share_id
        if capacity:
            result["consumedCapacity"] = capacity
        results.append(result)
    return {
        "allocation": {
            "devices": {"results": results},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [placement.node]}]}
                ]
            },
        }
    }


def memory_of(placement: ReplicaPlacement, request: ReplicaRequest) -> Quantity | None:
    """The memory request of the alternative the placement met."""
    sub = placement.request.partition("/")[2] or None
    for alt in request.alternatives:
        if alt.name == sub:
            return alt.memory
    return None


__all__ = [
    "Alternative",
    "DevicePick",
    "NoPlace",
    "ReplicaPlacement",
    "ReplicaRequest",
    "UnreadableClaimError",
    "allocation_status",
    "consumed",
    "memory_of",
    "place_replica",
    "replica_request",
]
