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

from inference_api.ownership import by_uid, controller_reference, owned_by
from inference_api.preemption import HpaCondition, ScalingObservation


def pod_is_placed(pod: Mapping[str, Any]) -> bool:
    """Bound to a node and not going away: the replica holds its devices."""
    meta = pod.get("metadata") or {}
    return bool((pod.get("spec") or {}).get("nodeName")) and not meta.get("deletionTimestamp")


# The condition the observer's replica placer writes on a gated replica no device has room for
# (``worker.observer.replica_placer``): pods/status, which a namespace user cannot write.
REPLICA_PLACED = "ai.deckhouse.io/ReplicaPlaced"
NO_PLACE = "NoPlace"


def pod_is_unschedulable(pod: Mapping[str, Any]) -> bool:
    """Pending because no node can take it: the scheduler found none (PodScheduled=False, Unschedulable),
    or the replica placer found no device with room (``ai.deckhouse.io/ReplicaPlaced=False``, NoPlace,
    while the pod waits behind its scheduling gate) — either way preemption may make room."""
    status = pod.get("status") or {}
    if status.get("phase") != "Pending" or (pod.get("spec") or {}).get("nodeName"):
        return False
    return any(
        (c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable")
        or (c.get("type") == REPLICA_PLACED and c.get("status") == "False" and c.get("reason") == NO_PLACE)
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


def order_pods(
    pods: Iterable[Mapping[str, Any]], order_uid: str, statefulset: Mapping[str, Any] | None
) -> list[Mapping[str, Any]]:
    """The order's own pods among ``pods`` (those carrying its label): a pod counts only when its
    controller is ``statefulset`` and the chain goes on to the order (pod → the order's StatefulSet → the
    order of uid ``order_uid``, :mod:`inference_api.ownership`); a pod naming the order itself as its
    controller is no replica either. A pod someone labelled as the order's (the
    marks guard refuses that, this does not rely on it) counts for nothing: not placed, not pending."""
    if statefulset is None or not owned_by(statefulset, order_uid):
        return []
    owners = by_uid(statefulset)
    sts_uid = str((statefulset.get("metadata") or {}).get("uid") or "")
    return [p for p in pods if _controller_uid(p) == sts_uid and owned_by(p, order_uid, owners)]


def _controller_uid(obj: Mapping[str, Any]) -> str | None:
    ref = controller_reference(obj)
    return str(ref.get("uid") or "") if ref is not None else None


def scaling_observation(
    hpa: Mapping[str, Any] | None,
    pods: Iterable[Mapping[str, Any]],
    priority: int,
    *,
    order_uid: str,
    statefulset: Mapping[str, Any] | None,
) -> ScalingObservation:
    """What the order's autoscaler and replicas say. ``hpa`` and ``pods`` are candidates (found by name
    and label); only the HPA the order controls and the pods of its StatefulSet
    (:func:`order_pods`) are believed."""
    if hpa is not None and not owned_by(hpa, order_uid):
        hpa = None
    pods = order_pods(pods, order_uid, statefulset)
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
