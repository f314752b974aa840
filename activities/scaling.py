"""The scaling watch: the order's HPA and its replicas, polled inside one heartbeating activity.

Polling inside one activity keeps the order's history small: the activity returns only when
what it sees differs from what the workflow last saw (:meth:`ScalingObservation.signature`,
numbers and condition reasons, not the HPA's live messages) or after ``maxDurationSeconds``.
The parsing is pure (objects as the API server returns them, camelCase dicts) so it is tested
without a cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from inference_api.preemption import HpaCondition, ScalingObservation


def pod_is_placed(pod: Mapping[str, Any]) -> bool:
    """Bound to a node and not going away: the replica holds its devices."""
    meta = pod.get("metadata") or {}
    return bool((pod.get("spec") or {}).get("nodeName")) and not meta.get("deletionTimestamp")


def pod_is_unschedulable(pod: Mapping[str, Any]) -> bool:
    """Pending because the scheduler found no node for it (PodScheduled=False, Unschedulable)."""
    status = pod.get("status") or {}
    if status.get("phase") != "Pending" or (pod.get("spec") or {}).get("nodeName"):
        return False
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in status.get("conditions") or []
    )


def priority_value(name: str | None, priority_classes: Iterable[Mapping[str, Any]]) -> int:
    """The value of the PriorityClass ``name`` among ``priority_classes`` (as the API server returns
    them); without a name, the global default's value, else 0 — as Kubernetes resolves a pod's
    priority. A name that is not there counts 0."""
    classes = list(priority_classes)
    if name:
        found = next((c for c in classes if (c.get("metadata") or {}).get("name") == name), None)
        return int((found or {}).get("value") or 0)
    for item in classes:
        if item.get("globalDefault"):
            return int(item.get("value") or 0)
    return 0


def scaling_observation(
    hpa: Mapping[str, Any] | None, pods: Iterable[Mapping[str, Any]], priority: int
) -> ScalingObservation:
    pods = list(pods)
    placed = sum(1 for p in pods if pod_is_placed(p))
    unschedulable = sum(1 for p in pods if pod_is_unschedulable(p))
    if hpa is None:
        return ScalingObservation(
            autoscalerFound=False, placedReplicas=placed, unschedulableReplicas=unschedulable, priority=priority
        )
    spec = hpa.get("spec") or {}
    status = hpa.get("status") or {}
    conditions = [
        HpaCondition(
            type=str(c.get("type", "")),
            status=str(c.get("status", "")),
            reason=str(c.get("reason") or ""),
            message=str(c.get("message") or ""),
        )
        for c in status.get("conditions") or []
    ]
    return ScalingObservation(
        desiredReplicas=int(status.get("desiredReplicas") or 0),
        currentReplicas=int(status.get("currentReplicas") or 0),
        minReplicas=int(spec.get("minReplicas") or 1),
        maxReplicas=int(spec.get("maxReplicas") or 1),
        placedReplicas=placed,
        unschedulableReplicas=unschedulable,
        conditions=sorted(conditions, key=lambda c: c.type),
        priority=priority,
    )
