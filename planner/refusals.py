"""Why a plan is refused: what each stage saw (the trace) and the reason and message it gives. Pure.

The reason names the furthest stage any candidate reached (see ``planner.planning``); the message
says what the search met on the way, for the person reading the order's status.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from inference_api.plan import LaunchPlanRequest, PlanOutcome, PlanRefusal
from inference_api.reasons import Reason
from inference_api.types import PlacementType
from planner.cel_selectors import SelectorError
from planner.inventory import Device
from planner.nodes import NodeProblem
from planner.policy import EffectivePolicy
from planner.recipes import RecipeChoice, RecipeFailure, RecipeProblem
from planner.share import ShareDecision


@dataclass
class Trace:
    """What each stage saw, for the refusal message."""

    # Stage 1: the class names no device class and the cluster publishes none.
    noDeviceClasses: bool = False
    missingClasses: list[str] = field(default_factory=list)
    undecidable: list[SelectorError] = field(default_factory=list)
    emptyClasses: list[str] = field(default_factory=list)
    # DeviceClass → placement types of the devices it selects that the class does not allow.
    filteredOut: dict[str, set[PlacementType]] = field(default_factory=dict)
    # Stage 2.
    recipeFailures: list[RecipeFailure] = field(default_factory=list)
    # Stages 3 and 4.
    tooSmall: list[tuple[str, Device, int, ShareDecision]] = field(default_factory=list)
    busy: list[tuple[str, Device]] = field(default_factory=list)
    # Groups of slots (each with .deviceClass and .device) every one of which is busy: kept whole, the
    # slots are listed only when a refusal message counts them (``busy_devices``).
    busyGroups: list[Sequence[Any]] = field(default_factory=list)
    # Node name → why the scheduler would not bind the replica's pod there (``planner.nodes``).
    nodeProblems: dict[str, NodeProblem] = field(default_factory=dict)
    # How the chosen candidate won (fragmentation, best fit), for logs and the plan's explanation.
    choice: str | None = None

    def busy_devices(self) -> dict[str, Device]:
        """The devices found busy, by key."""
        found = {d.key: d for _, d in self.busy}
        for group in self.busyGroups:
            for slot in group:
                found.setdefault(slot.device.key, slot.device)
        return found


def refuse(reason: Reason, message: str) -> PlanOutcome:
    return PlanOutcome(refusal=PlanRefusal(reason=reason, message=message))


# ---------------------------------------------------------------------- stage 1


def undecidable_refusal(request: LaunchPlanRequest, policy: EffectivePolicy, trace: Trace) -> PlanOutcome:
    """Nothing to try from the start: PlacementUndecidable."""
    subject = f"class {request.className}" if request.className else "the class"
    parts: list[str] = []
    if trace.noDeviceClasses:
        parts.append("the cluster publishes no DeviceClass")
    if trace.missingClasses:
        parts.append(f"allowed device class(es) {join(trace.missingClasses)} do not exist in the cluster")
    parts.extend(str(e) for e in trace.undecidable)
    if trace.emptyClasses:
        parts.append(f"DeviceClass(es) {join(trace.emptyClasses)} select no device")
    allowed = join(sorted(p.value for p in policy.placementTypes))
    for name, placements in trace.filteredOut.items():
        parts.append(
            f"DeviceClass {name} selects {join(sorted(p.value for p in placements))} devices, "
            f"the class allows {allowed} placement only"
        )
    return refuse(
        Reason.PLACEMENT_UNDECIDABLE,
        f"No placement can be judged for {subject}: " + "; ".join(parts or ["nothing to try"]) + ". "
        "Waiting will not help: an administrator needs to fix the device classes or the selector "
        "expressions the class allows.",
    )


# ---------------------------------------------------------------------- stage 2


def runtime_refusal(request: LaunchPlanRequest, trace: Trace) -> PlanOutcome:
    """No family in play has a recipe: QuantizationMismatch when one failed over the model's
    quantization, NoCompatibleRuntimeAvailable otherwise."""
    problems = {f.problem for f in trace.recipeFailures}
    reason = (
        Reason.QUANTIZATION_MISMATCH
        if RecipeProblem.QUANTIZATION in problems
        else Reason.NO_COMPATIBLE_RUNTIME_AVAILABLE
    )
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
    return refuse(
        reason, f"No runtime recipe fits {request.facts.modelName} on the hardware the class allows: {details}. {ask}"
    )


# ---------------------------------------------------------------------- stage 3+4


def fit_refusal(
    request: LaunchPlanRequest,
    policy: EffectivePolicy,
    choices: dict[str | None, RecipeChoice],
    sized_classes: set[str],
    trace: Trace,
) -> PlanOutcome:
    """Nothing fits: NoAcceleratorWithEnoughMemory when no device holds the model even empty;
    NoCapacity when the devices that could hold it all belong to one device class;
    ResourceClaimExhausted when they span several."""
    if not sized_classes:
        return refuse(Reason.NO_ACCELERATOR_WITH_ENOUGH_MEMORY, _memory_message(request, policy, choices, trace))
    if len(sized_classes) == 1:
        return refuse(Reason.NO_CAPACITY, _capacity_message(request, choices, sized_classes, trace, exhausted=False))
    return refuse(
        Reason.RESOURCE_CLAIM_EXHAUSTED, _capacity_message(request, choices, sized_classes, trace, exhausted=True)
    )


def _memory_message(
    request: LaunchPlanRequest, policy: EffectivePolicy, choices: dict[str | None, RecipeChoice], trace: Trace
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
    request: LaunchPlanRequest,
    choices: dict[str | None, RecipeChoice],
    sized_classes: set[str],
    trace: Trace,
    *,
    exhausted: bool,
) -> str:
    model = request.facts.modelName
    busy = trace.busy_devices()
    need = _needs(choices)
    classes = join(sorted(sized_classes))
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


_PROBLEM_TEXT = {
    NodeProblem.MISSING: "not a node the planner knows (not listed)",
    NodeProblem.NOT_READY: "not Ready (its Ready condition is not True)",
    NodeProblem.CORDONED: "cordoned (spec.unschedulable)",
    NodeProblem.SELECTOR: "not matched by the module's workload.nodeSelector",
    NodeProblem.TAINTED: "a NoSchedule/NoExecute taint the module's workloads do not tolerate",
    NodeProblem.PODS: "no pod slot left",
    NodeProblem.CPU: "not enough allocatable CPU left",
    NodeProblem.MEMORY: "not enough allocatable memory left",
}


def node_refusal(request: LaunchPlanRequest, trace: Trace, cpu_milli: int, memory_mib: int) -> PlanOutcome:
    """Devices have room, but no node holding them can take the replica's pod: NoSchedulableNode."""
    by_problem: dict[NodeProblem, list[str]] = {}
    for node, problem in sorted(trace.nodeProblems.items()):
        by_problem.setdefault(problem, []).append(node)
    parts = []
    for problem, nodes in by_problem.items():
        shown = join(nodes[:5]) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")
        parts.append(f"{_PROBLEM_TEXT[problem]}: {shown}")
    cpu = f"{cpu_milli / 1000:g}" if cpu_milli % 1000 == 0 else f"{cpu_milli}m"
    return refuse(
        Reason.NO_SCHEDULABLE_NODE,
        f"Accelerators with room for {request.facts.modelName} exist, but no node holding them can take the "
        f"replica's pod (it requests {cpu} CPU and {_gib(memory_mib)} of memory): "
        + "; ".join(parts)
        + ". The order waits and is planned again when a node has room; ask your administrator for node "
        "capacity, a toleration in the module settings (workload.tolerations) or to uncordon a node." + _notes(trace),
    )


# ---------------------------------------------------------------------- texts


def _notes(trace: Trace) -> str:
    """What else the search met, so a capacity or memory refusal does not hide a broken class or family."""
    notes = ""
    if trace.undecidable:
        notes += " Not tried, their selectors cannot be judged: " + join(e.device_class for e in trace.undecidable)
        notes += "."
    if trace.recipeFailures:
        notes += " Not usable: " + "; ".join(dict.fromkeys(f.message for f in trace.recipeFailures)) + "."
    return notes


def _needs(choices: dict[str | None, RecipeChoice]) -> str:
    """ "24.0 GiB (compiled recipe, hopper); 18.9 GiB (fallback recipe, turing)" """
    grouped: dict[tuple[int, str], list[str]] = {}
    for c in choices.values():
        grouped.setdefault((c.needMiB, c.source.value), []).append(c.family)
    return "; ".join(f"{_gib(mib)} ({source} recipe, {join(fams)})" for (mib, source), fams in grouped.items())


def _gib(mib: float) -> str:
    return f"{mib / 1024:.1f} GiB"


def join(items: Iterable[str]) -> str:
    return ", ".join(items)
