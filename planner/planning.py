"""F2-09 launch planning: one order, one inventory snapshot, one outcome. Pure: no I/O, no clock.

The plan is chosen in four stages; a refusal names the furthest stage any candidate reached.

1. Placement — device classes the class allows (its allow-list ∩ the cluster's DeviceClasses, all
   of them without a list), the devices their CEL selectors choose, the placement types and sharing
   modes allowed. Nothing left → PlacementUndecidable: there was nothing to try from the start.
2. Runtime — a recipe per hardware family of those devices: compiled, preset, or (runtime fallback
   enabled) synthesized. No family has one → QuantizationMismatch when a family cannot run the
   model's quantization, NoCompatibleRuntimeAvailable otherwise.
3. Size — the share rule (phase 2.4) on each device, with up to maxAcceleratorCount devices of one
   node in tensor parallel when one is too small. Nothing holds the model even empty →
   NoAcceleratorWithEnoughMemory.
4. Capacity — what other orders already hold. Every device that could hold the model is taken →
   NoCapacity when the devices that could hold it all belong to ONE device class (waiting for a
   neighbour on that class is the answer), ResourceClaimExhausted when they span SEVERAL allowed
   device classes (the search crossed every class it was allowed to try and came up empty:
   capacity has to be found or freed).

Among the candidates that fit, the plan prefers, in order: a compiled recipe over a preset over the
fallback; fewer devices; a shared placement over a dedicated one; the device the order already holds
(a replan does not move a serving order for nothing); the device with the least free memory that
still fits (best fit, so two half-card orders land on one card); the least memory assigned beyond
the need; then names, so the outcome is deterministic.
"""

from __future__ import annotations

import bisect
import math
import threading
import weakref
from collections import ChainMap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import Field

from inference_api.plan import LaunchPlan, LaunchPlanRequest, PlanOutcome, PlanRefusal, RecipeSource
from inference_api.reasons import Reason
from inference_api.types import AcceleratorPolicy, PlacementType, SharingMode
from planner.cel_selectors import SelectorError, select_devices
from planner.inventory import (
    AllocationId,
    Device,
    InventorySnapshot,
    Occupancy,
    allocations_by_holder,
    occupancy,
    own_allocations,
    related_devices,
)
from planner.model_facts import (
    estimate_cpu,
    estimate_memory_gib,
    estimate_model_volume_gib,
    weights_gib,
)
from planner.recipes import (
    RecipeBook,
    RecipeChoice,
    RecipeFailure,
    RecipeProblem,
    RecipeResolution,
    load_recipe_book,
    render_recipe,
    resolve_recipe,
)
from planner.share import ShareDecision, assign_share


class PlanningRequest(LaunchPlanRequest):
    """What the planning function judges: the F2-09 body plus the planner's inventory snapshot."""

    inventory: InventorySnapshot = Field(default_factory=InventorySnapshot)


# ------------------------------------------------------------------------ policy


@dataclass(frozen=True)
class EffectivePolicy:
    """The class's acceleratorPolicy with its defaults applied."""

    deviceClasses: tuple[str, ...] | None
    sharingModes: frozenset[SharingMode]
    placementTypes: frozenset[PlacementType]
    maxAcceleratorCount: int
    minSharePercent: int | None
    maxSharePercent: int | None


def effective_policy(policy: AcceleratorPolicy | None) -> EffectivePolicy:
    """No policy: one whole, dedicated device per replica. Empty lists mean what the CRD says:
    every device class; Dedicated only; WholeDevice only. No maxAcceleratorCount: one device."""
    if policy is None:
        return EffectivePolicy(None, frozenset({SharingMode.DEDICATED}), frozenset({PlacementType.WHOLE_DEVICE}), 1,
                               None, None)  # fmt: skip
    return EffectivePolicy(
        deviceClasses=tuple(policy.allowedDeviceClasses) if policy.allowedDeviceClasses else None,
        sharingModes=frozenset(policy.allowedSharingModes or [SharingMode.DEDICATED]),
        placementTypes=frozenset(policy.allowedPlacementTypes or [PlacementType.WHOLE_DEVICE]),
        maxAcceleratorCount=policy.maxAcceleratorCount or 1,
        minSharePercent=policy.minSharePercent,
        maxSharePercent=policy.maxSharePercent,
    )


def sharing_mode_for(device: Device, modes: frozenset[SharingMode]) -> SharingMode:
    """Shared when the class allows it and the device can be shared (or Dedicated is not allowed, in
    which case the share rule gives the whole device anyway); Dedicated otherwise."""
    if SharingMode.SHARED in modes and (device.allowMultipleAllocations or SharingMode.DEDICATED not in modes):
        return SharingMode.SHARED
    return SharingMode.DEDICATED


def tensor_parallel_sizes(max_count: int) -> list[int]:
    """vLLM splits attention heads evenly across devices: powers of two are the sizes that divide the
    head counts of practically every model."""
    sizes, n = [], 1
    while n <= max_count:
        sizes.append(n)
        n *= 2
    return sizes


# -------------------------------------------------------------------- candidates


@dataclass(frozen=True)
class Slot:
    """A device a class selects, with the sharing mode the order would have on it."""

    deviceClass: str
    device: Device
    family: str | None
    mode: SharingMode
    # Position of the class in the allow-list (the administrator's order of preference), or in the
    # cluster's list when the class names none.
    classOrder: int = 0


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


@dataclass
class _Trace:
    """What each stage saw, for the refusal message."""

    missingClasses: list[str] = field(default_factory=list)
    undecidable: list[SelectorError] = field(default_factory=list)
    emptyClasses: list[str] = field(default_factory=list)
    # DeviceClass → placement types of the devices it selects that the class does not allow.
    filteredOut: dict[str, set[PlacementType]] = field(default_factory=dict)
    recipeFailures: list[RecipeFailure] = field(default_factory=list)
    tooSmall: list[tuple[str, Device, int, ShareDecision]] = field(default_factory=list)
    busy: list[tuple[str, Device]] = field(default_factory=list)


def _gib(mib: float) -> str:
    return f"{mib / 1024:.1f} GiB"


def _free_mib(device: Device, occ: Occupancy) -> float:
    # Unknown memory ranks last: best fit cannot judge it.
    return math.inf if device.memoryMiB is None else device.memoryMiB - occ.memoryMiB


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


# ------------------------------------------------------------------ the function


def plan_launch(request: PlanningRequest, recipes: RecipeBook | None = None) -> PlanOutcome:
    """Plan one order on one inventory snapshot. ``recipes`` defaults to the shipped tables."""
    book = recipes or load_recipe_book()
    policy = effective_policy(request.acceleratorPolicy)
    inventory = request.inventory
    trace = _Trace()

    index = _index(inventory)
    placement = index.placement(policy, book)
    placement.replay(trace)
    slots = placement.slots
    if not slots:
        return _refuse(Reason.PLACEMENT_UNDECIDABLE, _undecidable_message(request, policy, trace))

    choices = _runtime_stage(request, book, slots, placement.families, trace)
    runnable = [g for g in placement.shapes if g.family in choices]
    if not runnable:
        problems = {f.problem for f in trace.recipeFailures}
        reason = (
            Reason.QUANTIZATION_MISMATCH
            if RecipeProblem.QUANTIZATION in problems
            else Reason.NO_COMPATIBLE_RUNTIME_AVAILABLE
        )
        return _refuse(reason, _runtime_message(request, reason, trace))

    feasible, sized_classes = _fit_stage(request, policy, index, runnable, choices, trace)
    if feasible:
        best = min(feasible, key=Candidate.rank)
        return PlanOutcome(plan=_launch_plan(best))
    if not sized_classes:
        return _refuse(Reason.NO_ACCELERATOR_WITH_ENOUGH_MEMORY, _memory_message(request, policy, choices, trace))
    if len(sized_classes) == 1:
        return _refuse(Reason.NO_CAPACITY, _capacity_message(request, choices, sized_classes, trace, exhausted=False))
    return _refuse(
        Reason.RESOURCE_CLAIM_EXHAUSTED, _capacity_message(request, choices, sized_classes, trace, exhausted=True)
    )


def _refuse(reason: Reason, message: str) -> PlanOutcome:
    return PlanOutcome(refusal=PlanRefusal(reason=reason, message=message))


# ---------------------------------------------------------------------- stage 1


def _placement_stage(
    inventory: InventorySnapshot, policy: EffectivePolicy, book: RecipeBook, trace: _Trace
) -> list[Slot]:
    if policy.deviceClasses is None:
        classes = list(inventory.deviceClasses)
    else:
        classes = []
        for name in policy.deviceClasses:
            found = inventory.device_class(name)
            if found is None:
                trace.missingClasses.append(name)
            else:
                classes.append(found)

    slots: list[Slot] = []
    for order, device_class in enumerate(classes):
        selection = select_devices(device_class, inventory.devices)
        if selection.error is not None:
            trace.undecidable.append(selection.error)
            continue
        if not selection.devices:
            trace.emptyClasses.append(device_class.name)
            continue
        for device in selection.devices:
            if device.placement not in policy.placementTypes:
                trace.filteredOut.setdefault(device_class.name, set()).add(device.placement)
                continue
            family = book.hardware_family(device.hardwareFamily, device.productName)
            mode = sharing_mode_for(device, policy.sharingModes)
            slots.append(Slot(device_class.name, device, family, mode, order))
    return slots


# ------------------------------------------------------------- the snapshot index


@dataclass
class _Group:
    """Devices that may work together in tensor parallel: one class, one node, one product, whole
    devices."""

    slots: list[Slot]
    family: str | None


@dataclass
class _Shape:
    """The groups of one class, product, memory, placement, family and sharing mode, across nodes.
    One device of any of them is the same candidate but for the node and the device, so a one-device
    plan looks for the best fit over all of them at once: ``byFree`` holds their slots by (free memory,
    node, name) as the snapshot leaves them, ``frees`` the free memory alone, so that a search starts
    where the model fits."""

    groups: list[_Group]
    family: str | None
    byKey: dict[str, Slot]
    byFree: list[tuple[float, str, str, Slot]]
    frees: list[float]

    @property
    def first(self) -> Slot:
        return self.groups[0].slots[0]


@dataclass
class _Placement:
    """Stage 1 for one (snapshot, policy, recipe book): the slots, their groups, what the trace saw."""

    book: RecipeBook
    slots: list[Slot]
    shapes: list[_Shape]
    trace: _Trace
    # The hardware families of the slots, in the order they first appear.
    families: list[str | None]

    def replay(self, trace: _Trace) -> None:
        trace.missingClasses.extend(self.trace.missingClasses)
        trace.undecidable.extend(self.trace.undecidable)
        trace.emptyClasses.extend(self.trace.emptyClasses)
        for name, placements in self.trace.filteredOut.items():
            trace.filteredOut.setdefault(name, set()).update(placements)


class _SnapshotIndex:
    """What plans against one snapshot share: devices by key, allocations by holder, silicon relations,
    occupancy with no allocation of the order's own, and stage 1 per policy. A planner service plans
    many orders against one snapshot between inventory changes; each then costs its own part only.
    A snapshot is read, never changed, once planned against (the adapter reads a new one each time)."""

    def __init__(self, snapshot: InventorySnapshot) -> None:
        self.snapshot = weakref.ref(snapshot)
        self.byKey = {d.key: d for d in snapshot.devices}
        # Built on the second plan: one plan scans for its holder faster than the index is built.
        self._byHolder: dict[str, list[AllocationId]] | None = None
        self._holderScans = 0
        self.related = related_devices(snapshot)
        self.base = {d.key: occupancy(d, frozenset(), self.related.get(d.key, ())) for d in snapshot.devices}
        self._placements: dict[tuple[object, ...], _Placement] = {}
        self._lock = threading.Lock()

    def by_holder(self) -> dict[str, list[AllocationId]] | None:
        """Holder → its allocations; None (scan the snapshot) on the first plan."""
        if self._byHolder is None:
            self._holderScans += 1
            if self._holderScans == 1:
                return None
            snapshot = self.snapshot()
            assert snapshot is not None
            self._byHolder = allocations_by_holder(snapshot)
        return self._byHolder

    def placement(self, policy: EffectivePolicy, book: RecipeBook) -> _Placement:
        key = (policy.deviceClasses, policy.placementTypes, policy.sharingModes, id(book))
        with self._lock:
            found = self._placements.get(key)
        if found is not None and found.book is book:
            return found
        snapshot = self.snapshot()
        assert snapshot is not None
        trace = _Trace()
        slots = _placement_stage(snapshot, policy, book, trace)
        grouped: dict[tuple[object, ...], list[Slot]] = {}
        for slot in slots:
            d = slot.device
            grouped.setdefault(
                (slot.deviceClass, d.node, d.productName, d.memoryMiB, d.placement, slot.family, slot.mode), []
            ).append(slot)
        by_shape: dict[tuple[object, ...], list[_Group]] = {}
        for (device_class, _node, *rest), members in grouped.items():
            # The share is decided on a group's first device: shapes keep that device's sharing too.
            shape_key = (device_class, *rest, members[0].device.allowMultipleAllocations)
            by_shape.setdefault(shape_key, []).append(_Group(members, members[0].family))
        shapes = []
        for shape_groups in by_shape.values():
            members = [s for g in shape_groups for s in g.slots]
            by_free = sorted(
                (_free_mib(s.device, self.base[s.device.key]), s.device.node, s.device.name, s) for s in members
            )
            shapes.append(
                _Shape(
                    shape_groups,
                    shape_groups[0].family,
                    {s.device.key: s for s in members},
                    by_free,
                    [f for f, _, _, _ in by_free],
                )
            )
        found = _Placement(book, slots, shapes, trace, list(dict.fromkeys(s.family for s in slots)))
        with self._lock:
            self._placements[key] = found
        return found


_INDEXES: dict[int, _SnapshotIndex] = {}
_INDEXES_LOCK = threading.Lock()


def _forget(key: int) -> None:
    with _INDEXES_LOCK:
        _INDEXES.pop(key, None)


def _index(snapshot: InventorySnapshot) -> _SnapshotIndex:
    """The snapshot's index, built on its first plan and dropped with the snapshot."""
    key = id(snapshot)
    with _INDEXES_LOCK:
        found = _INDEXES.get(key)
    if found is not None and found.snapshot() is snapshot:
        return found
    built = _SnapshotIndex(snapshot)
    with _INDEXES_LOCK:
        _INDEXES[key] = built
    weakref.finalize(snapshot, _forget, key)
    return built


def _undecidable_message(request: PlanningRequest, policy: EffectivePolicy, trace: _Trace) -> str:
    subject = f"class {request.className}" if request.className else "the class"
    parts: list[str] = []
    if policy.deviceClasses is None and not request.inventory.deviceClasses:
        parts.append("the cluster publishes no DeviceClass")
    if trace.missingClasses:
        parts.append(f"allowed device class(es) {_join(trace.missingClasses)} do not exist in the cluster")
    parts.extend(str(e) for e in trace.undecidable)
    if trace.emptyClasses:
        parts.append(f"DeviceClass(es) {_join(trace.emptyClasses)} select no device")
    allowed = _join(sorted(p.value for p in policy.placementTypes))
    for name, placements in trace.filteredOut.items():
        parts.append(
            f"DeviceClass {name} selects {_join(sorted(p.value for p in placements))} devices, "
            f"the class allows {allowed} placement only"
        )
    return (
        f"No placement can be judged for {subject}: " + "; ".join(parts or ["nothing to try"]) + ". "
        "Waiting will not help: an administrator needs to fix the device classes or the selector "
        "expressions the class allows."
    )


# ---------------------------------------------------------------------- stage 2


def _runtime_stage(
    request: PlanningRequest, book: RecipeBook, slots: list[Slot], families: Sequence[str | None], trace: _Trace
) -> dict[str | None, RecipeChoice]:
    """``families``: those of the slots, in the order they first appear."""
    choices: dict[str | None, RecipeChoice] = {}
    # One recipe per hardware family, in the order the families first appear.
    for family in families:
        if family is None:
            products = sorted({s.device.productName or "unknown product" for s in slots if s.family is None})
            trace.recipeFailures.append(
                RecipeFailure(
                    RecipeProblem.NO_RUNTIME,
                    "unknown",
                    f"the hardware family of {_join(products)} is unknown, so no runtime is known for it",
                )
            )
            continue
        resolution = _resolve(book, family, request)
        if resolution.choice is not None:
            choices[family] = resolution.choice
        elif resolution.failure is not None:
            trace.recipeFailures.append(resolution.failure)
    return choices


# Recipe resolutions by (book, family, facts, fallback): a pure function of them, and the larger part
# of a plan's cost once the snapshot is indexed. RecipeChoice is frozen; rendering copies its dicts.
_RESOLUTIONS: dict[tuple[object, ...], tuple[RecipeBook, RecipeResolution]] = {}
_RESOLUTION_LIMIT = 4096


def _resolve(book: RecipeBook, family: str, request: PlanningRequest) -> RecipeResolution:
    facts = request.facts
    fallback = request.runtimeFallback.enabled
    key = (id(book), family, fallback, tuple(facts.model_dump().items()))
    found = _RESOLUTIONS.get(key)
    if found is not None and found[0] is book:
        return found[1]
    resolution = resolve_recipe(book, family, facts, fallback_enabled=fallback)
    if len(_RESOLUTIONS) >= _RESOLUTION_LIMIT:
        _RESOLUTIONS.clear()
    _RESOLUTIONS[key] = (book, resolution)
    return resolution


def _runtime_message(request: PlanningRequest, reason: Reason, trace: _Trace) -> str:
    details = "; ".join(dict.fromkeys(f.message for f in trace.recipeFailures))
    if reason is Reason.QUANTIZATION_MISMATCH:
        ask = (
            "Order a variant of the model in a quantization this hardware runs, or ask your administrator "
            "for a class with hardware that runs this one."
        )
    else:
        ask = (
            "Order a model with a compiled recipe, give the order spec.model.parameterCount when the name "
            "carries no size, or ask your administrator (runtime fallback, recipes)."
        )
    return f"No runtime recipe fits {request.facts.modelName} on the hardware the class allows: {details}. {ask}"


# ---------------------------------------------------------------------- stage 3+4


def _fit_stage(
    request: PlanningRequest,
    policy: EffectivePolicy,
    index: _SnapshotIndex,
    shapes: list[_Shape],
    choices: dict[str | None, RecipeChoice],
    trace: _Trace,
) -> tuple[list[Candidate], set[str]]:
    current = request.currentPlan
    snapshot = index.snapshot()
    assert snapshot is not None
    own = own_allocations(
        snapshot,
        request.holder,
        held_node=current.nodeName if current else None,
        held_devices=current.deviceNames if current else (),
        held_share_percent=current.sharePercent if current else None,
        held_memory_mib=current.memoryRequestMiB if current else None,
        by_holder=index.by_holder(),
        by_key=index.byKey,
    )
    # The order's own allocations change what it sees of their devices and of their related devices;
    # every other device keeps the occupancy the index holds.
    touched: dict[str, Occupancy] = {}
    for key, _ in own:
        for device in (index.byKey[key], *index.related.get(key, ())):
            if device.key not in touched:
                touched[device.key] = occupancy(device, own, index.related.get(device.key, ()))
    occupancies: Mapping[str, Occupancy] = ChainMap(touched, index.base) if touched else index.base

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
                    assert isinstance(share, ShareDecision) and isinstance(need, int)
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
    shape: _Shape,
    occupancies: Mapping[str, Occupancy],
    touched: Mapping[str, Occupancy],
    own: frozenset[AllocationId],
    share: ShareDecision,
    need: int,
) -> Slot | None:
    """The slot a one-device candidate of the shape takes: held first, then best fit, then node and
    name — every other part of the rank is the shape's. Devices the order's own allocations touch are
    judged one by one; the rest in the index's order of free memory, from the first with room."""
    best: tuple[int, float, str, str, Slot] | None = None
    for key, occ in touched.items():
        slot = shape.byKey.get(key)
        if slot is None or not _has_room(slot.device, occ, share, need):
            continue
        d = slot.device
        rank = (0 if _is_held(d, own) else 1, _free_mib(d, occ), d.node, d.name)
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
        return _free_mib(slot.device, occupancies[slot.device.key])

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


def _memory_message(
    request: PlanningRequest, policy: EffectivePolicy, choices: dict[str | None, RecipeChoice], trace: _Trace
) -> str:
    model = request.facts.modelName
    needs = _needs(choices)
    largest = max(
        (d for _, d, _, _ in trace.tooSmall if d.memoryMiB is not None),
        key=lambda d: d.memoryMiB or 0,
        default=None,
    )
    parts = [f"{model} needs {needs}"]
    if largest is not None and largest.memoryMiB is not None:
        parts.append(f"the largest device the class allows is {largest.label} with {_gib(largest.memoryMiB)}")
    clamped = [s for _, d, need, s in trace.tooSmall if d.memoryMiB is not None and need <= d.memoryMiB]
    if clamped and policy.maxSharePercent is not None:
        parts.append(f"the class caps a share at maxSharePercent {policy.maxSharePercent}")
    parts.append(
        f"at most {policy.maxAcceleratorCount} device(s) per replica (maxAcceleratorCount), "
        "devices of one node and one product"
    )
    return (
        "No accelerator the class allows is big enough, even empty: "
        + "; ".join(parts)
        + ". Order a smaller or more strongly quantized model, or ask your administrator for a class "
        "with larger devices or more devices per replica." + _notes(trace)
    )


def _capacity_message(
    request: PlanningRequest,
    choices: dict[str | None, RecipeChoice],
    sized_classes: set[str],
    trace: _Trace,
    *,
    exhausted: bool,
) -> str:
    model = request.facts.modelName
    busy = {d.key: d for _, d in trace.busy}
    need = _needs(choices)
    classes = _join(sorted(sized_classes))
    notes = _notes(trace)
    if exhausted:
        return (
            f"Every device class the order may use was tried ({classes}): {len(busy)} device(s) can hold "
            f"{model} ({need}), and other orders hold all of them. Capacity has to be freed or added — "
            f"ask your administrator.{notes}"
        )
    return (
        f"No room right now: {len(busy)} device(s) of DeviceClass {classes} can hold {model} ({need}), "
        f"and other orders hold all of them. The order waits and is planned again when capacity frees up.{notes}"
    )


# --------------------------------------------------------------------- the plan


def _launch_plan(best: Candidate) -> LaunchPlan:
    device = best.devices[0]
    choice = best.choice
    # No size known: the memory the recipe needs bounds the weights from above.
    weights = weights_gib(choice.parameters, choice.quantization) if choice.parameters else choice.needMiB / 1024
    recipe = render_recipe(
        choice, share_percent=best.share.percent, device_count=best.count, device_mib=device.memoryMiB
    )
    return LaunchPlan(
        deviceClass=best.deviceClass,
        acceleratorProductName=device.productName or "unknown",
        acceleratorMemoryGiB=round(device.memoryMiB / 1024) if device.memoryMiB is not None else 0,
        placementMode=device.placement,
        sharingMode=best.mode,
        deviceCount=best.count,
        sharePercent=best.share.percent,
        memoryRequestMiB=best.perDeviceNeedMiB if best.share.memory_request_needed else None,
        cpu=estimate_cpu(best.count),
        memory=f"{estimate_memory_gib(weights)}Gi",
        modelVolumeGiB=choice.modelVolumeGiB or estimate_model_volume_gib(weights),
        recipe=recipe,
        nodeName=device.node,
        deviceNames=[d.name for d in best.devices],
        modelMemoryMiB=best.perDeviceNeedMiB,
    )


def _notes(trace: _Trace) -> str:
    """What else the search met, so a capacity or memory refusal does not hide a broken class or family."""
    notes = ""
    if trace.undecidable:
        notes += " Not tried, their selectors cannot be judged: " + _join(e.device_class for e in trace.undecidable)
        notes += "."
    if trace.recipeFailures:
        notes += " Not usable: " + "; ".join(dict.fromkeys(f.message for f in trace.recipeFailures)) + "."
    return notes


def _needs(choices: dict[str | None, RecipeChoice]) -> str:
    """ "24.0 GiB (compiled recipe, hopper); 18.9 GiB (fallback recipe, turing)" """
    grouped: dict[tuple[int, str], list[str]] = {}
    for c in choices.values():
        grouped.setdefault((c.needMiB, c.source.value), []).append(c.family)
    return "; ".join(f"{_gib(mib)} ({source} recipe, {_join(fams)})" for (mib, source), fams in grouped.items())


def _join(items: Iterable[str]) -> str:
    return ", ".join(items)
