"""The class's scaling policy and ScalingHealthy from the order's HorizontalPodAutoscaler: pure, no I/O.

``autoscaled``, ``class_bounds`` and ``priority_class_name`` are the one reading of the class's
``scalingPolicy``: the order workflow (its scaling profile) and the workload builders
(``activities.builders.autoscaling``: the HPA, the StatefulSet, ``status.constraints``) both call them.

The condition mirrors the HPA's own conditions (True means healthy):

* the preemption workflow said the order cannot grow → False, ``ScaleUpBlocked`` (phase Degraded);
* ``AbleToScale=False`` (the HPA cannot read or write the StatefulSet's scale) → False,
  ``AutoscalerUnableToScale`` (phase Degraded: the order serves but nothing can grow it);
* ``ScalingActive=False`` (no metric to judge load by — no custom metrics API, or vLLM's queue
  metric missing) → Unknown, ``AutoscalerMetricsUnavailable``: the HPA holds the replica count
  where it is, so whether the order *would* need to grow cannot be told. Unknown keeps the
  order Ready: it serves, and nothing is known to be blocked;
* otherwise True, ``ScalingAllowed``, with the numbers and ``ScalingLimited`` in the message.
"""

from __future__ import annotations

from inference_api.preemption import ABLE_TO_SCALE, SCALING_ACTIVE, SCALING_LIMITED, ScalingObservation
from inference_api.reasons import Reason
from inference_api.types import ConditionStatus, InferenceServiceClass


def autoscaled(service_class: InferenceServiceClass | None) -> bool:
    """The class lets an order grow beyond one replica, so the order has an HPA.

    It depends on the class alone, not on a donor's lowered ceiling, so the set of objects of an
    order (and who owns ``spec.replicas``) does not flip while preemption moves capacity."""
    policy = service_class.spec.scalingPolicy if service_class is not None else None
    return policy is not None and policy.maxReplicas > 1


def class_bounds(service_class: InferenceServiceClass) -> tuple[int, int]:
    """The class's (minReplicas, maxReplicas); one replica without a scalingPolicy."""
    policy = service_class.spec.scalingPolicy
    return (policy.minReplicas, policy.maxReplicas) if policy is not None else (1, 1)


def planned_replicas(service_class: InferenceServiceClass) -> int:
    """How many replicas a plan places (and the workload pins and reserves): all of them when the class
    fixes the count (minReplicas = maxReplicas; one without a scalingPolicy); one when the autoscaler
    chooses between bounds. Reserving an autoscaled order's maxReplicas would hold capacity its idle
    replicas never use and that preemption counts on lending (a lower-priority order's replicas above
    its minimum give way to a higher one's): measured, a 1..4 order reserved all four devices of its
    class and a higher-priority order could not even be planned. So such an order's replicas are
    left to the scheduler within the plan's device class."""
    low, high = class_bounds(service_class)
    return high if low == high else 1


def priority_class_name(service_class: InferenceServiceClass) -> str | None:
    """The first allowed priority class: the class admits it, the order cannot choose."""
    policy = service_class.spec.scalingPolicy
    return policy.allowedPriorityClassNames[0] if policy is not None and policy.allowedPriorityClassNames else None


def scaling_health(
    observation: ScalingObservation | None,
    blocked: str | None,
    ceiling: int | None,
) -> tuple[ConditionStatus, Reason, str] | None:
    """ScalingHealthy's (status, reason, message), or None when there is nothing to say yet."""
    if blocked:
        return ConditionStatus.FALSE, Reason.SCALE_UP_BLOCKED, blocked
    if observation is None:
        return None
    if not observation.autoscalerFound:
        return ConditionStatus.UNKNOWN, Reason.AUTOSCALER_NOT_OBSERVED, "the HorizontalPodAutoscaler does not exist yet"
    able = observation.condition(ABLE_TO_SCALE)
    if able is not None and able.status == "False":
        return (
            ConditionStatus.FALSE,
            Reason.AUTOSCALER_UNABLE_TO_SCALE,
            f"the HorizontalPodAutoscaler reports AbleToScale=False ({able.reason}): {able.message}",
        )
    active = observation.condition(SCALING_ACTIVE)
    if active is None:
        return ConditionStatus.UNKNOWN, Reason.AUTOSCALER_NOT_OBSERVED, "the HorizontalPodAutoscaler has not reported"
    if active.status == "False":
        return (
            ConditionStatus.UNKNOWN,
            Reason.AUTOSCALER_METRICS_UNAVAILABLE,
            f"the HorizontalPodAutoscaler reports ScalingActive=False ({active.reason}) and holds "
            f"{observation.currentReplicas} replica(s): {active.message}",
        )
    message = (
        f"the autoscaler wants {observation.desiredReplicas} replica(s), runs {observation.currentReplicas} "
        f"(bounds {observation.minReplicas}..{observation.maxReplicas})"
    )
    limited = observation.condition(SCALING_LIMITED)
    if observation.wants_above_bound:
        if ceiling is not None:
            message += f"; held at maxReplicas {ceiling}, lowered by preemption for higher-priority orders"
        else:
            message += "; at the class's maxReplicas"
    elif limited is not None and limited.status == "True":
        message += f"; {limited.reason}"
    if observation.unschedulableReplicas:
        message += f"; {observation.unschedulableReplicas} replica(s) wait for capacity"
    return ConditionStatus.TRUE, Reason.SCALING_ALLOWED, message
