"""ScalingHealthy from an HPA, the scaling watch's parsing and loop: pure, no cluster."""

from __future__ import annotations

from typing import Any

from activities.scaling import pod_is_placed, pod_is_unschedulable, scaling_observation
from inference_api.preemption import HpaCondition, ScalingObservation
from inference_api.reasons import Reason
from inference_api.types import ConditionStatus, InferenceServiceClass
from planner.scaling import autoscaled, class_bounds, priority_class_name, scaling_health

HEALTHY = [
    HpaCondition(type="AbleToScale", status="True", reason="ReadyForNewScale"),
    HpaCondition(type="ScalingActive", status="True", reason="ValidMetricFound"),
    HpaCondition(type="ScalingLimited", status="False", reason="DesiredWithinRange"),
]


def observation(**kw: Any) -> ScalingObservation:
    fields: dict[str, Any] = {
        "desiredReplicas": 2,
        "currentReplicas": 2,
        "minReplicas": 1,
        "maxReplicas": 4,
        "placedReplicas": 2,
        "conditions": HEALTHY,
    }
    fields.update(kw)
    return ScalingObservation(**fields)


def with_condition(type_: str, status: str, reason: str, message: str = "") -> list[HpaCondition]:
    return [c for c in HEALTHY if c.type != type_] + [
        HpaCondition(type=type_, status=status, reason=reason, message=message)
    ]


def test_a_healthy_hpa_is_scaling_allowed() -> None:
    verdict = scaling_health(observation(), None, None)
    assert verdict is not None
    status, reason, message = verdict
    assert (status, reason) == (ConditionStatus.TRUE, Reason.SCALING_ALLOWED)
    assert message == "the autoscaler wants 2 replica(s), runs 2 (bounds 1..4)"


def test_blocked_by_preemption_wins_over_everything() -> None:
    verdict = scaling_health(observation(), "no donor left", None)
    assert verdict == (ConditionStatus.FALSE, Reason.SCALE_UP_BLOCKED, "no donor left")


def test_able_to_scale_false_is_unhealthy() -> None:
    obs = observation(conditions=with_condition("AbleToScale", "False", "FailedGetScale", "no scale"))
    verdict = scaling_health(obs, None, None)
    assert verdict is not None
    assert verdict[:2] == (ConditionStatus.FALSE, Reason.AUTOSCALER_UNABLE_TO_SCALE)
    assert "FailedGetScale" in verdict[2]


def test_no_metrics_is_unknown_not_degraded() -> None:
    obs = observation(conditions=with_condition("ScalingActive", "False", "FailedGetPodsMetric", "no metrics API"))
    verdict = scaling_health(obs, None, None)
    assert verdict is not None
    assert verdict[:2] == (ConditionStatus.UNKNOWN, Reason.AUTOSCALER_METRICS_UNAVAILABLE)
    assert "no metrics API" in verdict[2]


def test_not_yet_observed() -> None:
    assert scaling_health(None, None, None) is None
    missing = scaling_health(ScalingObservation(autoscalerFound=False), None, None)
    assert missing is not None
    assert missing[:2] == (ConditionStatus.UNKNOWN, Reason.AUTOSCALER_NOT_OBSERVED)
    silent = scaling_health(observation(conditions=[]), None, None)
    assert silent is not None
    assert silent[1] == Reason.AUTOSCALER_NOT_OBSERVED


def test_limited_by_a_ceiling_or_by_the_class() -> None:
    limited = observation(conditions=with_condition("ScalingLimited", "True", "TooManyReplicas"), maxReplicas=2)
    assert limited.wants_above_bound
    held = scaling_health(limited, None, 2)
    assert held is not None
    assert held[0] == ConditionStatus.TRUE
    assert "lowered by preemption" in held[2]
    at_class = scaling_health(limited, None, None)
    assert at_class is not None
    assert "at the class's maxReplicas" in at_class[2]
    waiting = scaling_health(observation(unschedulableReplicas=1), None, None)
    assert waiting is not None
    assert "1 replica(s) wait for capacity" in waiting[2]


def test_signature_ignores_messages() -> None:
    a = observation(conditions=with_condition("ScalingActive", "False", "FailedGetPodsMetric", "at 12:00:01"))
    b = observation(conditions=with_condition("ScalingActive", "False", "FailedGetPodsMetric", "at 12:00:16"))
    assert a.signature() == b.signature()
    assert a.signature() != observation().signature()


def make_class(**scaling: Any) -> InferenceServiceClass:
    spec: dict[str, Any] = {"modelPolicy": {"allowedEndpointTypes": ["Chat"]}}
    if scaling:
        spec["scalingPolicy"] = scaling
    return InferenceServiceClass.model_validate({"metadata": {"name": "c"}, "spec": spec})


def test_class_scaling_profile() -> None:
    assert not autoscaled(None)
    assert not autoscaled(make_class())
    assert not autoscaled(make_class(minReplicas=1, maxReplicas=1))
    cls = make_class(minReplicas=2, maxReplicas=4, allowedPriorityClassNames=["inference-high", "x"])
    assert autoscaled(cls)
    assert class_bounds(cls) == (2, 4)
    assert priority_class_name(cls) == "inference-high"
    assert class_bounds(make_class()) == (1, 1)
    assert priority_class_name(make_class()) is None


# ----------------------------------------------------------------- parsing


ORDER_UID, STS_UID = "u-chat", "u-chat-sts"
# The order's StatefulSet as the API server returns it: controlled by the order.
STATEFULSET: dict[str, Any] = {
    "metadata": {
        "name": "chat",
        "namespace": "team",
        "uid": STS_UID,
        "ownerReferences": [
            {
                "apiVersion": "ai.deckhouse.io/v1alpha1",
                "kind": "InferenceService",
                "name": "chat",
                "uid": ORDER_UID,
                "controller": True,
            }
        ],
    }
}


def controlled_by(name: str, uid: str, kind: str = "StatefulSet", api: str = "apps/v1") -> list[dict[str, Any]]:
    return [{"apiVersion": api, "kind": kind, "name": name, "uid": uid, "controller": True}]


def pod(
    node: str | None = None,
    unschedulable: bool = False,
    deleting: bool = False,
    owners: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A pod the StatefulSet controller made for the order ``chat`` (``owners`` replaces its ownerReferences)."""
    conditions = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}] if unschedulable else []
    meta: dict[str, Any] = {
        "name": "p",
        "namespace": "team",
        "labels": {"ai.deckhouse.io/inference-service": "chat"},
        "ownerReferences": controlled_by("chat", STS_UID) if owners is None else owners,
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "metadata": meta,
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": "Running" if node else "Pending", "conditions": conditions},
    }


def test_pods_placed_and_unschedulable() -> None:
    assert pod_is_placed(pod("n1"))
    assert not pod_is_placed(pod())
    assert not pod_is_placed(pod("n1", deleting=True))
    assert pod_is_unschedulable(pod(unschedulable=True))
    assert not pod_is_unschedulable(pod())
    assert not pod_is_unschedulable(pod("n1"))


def test_scaling_observation_from_an_hpa() -> None:
    hpa = {
        "spec": {"minReplicas": 1, "maxReplicas": 3},
        "status": {
            "desiredReplicas": 3,
            "currentReplicas": 2,
            "conditions": [
                {"type": "ScalingLimited", "status": "True", "reason": "TooManyReplicas", "message": "m"},
                {"type": "AbleToScale", "status": "True", "reason": "SucceededRescale"},
            ],
        },
        "metadata": {
            "name": "chat",
            "namespace": "team",
            "ownerReferences": STATEFULSET["metadata"]["ownerReferences"],
        },
    }
    obs = scaling_observation(
        hpa,
        [pod("n1"), pod("n2"), pod(unschedulable=True)],
        priority=1000,
        order_uid=ORDER_UID,
        statefulset=STATEFULSET,
    )
    assert (obs.desiredReplicas, obs.currentReplicas, obs.minReplicas, obs.maxReplicas) == (3, 2, 1, 3)
    assert (obs.placedReplicas, obs.unschedulableReplicas, obs.priority) == (2, 1, 1000)
    assert [c.type for c in obs.conditions] == ["AbleToScale", "ScalingLimited"]
    assert obs.wants_above_bound
    missing = scaling_observation(None, [pod("n1")], priority=5, order_uid=ORDER_UID, statefulset=STATEFULSET)
    assert not missing.autoscalerFound
    assert missing.placedReplicas == 1
    assert missing.priority == 5


def test_only_the_orders_own_pods_are_counted() -> None:
    """Pods labelled as the order's count as its replicas (placed, or pending for preemption) only along
    the controller chain pod → the order's StatefulSet → the order; an HPA only when the order controls it."""
    order_ref = STATEFULSET["metadata"]["ownerReferences"]
    forged = [
        pod("n1", owners=[]),  # no owner: labelled by hand
        pod(unschedulable=True, owners=[]),
        pod("n1", owners=controlled_by("mine", "u-tenant-sts")),  # the tenant's own StatefulSet
        pod(unschedulable=True, owners=controlled_by("chat", "u-forged")),  # the right name, another uid
        pod("n1", owners=order_ref),  # the order itself as controller: no StatefulSet made it
        pod(unschedulable=True, owners=[{**controlled_by("chat", STS_UID)[0], "controller": False}]),
    ]
    elsewhere = pod("n1")
    elsewhere["metadata"]["namespace"] = "other"  # the order's StatefulSet is in team
    hpa = {"metadata": {"name": "chat", "namespace": "team", "ownerReferences": order_ref}, "status": {}}
    obs = scaling_observation(
        hpa, [pod("n2"), pod(unschedulable=True), *forged, elsewhere], 0, order_uid=ORDER_UID, statefulset=STATEFULSET
    )
    assert (obs.autoscalerFound, obs.placedReplicas, obs.unschedulableReplicas) == (True, 1, 1)
    # The StatefulSet must be the order's, and be there.
    tenant_sts = {**STATEFULSET, "metadata": {**STATEFULSET["metadata"], "ownerReferences": []}}
    for sts in (tenant_sts, None):
        none = scaling_observation(hpa, [pod("n2"), pod(unschedulable=True)], 0, order_uid=ORDER_UID, statefulset=sts)
        assert (none.placedReplicas, none.unschedulableReplicas) == (0, 0)
    # An HPA the order does not control is no autoscaler of it.
    stray = {**hpa, "metadata": {"name": "chat", "namespace": "team"}}
    assert not scaling_observation(stray, [], 0, order_uid=ORDER_UID, statefulset=STATEFULSET).autoscalerFound
