"""Status computation: conditions in, phase and reason out. Pure and deterministic.

Conditions follow metav1.Condition: ``lastTransitionTime`` changes only when ``status`` flips.
"""

from __future__ import annotations

from datetime import datetime

from inference_api.reasons import Reason
from inference_api.types import Condition, ConditionStatus, ConditionType, Phase

# The five conditions that answer "why is it not ready", in the order the user guide reads them.
READINESS_ORDER: tuple[ConditionType, ...] = (
    ConditionType.CLASS_RESOLVED,
    ConditionType.MODEL_RESOLVED,
    ConditionType.PLANNED,
    ConditionType.WORKLOAD_READY,
    ConditionType.READY,
)
ALL_TYPES: tuple[ConditionType, ...] = (
    *READINESS_ORDER,
    ConditionType.SCALING_HEALTHY,
    ConditionType.RUNTIME_CURRENT,
)


def rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(
    conditions: list[Condition],
    type_: ConditionType,
    status: ConditionStatus,
    reason: Reason | str,
    message: str,
    generation: int | None,
    now: datetime,
) -> list[Condition]:
    """A new list with one condition set; the transition time is kept unless the status flips."""
    previous = next((c for c in conditions if c.type == type_), None)
    transition = previous.lastTransitionTime if previous and previous.status == status else rfc3339(now)
    updated = Condition(
        type=type_,
        status=status,
        reason=str(reason),
        message=message,
        observedGeneration=generation,
        lastTransitionTime=transition,
    )
    out = [c for c in conditions if c.type != type_]
    out.append(updated)
    order = {t.value: i for i, t in enumerate(ALL_TYPES)}
    return sorted(out, key=lambda c: order.get(c.type, len(order)))


def get_condition(conditions: list[Condition], type_: ConditionType) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


def is_true(conditions: list[Condition], type_: ConditionType) -> bool:
    cond = get_condition(conditions, type_)
    return cond is not None and cond.status == ConditionStatus.TRUE


# The steps that judge the order itself against its class and its model. A serving order one of them
# refuses — its class deleted, or edited so that it would not admit the order; its model refused —
# keeps its workload, but nothing of it can change any more (no replan, no edit taken, no runtime
# upgrade) until that is fixed: its status must not read as healthy to `kubectl wait
# --for=condition=Ready`.
JUDGING_STEPS: tuple[ConditionType, ...] = (ConditionType.CLASS_RESOLVED, ConditionType.MODEL_RESOLVED)


def refused_while_serving(conditions: list[Condition]) -> Condition | None:
    """The judging step that refuses a serving order (Ready True in the run's own conditions), or None."""
    if not is_true(conditions, ConditionType.READY):
        return None
    return next(
        (c for t in JUDGING_STEPS if (c := get_condition(conditions, t)) and c.status == ConditionStatus.FALSE), None
    )


def published_conditions(conditions: list[Condition]) -> list[Condition]:
    """The conditions as the order's status shows them. The run keeps Ready True while the workload
    serves (its health, its probes); the status says Ready False, with the refusing step's reason,
    while a judging step refuses a serving order — since that step flipped, and True again from the
    moment the last of them flipped back."""
    ready = get_condition(conditions, ConditionType.READY)
    if ready is None or ready.status != ConditionStatus.TRUE:
        return conditions
    refused = refused_while_serving(conditions)
    if refused is None:
        judged = [get_condition(conditions, t) for t in JUDGING_STEPS]
        since = max([ready.lastTransitionTime, *(c.lastTransitionTime for c in judged if c is not None)])
        if since == ready.lastTransitionTime:
            return conditions
        shown = ready.model_copy(update={"lastTransitionTime": since})
    else:
        shown = ready.model_copy(
            update={
                "status": ConditionStatus.FALSE,
                "reason": refused.reason,
                "message": f"the workload still serves (its endpoint answers), but {refused.type} says no and "
                f"nothing of the order changes until it is fixed: {refused.message}",
                "lastTransitionTime": refused.lastTransitionTime,
            }
        )
    return [shown if c.type == ConditionType.READY else c for c in conditions]


def compute_phase(conditions: list[Condition]) -> tuple[Phase, str | None]:
    """Phase and the reason behind it.

    Ready: probed and serving. Degraded: serving but cannot grow (ScaleUpBlocked), or serving while
    its class or model refuses it (its published Ready says False, see ``published_conditions``).
    Failed: was Ready, then sustained API errors (ServiceUnhealthy). Pending: everything else.

    A serving order whose later step says no (a replica in trouble) stays Ready — its workload keeps
    serving — with that step's reason, so the status never says Ready with no reason while something
    is wrong.
    """
    ready = get_condition(conditions, ConditionType.READY)
    if ready is not None and ready.status == ConditionStatus.TRUE:
        refused = refused_while_serving(conditions)
        if refused is not None:
            return Phase.DEGRADED, refused.reason
        scaling = get_condition(conditions, ConditionType.SCALING_HEALTHY)
        if scaling is not None and scaling.status == ConditionStatus.FALSE:
            return Phase.DEGRADED, scaling.reason
        for type_ in READINESS_ORDER[:-1]:
            earlier = get_condition(conditions, type_)
            if earlier is not None and earlier.status == ConditionStatus.FALSE:
                return Phase.READY, earlier.reason
        planned = get_condition(conditions, ConditionType.PLANNED)
        if planned is not None and planned.reason == Reason.LAUNCH_PLAN_IN_FORCE:
            return Phase.READY, planned.reason
        runtime = get_condition(conditions, ConditionType.RUNTIME_CURRENT)
        if runtime is not None and runtime.status == ConditionStatus.FALSE:
            return Phase.READY, runtime.reason
        return Phase.READY, None
    if ready is not None and ready.reason == Reason.SERVICE_UNHEALTHY:
        return Phase.FAILED, ready.reason
    for type_ in READINESS_ORDER:
        cond = get_condition(conditions, type_)
        if cond is not None and cond.status != ConditionStatus.TRUE:
            return Phase.PENDING, cond.reason
    return Phase.PENDING, None


# Replica troubles (the observer's ``replica_trouble``), the worst first: the one an order shows when
# its replicas have several (the observer ranks them by it).
TROUBLE_SEVERITY: tuple[Reason, ...] = (
    Reason.NODE_LOST,
    Reason.CLAIM_NOT_ALLOCATABLE,
    Reason.QUOTA_EXCEEDED,
    Reason.POD_CREATION_REFUSED,
    Reason.IMAGE_PULL_FAILED,
    Reason.MODEL_DOWNLOAD_FAILED,
    Reason.RUNTIME_OOM_KILLED,
    Reason.RUNTIME_CRASH_LOOPING,
    Reason.RUNTIME_CANNOT_START,
    Reason.POD_UNSCHEDULABLE,
    Reason.NODE_NOT_READY,
    Reason.MODEL_DOWNLOADING,
    Reason.MODEL_LOADING,
)
TROUBLE_REASONS: frozenset[str] = frozenset(r.value for r in TROUBLE_SEVERITY)
_ADVICE: dict[str, str] = {
    Reason.QUOTA_EXCEEDED.value: "a ResourceQuota of the namespace refuses the order's pods: its administrator raises "
    "it (or frees room in it), or the order asks for less; the cluster makes the pods by itself once it allows them",
    Reason.POD_CREATION_REFUSED.value: "an admission policy of the cluster refuses the order's pods: its owner allows "
    "them, or the class changes; the cluster makes the pods by itself once they are allowed",
    Reason.IMAGE_PULL_FAILED.value: "the image cannot be pulled: the module administrator fixes the workload image "
    "settings (registry, tag, pull secret) or the registry; the kubelet retries the pull by itself",
    Reason.MODEL_DOWNLOAD_FAILED.value: "the model's download failed (the fetcher's last words above): for a "
    "repository that refuses it, edit spec.model of the order (the repository's name, or the token Secret it "
    "names); for a volume too small, give the model's true size (spec.model.parameterCount); a hub out of reach "
    "needs nothing; the download is tried again by itself and keeps what arrived",
    Reason.RUNTIME_OOM_KILLED.value: "the engine was killed for memory: the order needs a smaller model or a class "
    "that gives it more memory (edit the order or its class); the kubelet restarts it until then",
    Reason.RUNTIME_CRASH_LOOPING.value: "the engine exits (its last words above): fix what it refuses (the order's "
    "model or the class's runtime settings) and edit the order or its class; the kubelet restarts it until then",
    Reason.RUNTIME_CANNOT_START.value: "the engine's container cannot be created (see above): fix what it needs (a "
    "Secret, a setting); the kubelet tries again by itself",
    Reason.NODE_NOT_READY.value: "a node that stops reporting often comes back (a kubelet that missed its "
    "heartbeats, a network blip): the order keeps its placement until the time above, then plans it again away "
    "from the node (NodeLost); nothing to do meanwhile, your administrator looks after the node",
    Reason.MODEL_DOWNLOADING.value: "the engine loads it next (ModelLoading); the order serves once it answers",
    Reason.MODEL_LOADING.value: "the engine loads the model; the order serves once it answers",
}


def trouble_advice(reason: str, replan_in: float | None = None) -> str:
    """What the order does about a replica trouble and what it asks of whom (for its condition message).

    ``replan_in``: for a trouble the order moves away from, the seconds until it plans again (0: now)."""
    if replan_in is not None:
        when = "now" if replan_in <= 0 else f"in {replan_in:.0f} s"
        return f"the order plans its placement again {when}, away from what failed"
    return _ADVICE.get(reason, "the order waits for a change")
