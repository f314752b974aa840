"""F2-09 launch planning: one order, one inventory snapshot, one outcome. Pure: no I/O, no clock.

The plan is chosen in four stages; a refusal names the furthest stage any candidate reached.

1. Placement (``planner.placement``) — device classes the class allows (its allow-list ∩ the
   cluster's DeviceClasses, all of them without a list), the devices their CEL selectors choose, the
   placement types and sharing modes allowed. Nothing left → PlacementUndecidable: there was nothing
   to try from the start.
2. Runtime (``planner.recipe_choice``) — a recipe per hardware family of those devices: compiled,
   preset, or (runtime fallback enabled) synthesized. No family has one → QuantizationMismatch when a
   family cannot run the model's quantization, NoCompatibleRuntimeAvailable otherwise.
3. Size (``planner.fit``) — the share rule (phase 2.4) on each device, with up to
   maxAcceleratorCount devices of one node in tensor parallel when one is too small. Nothing holds the
   model even empty → NoAcceleratorWithEnoughMemory.
4. Capacity (``planner.fit``) — what other orders already hold. Every device that could hold the
   model is taken → NoCapacity when the devices that could hold it all belong to ONE device class
   (waiting for a neighbour on that class is the answer), ResourceClaimExhausted when they span
   SEVERAL allowed device classes (the search crossed every class it was allowed to try and came up
   empty: capacity has to be found or freed).

Refusal reasons and messages are ``planner.refusals``; the class's policy with its defaults,
``planner.policy``.

Among the candidates that fit, the plan prefers, in order: a compiled recipe over a preset over the
fallback; fewer devices; **the place that takes the least of the cluster** (``Candidate.economy``:
first the fewest devices taken whole — a device that cannot be shared, a partition or a share of 100
— then the least memory taken, a whole device counting all of its memory and a share its part of
the device's), so that an order never gets more device than it needs while a place that takes less
fits; a shared placement over a dedicated one; the device the order already holds (a replan does
not move a serving order for nothing, unless to a place that takes less); the place whose node's
expected fragmentation grows least against the kinds of order that come (``planner.fragmentation``),
then among equal growths the node first by name (the paper's scheduler's rule); the device with the
least free memory that still fits (best fit, so two half-card orders land on one card); the least
memory assigned beyond the need; then names, so the outcome is deterministic. Economy comes before
fragmentation, not weighed against it: fragmentation only chooses among places that take the same
(the same count of whole devices and the same memory: in practice devices of one size and one
share), so a fragmentation gain never buys a bigger device or a whole one.

The kinds of order the fragmentation-aware choice weighs (``recentDemands``) come from the caller, and
only a caller that knows its workload names them (the trace replay: its task list's kinds). The
planner service, the in-process planner and ``ai-inference plan`` (the dry run) name none, so each
plan is a function of the order and the inventory alone: they make the same plan from the same
cluster, whichever process or replica makes it and whatever it planned before. (The service once
weighed the kinds of its own last plans, kept in its memory: a restarted planner, a second replica
and the dry run then chose differently. Kinds derived from what the cluster holds were measured and
not kept: the inventory does not say what the holders' pods ask of their nodes or which classes their
orders allow, and without that the choice did worse than best fit on the openb trace; see
docs/planner.md.)

What is kept between plans, and what is not. Each plan builds its own snapshot index
(``planner.snapshot``) and drops it: nothing is cached per snapshot, because the planner service and
the in-process planner read a new inventory for every plan, so such a cache would never be asked
again. What is kept across plans is keyed by content and does hit in production: compiled CEL
programs (per expression text) and selector verdicts (per expression and what CEL sees of a device)
in ``planner.cel_selectors``; recipe resolutions (per recipe book, family, facts and fallback flag)
in ``planner.recipe_choice``; the recipe tables, loaded once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from inference_api.plan import LaunchPlan, LaunchPlanRequest, PlanOutcome, ReplicaPlacement
from inference_api.types import AcceleratorPolicy, PlacementType, SharingMode
from planner.bookings import Booking
from planner.fit import Candidate, Judge, PodRequests, fit
from planner.fragmentation import RecentDemand, workload_of
from planner.inventory import Device, DeviceAllocation, InventorySnapshot
from planner.model_facts import estimate_cpu, estimate_memory_gib, estimate_model_volume_gib, weights_gib
from planner.placement import place
from planner.policy import effective_policy
from planner.recipe_choice import choose_recipes
from planner.recipes import RecipeBook, load_recipe_book, render_recipe
from planner.refusals import Trace, fit_refusal, node_refusal, runtime_refusal, undecidable_refusal
from planner.snapshot import SnapshotIndex


class ExplicitDemand(BaseModel):
    """What an order asks for outright, instead of what its model's facts imply (a replayed trace's
    task): exactly ``deviceCount`` devices of one node, and the pod's CPU and memory requests."""

    model_config = ConfigDict(extra="forbid")
    deviceCount: int | None = Field(default=None, ge=1)
    cpuMilli: int | None = Field(default=None, ge=0)
    memoryMiB: int | None = Field(default=None, ge=0)


class PlanningRequest(LaunchPlanRequest):
    """What the planning function judges: the F2-09 body plus the planner's inventory snapshot, the
    tolerations the replicas' pods carry (module settings ``workload.tolerations``), the kinds of
    orders that came recently (for the fragmentation-aware choice) and, rarely, an explicit demand."""

    inventory: InventorySnapshot = Field(default_factory=InventorySnapshot)
    recentDemands: list[RecentDemand] | None = Field(
        default=None,
        description="The kinds of order the fragmentation-aware choice weighs, from a caller that knows its "
        "workload (the trace replay). None or empty: best fit alone chooses among the places that take the same.",
    )
    demand: ExplicitDemand | None = None


def features_line(plan: LaunchPlan) -> str:
    """What the plan's recipe serves besides plain chat, for the trace (and why not, where it does not)."""
    features = plan.recipe.features
    if features is None:
        return "serving features: none compiled"
    served = [
        f"tool calls ({features.toolCallParser})" if features.toolCallParser else None,
        f"reasoning ({features.reasoningParser})" if features.reasoningParser else None,
    ]
    said = ", ".join(s for s in served if s) or "no tool calls, no reasoning"
    family = f"model family {features.modelFamily}" if features.modelFamily else "no known model family"
    return f"serving features: {family}: {said}" + (f" ({features.note})" if features.note else "")


def plan_launch(request: PlanningRequest, recipes: RecipeBook | None = None) -> PlanOutcome:
    """Plan one order on one inventory snapshot. ``recipes`` defaults to the shipped tables."""
    return plan_launch_traced(request, recipes)[0]


def plan_launch_traced(request: PlanningRequest, recipes: RecipeBook | None = None) -> tuple[PlanOutcome, Trace]:
    """``plan_launch`` with what each stage saw, and why the chosen place won (``Trace.choice``).

    Several replicas (``request.replicas``): the first is planned as one order is; each next one on
    the snapshot with the earlier ones held on their devices and their pods on their nodes (as the
    service's bookings hold them), within the first's device class, and kept only when it gets the
    same device class, device count, share and memory request (the replicas share one claim template).
    The plan names every placement (``replicaPlacements``) and its ``deviceSelector`` selects all their
    devices; when fewer than asked fit, it names those that did (the workload is then not pinned:
    ``activities.builders.claim.pinned``) and the trace says so."""
    book = recipes or load_recipe_book()
    outcome, trace = _plan_one(request, book)
    if outcome.plan is None or request.replicas <= 1 or outcome.plan.nodeName is None:
        return outcome, trace
    first = outcome.plan
    placements = [ReplicaPlacement(nodeName=first.nodeName, deviceNames=first.deviceNames)]
    snapshot = request.inventory
    policy = (request.acceleratorPolicy or _DEFAULT_POLICY).model_copy(
        update={"allowedDeviceClasses": [first.deviceClass]}
    )
    previous = first
    for i in range(1, request.replicas):
        snapshot = _held(snapshot, previous, f"{request.holder or ''}#replica-{i}")
        one = request.model_copy(
            update={"inventory": snapshot, "replicas": 1, "acceleratorPolicy": policy, "preferDevice": None}
        )
        found, _ = _plan_one(one, book)
        nxt = found.plan
        if nxt is None or nxt.nodeName is None or _shape(nxt) != _shape(first):
            break
        placements.append(ReplicaPlacement(nodeName=nxt.nodeName, deviceNames=nxt.deviceNames))
        previous = nxt
    by_key = {d.key: d for d in request.inventory.devices}
    devices = list({f"{p.nodeName}/{n}": None for p in placements for n in p.deviceNames})
    selector = device_selector([by_key[k] for k in devices]) if all(k in by_key for k in devices) else None
    where = "; ".join(f"{p.nodeName}/{','.join(p.deviceNames)}" for p in placements)
    placed = f"{len(placements)} of {request.replicas} replicas placed ({where})"
    if len(placements) < request.replicas:
        placed += ": not every replica has room, so the workload is not pinned"
    trace.choice = f"{trace.choice}; {placed}" if trace.choice else placed
    plan = first.model_copy(update={"replicaPlacements": placements, "deviceSelector": selector})
    return PlanOutcome(plan=plan), trace


_DEFAULT_POLICY = AcceleratorPolicy(
    allowedSharingModes=[SharingMode.DEDICATED], allowedPlacementTypes=[PlacementType.WHOLE_DEVICE]
)


def _shape(plan: LaunchPlan) -> tuple[object, ...]:
    """What every replica of one claim template must share."""
    return (plan.deviceClass, plan.deviceCount, plan.sharePercent, plan.memoryRequestMiB, plan.cpu, plan.memory)


def _held(snapshot: InventorySnapshot, plan: LaunchPlan, holder: str) -> InventorySnapshot:
    """The snapshot with the plan's replica held on its devices (as a booking holds it: its share and
    memory on a shareable device, the whole device otherwise) and its pod's requests on its node."""
    booking = Booking.of_plan(holder, plan, 0.0)
    names = set(plan.deviceNames)
    devices = []
    for d in snapshot.devices:
        if d.node == plan.nodeName and d.name in names:
            part = (
                DeviceAllocation(holder=holder)
                if booking.memoryMiB is None or not d.allowMultipleAllocations
                else DeviceAllocation(holder=holder, sharePercent=booking.sharePercent, memoryMiB=booking.memoryMiB)
            )
            d = d.model_copy(update={"allocations": [*d.allocations, part]})
        devices.append(d)
    nodes = snapshot.nodes
    if nodes is not None:
        nodes = [
            n.model_copy(
                update={
                    "requestedCpuMilli": n.requestedCpuMilli + booking.podCpuMilli,
                    "requestedMemoryMiB": n.requestedMemoryMiB + booking.podMemoryMiB,
                    "podCount": n.podCount + 1,
                }
            )
            if n.name == plan.nodeName
            else n
            for n in nodes
        ]
    return snapshot.model_copy(update={"devices": devices, "nodes": nodes})


def _plan_one(request: PlanningRequest, book: RecipeBook) -> tuple[PlanOutcome, Trace]:
    """One replica's plan."""
    policy = effective_policy(request.acceleratorPolicy)
    trace = Trace()
    index = SnapshotIndex(request.inventory)
    workload = workload_of(request.recentDemands) if request.recentDemands else None
    demand = request.demand
    judge = Judge(
        index,
        request.tolerations,
        PodRequests(demand.cpuMilli, demand.memoryMiB) if demand else None,
        workload,
        demand.deviceCount if demand else None,
        node_selector=request.nodeSelector,
    )

    placement = place(index, policy, book, trace, by_free=judge.workload is None)
    if not placement.slots:
        return undecidable_refusal(request, policy, trace), trace

    choices = choose_recipes(request, book, placement.slots, placement.families, trace)
    runnable = [shape for shape in placement.shapes if shape.family in choices]
    if not runnable:
        return runtime_refusal(request, trace), trace

    feasible, sized_classes = fit(request, policy, index, runnable, choices, trace, judge)
    if feasible:
        ranked = sorted(feasible, key=Candidate.rank)
        best = ranked[0]
        trace.choice = explain_choice(ranked, judge.workload is not None)
        plan = _launch_plan(best, judge)
        trace.choice = f"{trace.choice}; {features_line(plan)}"
        return PlanOutcome(plan=plan), trace
    if trace.nodeProblems:
        # Would a device have room if the nodes were not judged? Then the nodes are what is missing.
        # The same choice (the shapes were built for it: no free-memory order with recent demands).
        unjudged = Judge(index, (), judge.demand, judge.workload, judge.deviceCount, judge_nodes=False)
        found, _ = fit(request, policy, index, runnable, choices, Trace(), unjudged)
        if found:
            best = min(found, key=Candidate.rank)
            pod = judge.pod(best.count, best.choice)
            return node_refusal(request, trace, pod.cpuMilli, pod.memoryMiB), trace
    return fit_refusal(request, policy, choices, sized_classes, trace), trace


def stranded_devices(snapshot: InventorySnapshot, demands: Sequence[RecentDemand]) -> float:
    """Free accelerator capacity, in devices, that the recent orders could not use where it lies: the
    nodes' expected fragmentation (``planner.fragmentation``) summed over the cluster. 0 without
    recent demands."""
    if not demands:
        return 0.0
    workload = workload_of(demands)
    if workload.empty:
        return 0.0
    index = SnapshotIndex(snapshot)
    judge = Judge(index, workload=workload)
    total = 0.0
    for node in index.byNode:
        total += judge.state(node, index.base).before
    return total / 100


# The attribute a GPU driver publishes that tells each device apart (NVIDIA's and the gpu module's).
UNIQUE_ATTRIBUTE = "uuid"


def device_selector(devices: Sequence[Device]) -> str | None:
    """The CEL expression that selects exactly these devices, by their unique attribute; None when one
    of them publishes none (the plan then cannot pin the devices, only the node)."""
    values: list[str] = []
    domains: set[str] = set()
    for device in devices:
        own = device.attributes.get(UNIQUE_ATTRIBUTE)
        qualified = device.attributes.get(f"{device.driver}/{UNIQUE_ATTRIBUTE}")
        value = own if own is not None else qualified
        if not isinstance(value, str) or not value:
            return None
        values.append(value)
        domains.add(device.driver)
    if len(domains) != 1:
        return None
    attribute = f'device.attributes["{domains.pop()}"].{UNIQUE_ATTRIBUTE}'
    if len(values) == 1:
        return f"{attribute} == {json.dumps(values[0])}"
    return f"{attribute} in [{', '.join(json.dumps(v) for v in values)}]"


def explain_choice(ranked: list[Candidate], fragmentation: bool) -> str:
    """Why the first candidate won, in one line."""
    best = ranked[0]
    where = f"{best.devices[0].node}/{','.join(d.name for d in best.devices)}"
    dearer = [c for c in ranked[1:] if c.economy > best.economy]
    more = f" ({len(dearer)} that take more were not weighed: {_taken(dearer[0])})" if dearer else ""
    if not fragmentation:
        return (
            f"{where}: best fit ({best.freeMiB:.0f} MiB free before), among {len(ranked)} place(s) that fit; "
            f"takes {_taken(best)}{more}"
        )
    runner = next(
        (c for c in ranked[1:] if c.economy == best.economy and c.devices[0].node != best.devices[0].node), None
    )
    text = (
        f"{where}: takes {_taken(best)}; the node's expected fragmentation grows by {best.fragDelta:.1f} % of a "
        f"device against the orders that come, the least among {len(ranked)} place(s) that fit{more}"
    )
    if runner is not None:
        text += f" (next: {runner.devices[0].node}, {runner.fragDelta:+.1f})"
    text += (
        f"; among equal growths the node first by name (it had {best.nodeFree:.0f} % of a device and "
        f"{best.nodeCpuFree:.0f}m CPU free)"
    )
    return text


def _taken(candidate: Candidate) -> str:
    """What a place takes of the cluster, for the trace."""
    whole, memory = candidate.economy
    what = f"{whole} whole device(s)" if whole else f"a {candidate.share.percent} % share"
    return f"{what}, {memory / 1024:.1f} GiB" if memory != float("inf") else f"{what}, memory unknown"


def _launch_plan(best: Candidate, judge: Judge) -> LaunchPlan:
    """The plan of the chosen candidate: where, how much, the rendered recipe, the estimates."""
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
        cpu=estimate_cpu(best.count) if judge.demand.cpuMilli is None else f"{judge.demand.cpuMilli}m",
        memory=f"{estimate_memory_gib(weights)}Gi" if judge.demand.memoryMiB is None else f"{judge.demand.memoryMiB}Mi",
        modelVolumeGiB=choice.modelVolumeGiB or estimate_model_volume_gib(weights),
        recipe=recipe,
        nodeName=device.node,
        deviceNames=[d.name for d in best.devices],
        deviceSelector=device_selector(best.devices),
        modelMemoryMiB=best.perDeviceNeedMiB,
    )


__all__ = [
    "ExplicitDemand",
    "PlanningRequest",
    "explain_choice",
    "features_line",
    "plan_launch",
    "plan_launch_traced",
    "stranded_devices",
]
