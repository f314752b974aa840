"""What ``ai-inference disable`` deletes for an order and what it keeps (worker/disable.py): only the
objects the module made for that very order — the builder's name and the order's uid on the controller
ownerReference — never an object on the strength of a label (a tenant can write labels) or of an
ownerReference alone; the auth Secret is kept. And the status it writes, and the observer's wake-up."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from activities.builders.claim import RESOURCE_API_VERSION
from activities.builders.common import LABEL_MANAGED_BY, LABEL_ORDER, MANAGED_BY
from worker.disable import DISABLED_MESSAGE, MODULE_DISABLED, disabled_status, stops, wakes_after_disable, workload_of

NS, ORDER, UID = "team-a", "chat", "uid-chat"
ORDER_OBJ: dict[str, Any] = {
    "apiVersion": "ai.deckhouse.io/v1alpha1",
    "kind": "InferenceService",
    "metadata": {"name": ORDER, "namespace": NS, "uid": UID},
}


def owner(uid: str = UID, name: str = ORDER, controller: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "ai.deckhouse.io/v1alpha1",
        "kind": "InferenceService",
        "name": name,
        "uid": uid,
        "controller": controller,
    }


def obj(
    api_version: str, kind: str, name: str, owners: list[dict[str, Any]] | None = None, **meta: Any
) -> dict[str, Any]:
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_ORDER: ORDER}
    metadata = {"name": name, "namespace": NS, "uid": f"uid-{kind}-{name}", "labels": labels, **meta}
    if owners is not None:
        metadata["ownerReferences"] = owners
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata}


THE_WORKLOAD = [
    obj("networking.k8s.io/v1", "NetworkPolicy", ORDER, [owner()]),
    obj(RESOURCE_API_VERSION, "ResourceClaimTemplate", f"{ORDER}-claim", [owner()]),
    obj("v1", "Service", ORDER, [owner()]),
    obj("apps/v1", "StatefulSet", ORDER, [owner()]),
    obj("autoscaling/v2", "HorizontalPodAutoscaler", ORDER, [owner()]),
    obj("networking.k8s.io/v1", "Ingress", ORDER, [owner()]),
]


def test_the_orders_workload_is_deleted_endpoint_first_fence_last() -> None:
    chosen = workload_of(ORDER_OBJ, THE_WORKLOAD)
    assert [o["kind"] for o in chosen] == [
        "Ingress",
        "HorizontalPodAutoscaler",
        "StatefulSet",
        "Service",
        "ResourceClaimTemplate",
        "NetworkPolicy",
    ]


def test_the_auth_secret_and_the_tls_copy_are_kept() -> None:
    kept = [
        obj("v1", "Secret", f"{ORDER}-auth", [owner()]),
        obj("v1", "Secret", f"{ORDER}-tls", [owner()]),
    ]
    assert workload_of(ORDER_OBJ, kept) == []


def test_a_tenant_object_with_the_orders_labels_is_kept() -> None:
    # The builder's name and the module's labels, but no ownerReference, or another controller.
    assert not stops(ORDER_OBJ, obj("apps/v1", "StatefulSet", ORDER))
    assert not stops(ORDER_OBJ, obj("apps/v1", "StatefulSet", ORDER, [owner(uid="someone-else", name="x")]))
    # An ownerReference to the order that is not the controller's.
    assert not stops(ORDER_OBJ, obj("v1", "Service", ORDER, [owner(controller=False)]))


def test_an_object_owned_by_the_order_under_another_name_is_kept() -> None:
    # A tenant can set an ownerReference to the order (it only needs the uid): the name is the module's rule.
    for api_version, kind in (("apps/v1", "StatefulSet"), ("v1", "Service"), ("networking.k8s.io/v1", "Ingress")):
        assert not stops(ORDER_OBJ, obj(api_version, kind, f"{ORDER}-mine", [owner()]))
    assert not stops(ORDER_OBJ, obj(RESOURCE_API_VERSION, "ResourceClaimTemplate", ORDER, [owner()]))


def test_a_previous_order_of_the_same_name_or_another_namespace_is_not_this_one() -> None:
    # Left by a deleted order of the same name (another uid): garbage collection's, not the disable's.
    assert not stops(ORDER_OBJ, obj("apps/v1", "StatefulSet", ORDER, [owner(uid="old-uid")]))
    elsewhere = obj("apps/v1", "StatefulSet", ORDER, [owner()])
    elsewhere["metadata"]["namespace"] = "team-b"
    assert not stops(ORDER_OBJ, elsewhere)
    # Another kind of the same name is not part of the workload.
    assert not stops(ORDER_OBJ, obj("v1", "ConfigMap", ORDER, [owner()]))


NOW = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)
READY_STATUS: dict[str, Any] = {
    "phase": "Ready",
    "observedGeneration": 3,
    "conditions": [
        {
            "type": "ClassResolved",
            "status": "True",
            "reason": "ClassResolved",
            "message": "",
            "lastTransitionTime": "t0",
        },
        {
            "type": "WorkloadReady",
            "status": "True",
            "reason": "WorkloadReady",
            "message": "",
            "lastTransitionTime": "t0",
        },
        {
            "type": "Ready",
            "status": "True",
            "reason": "Ready",
            "message": "",
            "lastTransitionTime": "t0",
            "observedGeneration": 3,
        },
    ],
}


def test_the_status_says_module_disabled_and_a_second_run_writes_nothing() -> None:
    status = disabled_status(READY_STATUS, NOW)
    assert status is not None
    assert (status["phase"], status["reason"]) == ("Pending", MODULE_DISABLED)
    by_type = {c["type"]: c for c in status["conditions"]}
    for type_ in ("Ready", "WorkloadReady"):
        assert by_type[type_]["status"] == "False"
        assert by_type[type_]["reason"] == MODULE_DISABLED
        assert by_type[type_]["message"] == DISABLED_MESSAGE
        assert by_type[type_]["lastTransitionTime"] == "2025-05-01T12:00:00Z"
    assert by_type["Ready"]["observedGeneration"] == 3
    assert by_type["ClassResolved"] == READY_STATUS["conditions"][0]
    assert "enabled" in DISABLED_MESSAGE
    assert "kept" in DISABLED_MESSAGE
    assert disabled_status({**READY_STATUS, **status}, NOW) is None


def test_a_condition_already_false_keeps_its_transition_time() -> None:
    pending = {
        "phase": "Pending",
        "conditions": [{"type": "Ready", "status": "False", "reason": "X", "lastTransitionTime": "t1"}],
    }
    status = disabled_status(pending, NOW)
    assert status is not None
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["lastTransitionTime"] == "t1"
    assert disabled_status(None, NOW) is not None  # an order never reconciled says so too


def test_the_observer_wakes_a_disabled_order() -> None:
    order = {**ORDER_OBJ, "status": {"phase": "Pending", "reason": MODULE_DISABLED}}
    assert wakes_after_disable(order)
    assert not wakes_after_disable({**ORDER_OBJ, "status": {"phase": "Ready"}})
    deleting = {**order, "metadata": {**ORDER_OBJ["metadata"], "deletionTimestamp": "2025-05-01T12:00:00Z"}}
    assert not wakes_after_disable(deleting)
