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

import math
from collections.abc import Iterable, Sequence
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
        source_rank = {RecipeSource.COMPILED: 0, RecipeSource.PRESET: 1, RecipeSource.FALLBACK: 2}
        return (
            source_rank[self.choice.source],
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

    slots = _placement_stage(request, policy, book, trace)
    if not slots:
        return _refuse(Reason.PLACEMENT_UNDECIDABLE, _undecidable_message(request, policy, trace))

    choices = _runtime_stage(request, book, slots, trace)
    runnable = [s for s in slots if s.family in choices]
    if not runnable:
        problems = {f.problem for f in trace.recipeFailures}
        reason = (
            Reason.QUANTIZATION_MISMATCH
            if RecipeProblem.QUANTIZATION in problems
            else Reason.NO_COMPATIBLE_RUNTIME_AVAILABLE
        )
        return _refuse(reason, _runtime_message(request, reason, trace))

    feasible, sized_classes = _fit_stage(request, policy, inventory, runnable, choices, trace)
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


def _placement_stage(request: PlanningRequest, policy: EffectivePolicy, book: RecipeBook, trace: _Trace) -> list[Slot]:
    inventory = request.inventory
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
    request: PlanningRequest, book: RecipeBook, slots: list[Slot], trace: _Trace
) -> dict[str | None, RecipeChoice]:
    choices: dict[str | None, RecipeChoice] = {}
    # One recipe per hardware family, in the order the families first appear.
    for family in dict.fromkeys(s.family for s in slots):
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
        resolution = resolve_recipe(book, family, request.facts, fallback_enabled=request.runtimeFallback.enabled)
        if resolution.choice is not None:
            choices[family] = resolution.choice
        elif resolution.failure is not None:
            trace.recipeFailures.append(resolution.failure)
    return choices


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
    inventory: InventorySnapshot,
    slots: list[Slot],
    choices: dict[str | None, RecipeChoice],
    trace: _Trace,
) -> tuple[list[Candidate], set[str]]:
    current = request.currentPlan
    own = own_allocations(
        inventory,
        request.holder,
        held_node=current.nodeName if current else None,
        held_devices=current.deviceNames if current else (),
        held_share_percent=current.sharePercent if current else None,
        held_memory_mib=current.memoryRequestMiB if current else None,
    )
    feasible: list[Candidate] = []
    sized_classes: set[str] = set()
    related = related_devices(inventory)
    occupancies = {
        d.key: occupancy(d, own, related.get(d.key, ())) for d in {s.device.key: s.device for s in slots}.values()
    }

    # Devices that may work together in tensor parallel: one class, one node, one product, whole devices.
    groups: dict[tuple[object, ...], list[Slot]] = {}
    for slot in slots:
        d = slot.device
        groups.setdefault(
            (slot.deviceClass, d.node, d.productName, d.memoryMiB, d.placement, slot.family, slot.mode), []
        ).append(slot)

    for group in groups.values():
        first = group[0]
        choice = choices[first.family]
        sizes = tensor_parallel_sizes(policy.maxAcceleratorCount)
        if first.device.placement is not PlacementType.WHOLE_DEVICE:
            # A process sees one MIG partition: vLLM cannot span partitions.
            sizes = [1]
        # The fewest devices of the group that hold the model; more only when fewer are too small.
        fitting: tuple[int, int, ShareDecision] | None = None
        tried: tuple[int, ShareDecision] | None = None
        for n in (n for n in sizes if n <= len(group)):
            need = math.ceil(choice.needMiB / n)
            share = _decide_share(first.device, first.mode, need, policy)
            tried = (need, share)
            if share.admitsNeed:
                fitting = (n, need, share)
                break
        if fitting is None:
            if tried is not None:
                trace.tooSmall.extend((s.deviceClass, s.device, tried[0], tried[1]) for s in group)
            continue
        n, need, share = fitting
        sized_classes.add(first.deviceClass)
        with_room = [s for s in group if _has_room(s.device, occupancies[s.device.key], share, need)]
        if len(with_room) < n:
            trace.busy.extend((s.deviceClass, s.device) for s in group)
            continue
        feasible.extend(_candidates(with_room, n, share, need, choice, occupancies, own))
    return feasible, sized_classes


def _candidates(
    with_room: Sequence[Slot],
    n: int,
    share: ShareDecision,
    need: int,
    choice: RecipeChoice,
    occupancies: dict[str, Occupancy],
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
