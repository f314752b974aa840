"""API server behaviour the module leans on: owner-reference GC, server-side apply, status subresource."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client import ApiClient

from devstack.cluster import kube
from devstack.cluster.launcher import LocalCluster
from tests.cluster.helpers import delete, dynamic, exists, get, kwok_pod
from tests.polling import wait_until

pytestmark = pytest.mark.cluster

ISVC = "ai.deckhouse.io/v1alpha1"


def _order(name: str, namespace: str, model: str = "Qwen/Qwen2.5-0.5B-Instruct") -> dict[str, Any]:
    return {
        "apiVersion": ISVC,
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"inferenceServiceClassName": "default-llm", "model": {"src": "HuggingFace", "ref": {"name": model}}},
    }


def _owner_ref(owner: dict[str, Any], controller: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def test_garbage_collection_of_owned_objects(
    local_cluster: LocalCluster, kube_admin: ApiClient, namespace: str
) -> None:
    dyn = dynamic(kube_admin)
    # Background propagation (the default): a ConfigMap owned by a ConfigMap.
    local_cluster.apply(
        [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner", "namespace": namespace}}]
    )
    owner = get(dyn, "v1", "ConfigMap", "owner", namespace)
    local_cluster.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "dependent", "namespace": namespace, "ownerReferences": [_owner_ref(owner)]},
            }
        ]
    )
    delete(dyn, "v1", "ConfigMap", "owner", namespace)
    wait_until(lambda: not exists(dyn, "v1", "ConfigMap", "dependent", namespace), what="dependent ConfigMap collected")

    # Foreground propagation from an order (a custom resource) to what it owns, a pod included:
    # the pod goes through kwok's pod-delete stage, since no kubelet would ever confirm it.
    local_cluster.apply([_order("gc-order", namespace)])
    order = get(dyn, ISVC, "InferenceService", "gc-order", namespace)
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "gc-order-config", "namespace": namespace, "ownerReferences": [_owner_ref(order)]},
    }
    pod = kwok_pod("gc-order-0", namespace)
    pod["metadata"]["ownerReferences"] = [_owner_ref(order)]
    local_cluster.apply([cm, pod])
    wait_until(
        lambda: get(dyn, "v1", "Pod", "gc-order-0", namespace)["status"].get("phase") == "Running", what="pod up"
    )
    delete(dyn, ISVC, "InferenceService", "gc-order", namespace, propagation="Foreground")
    wait_until(
        lambda: (
            not any(
                exists(dyn, *ref, namespace)
                for ref in (
                    ("v1", "ConfigMap", "gc-order-config"),
                    ("v1", "Pod", "gc-order-0"),
                    (ISVC, "InferenceService", "gc-order"),
                )
            )
        ),
        what="order and everything it owns deleted",
    )


def test_server_side_apply_and_status_subresource(
    local_cluster: LocalCluster, kube_admin: ApiClient, namespace: str
) -> None:
    dyn = dynamic(kube_admin)
    user, controller = "test-user", "test-controller"
    kube.apply(dyn, _order("ssa", namespace), field_manager=user)
    before = get(dyn, ISVC, "InferenceService", "ssa", namespace)
    generation = before["metadata"]["generation"]

    status = {"phase": "Pending", "reason": "Planning", "observedGeneration": generation}
    kube.apply(
        dyn,
        {
            "apiVersion": ISVC,
            "kind": "InferenceService",
            "metadata": {"name": "ssa", "namespace": namespace},
            "status": status,
        },
        field_manager=controller,
        subresource="status",
    )
    after = get(dyn, ISVC, "InferenceService", "ssa", namespace)
    assert after["status"] == status
    assert after["spec"] == before["spec"]
    assert after["metadata"]["generation"] == generation  # status writes never bump generation
    managers = {(m["manager"], m.get("subresource", "")) for m in after["metadata"]["managedFields"]}
    assert {(user, ""), (controller, "status")} <= managers

    # Status sent to the main resource is ignored...
    order = _order("ssa", namespace)
    order["status"] = {"phase": "Ready"}
    kube.apply(dyn, order, field_manager=user)
    assert get(dyn, ISVC, "InferenceService", "ssa", namespace)["status"]["phase"] == "Pending"

    # ...and spec sent to /status is ignored.
    sneaky = _order("ssa", namespace, model="Org/Other-7B")
    sneaky["status"] = {"phase": "Ready", "reason": "Serving", "observedGeneration": generation}
    kube.apply(dyn, sneaky, field_manager=controller, subresource="status")
    now = get(dyn, ISVC, "InferenceService", "ssa", namespace)
    assert now["spec"]["model"]["ref"]["name"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert now["status"]["phase"] == "Ready"
    assert now["metadata"]["generation"] == generation

    # A real spec change through SSA bumps generation; the status keeps its observedGeneration.
    kube.apply(dyn, _order("ssa", namespace, model="Qwen/Qwen2.5-1.5B-Instruct"), field_manager=user)
    changed = get(dyn, ISVC, "InferenceService", "ssa", namespace)
    assert changed["metadata"]["generation"] == generation + 1
    assert changed["status"]["observedGeneration"] == generation
