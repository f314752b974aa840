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
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from inference_api.plan import LaunchPlanRequest, RecipeSource
from inference_api.types import PlacementType, SharingMode
from planner.inventory import AllocationId, Device, Occupancy
from planner.placement import Shape, Slot
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

    @property
    def count(self) -> int:
        return len(self.devices)

    def rank(self) -> tuple[object, ...]:
        return (
            _SOURCE_RANK[self.choice.source],
            self.count,
            0 if self.mode is SharingMode.SHARED else 1,
            0 if self.held else 1,
            self.freeMiB,
            self.wasteMiB,
            self.classOrder,
            self.deviceClass,
            self.devices[0].node,
            tuple(d.name for d in self.devices),
        )


def fit(
    request: LaunchPlanRequest,
    policy: EffectivePolicy,
    index: SnapshotIndex,
    shapes: list[Shape],
    choices: dict[str | None, RecipeChoice],
    trace: Trace,
) -> tuple[list[Candidate], set[str]]:
    """(the candidates that fit, the device classes with a device big enough for the model)."""
    own = index.own(request.holder, request.currentPlan)
    occupancies, touched = index.occupancies(own)

    feasible: list[Candidate] = []
    sized_classes: set[str] = set()
    sizes_all = tensor_parallel_sizes(policy.maxAcceleratorCount)
    for shape in shapes:
        first = shape.first
        choice = choices[first.family]
        # One device first: when it holds the model, every group of the shape uses one device.
        single = _decide_share(first.device, first.mode, choice.needMiB, policy)
        if single.admitsNeed:
            sized_classes.add(first.deviceClass)
            best = _best_single(shape, occupancies, touched, own, single, choice.needMiB)
            if best is None:
                trace.busy.extend((s.deviceClass, s.device) for g in shape.groups for s in g.slots)
                continue
            feasible.extend(_candidates([best], 1, single, choice.needMiB, choice, occupancies, own))
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
            with_room = [s for s in group if _has_room(s.device, occupancies[s.device.key], share, need)]
            if len(with_room) < n:
                trace.busy.extend((s.deviceClass, s.device) for s in group)
                continue
            feasible.extend(_candidates(with_room, n, share, need, choice, occupancies, own))
    return feasible, sized_classes


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
    )


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
) -> Slot | None:
    """The slot a one-device candidate of the shape takes: held first, then best fit, then node and
    name — every other part of the rank is the shape's. Devices the order's own allocations touch are
    judged one by one; the rest in the shape's order of free memory, from the first with room."""
    best: tuple[int, float, str, str, Slot] | None = None
    for key, occ in touched.items():
        slot = shape.byKey.get(key)
        if slot is None or not _has_room(slot.device, occ, share, need):
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
