"""The whole observer against the real local control plane and the real Temporal dev server.

Informers (list+watch) on a namespace of the test's own (so orders of other tests are never touched),
the recording stand-in workflows on a task queue of their own. What an order's workflow hears, in
order: its creation, a spec edit (a status write is nothing), a spec edit of its class (the class
status the observer writes itself is nothing), a change of an owned Service by someone else (the
module's own apply is nothing), that Service deleted, and its deletion. A ClusterModel appearing is
told to the order that references it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from kubernetes.client import ApiClient, CoreV1Api, CustomObjectsApi
from temporalio.client import Client

from activities.builders.common import LABEL_MANAGED_BY, LABEL_ORDER, MANAGED_BY
from activities.kube import Applier
from inference_api.catalog_types import CATALOG_GROUP, CATALOG_VERSION
from inference_api.observation import OrderSignal
from inference_api.payloads import order_workflow_id
from inference_api.settings import (
    CatalogMode,
    CatalogSettings,
    HealthSettings,
    ModuleSettings,
    ObserverSettings,
    TemporalSettings,
)
from inference_api.types import CLASSES, GROUP, ORDERS, VERSION
from worker.observer import Observer
from worker.observer import informer as inf
from worker.observer.informer import MODULE_SELECTOR, Resource, list_all

pytestmark = [pytest.mark.cluster, pytest.mark.temporal]

FINALIZER = "ai.deckhouse.io/inference-service"
JSON_PATCH = "application/json-patch+json"


def namespaced_resources(api: ApiClient, namespace: str) -> list[Resource]:
    """The observer's informers, orders and owned objects limited to one namespace."""
    custom, core = CustomObjectsApi(api), CoreV1Api(api)

    def in_namespace(group: str, version: str, plural: str) -> Callable[..., Any]:
        return lambda **kw: custom.list_namespaced_custom_object(group, version, namespace, plural, **kw)

    def cluster(group: str, version: str, plural: str) -> Callable[..., Any]:
        return lambda **kw: custom.list_cluster_custom_object(group, version, plural, **kw)

    return [
        Resource(inf.ORDER, in_namespace(GROUP, VERSION, ORDERS)),
        Resource(inf.CLASS, cluster(GROUP, VERSION, CLASSES)),
        Resource(inf.SERVICE, lambda **kw: core.list_namespaced_service(namespace, **kw), MODULE_SELECTOR),
        Resource(
            inf.SECRET, lambda **kw: core.list_namespaced_secret(namespace, **kw), MODULE_SELECTOR, metadata_only=True
        ),
        Resource(inf.CLUSTER_MODEL, cluster(CATALOG_GROUP, CATALOG_VERSION, "clustermodels")),
    ]


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 30, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@contextlib.asynccontextmanager
async def observing(observer: Observer) -> AsyncIterator[None]:
    task = asyncio.create_task(observer.run())
    try:
        await asyncio.wait_for(observer.orders_synced.wait(), 30)
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_the_observer_signals_only_what_the_workflow_acts_on(
    kube_admin: ApiClient, namespace: str, temporal_client: Client, task_queue: str
) -> None:
    custom = CustomObjectsApi(kube_admin)
    core = CoreV1Api(kube_admin)
    suffix = uuid.uuid4().hex[:6]
    class_name = f"observer-{suffix}"
    model_name = f"qwen-{suffix}"
    custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        CLASSES,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "InferenceServiceClass",
            "metadata": {"name": class_name},
            "spec": {"modelPolicy": {"allowedEndpointTypes": ["Chat"]}},
        },
    )

    settings = ModuleSettings(
        temporal=TemporalSettings(taskQueue=task_queue),
        catalog=CatalogSettings(mode=CatalogMode.ENABLED),
        health=HealthSettings(intervalSeconds=3600),
        observer=ObserverSettings(resyncSeconds=3600, debounceSeconds=0.3),
    )
    observer = Observer(
        kube_admin,
        temporal_client,
        settings,
        resources=namespaced_resources(kube_admin, namespace),
        watch_timeout_seconds=30,
    )

    def new_order(name: str, model: dict[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            ORDERS,
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "InferenceService",
                "metadata": {"name": name, "finalizers": [FINALIZER]},
                "spec": {"inferenceServiceClassName": class_name, "model": model},
            },
        )
        return created

    async def heard(workflow_id: str) -> list[list[Any]]:
        try:
            result: list[list[Any]] = await temporal_client.get_workflow_handle(workflow_id).query("signals")
        except Exception:
            return []
        return result

    async def settled(workflow_id: str, expected: list[list[Any]], quiet: float = 1.5) -> None:
        async def arrived() -> bool:
            return await heard(workflow_id) == expected

        await eventually(arrived, what=f"{workflow_id} to hear {expected}")
        await asyncio.sleep(quiet)  # ... and nothing more
        assert await heard(workflow_id) == expected

    async with observing(observer):
        # The class judged first: its Ready flip tells the orders it has (none yet), as it must tell an
        # order that waits for it with ClassNotReady.
        async def judged() -> bool:
            cls = custom.get_cluster_custom_object(GROUP, VERSION, CLASSES, class_name)
            return bool((cls.get("status") or {}).get("phase") == "Ready")

        await eventually(judged, what="the class judged Ready")
        chat = new_order("chat", {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-7B"}})
        uid = chat["metadata"]["uid"]
        wid = order_workflow_id(namespace, "chat", uid)
        expected: list[list[Any]] = [[OrderSignal.SPEC_CHANGED, 1]]
        await settled(wid, expected)

        # A status write (the module's own) keeps the generation: nothing.
        custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, ORDERS, "chat", {"status": {"phase": "Pending", "observedGeneration": 1}}
        )
        # A spec edit: the new generation.
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, ORDERS, "chat", {"spec": {"model": {"parameterCount": "7B"}}}
        )
        expected.append([OrderSignal.SPEC_CHANGED, 2])
        await settled(wid, expected)

        # The class: the observer wrote its status (Ready) without telling anyone; a spec edit tells.
        async def class_ready() -> bool:
            cls = custom.get_cluster_custom_object(GROUP, VERSION, CLASSES, class_name)
            return bool((cls.get("status") or {}).get("phase") == "Ready")

        await eventually(class_ready, what="the observer's class status")
        edit = {"spec": {"modelStorageClassName": "x"}}
        custom.patch_cluster_custom_object(GROUP, VERSION, CLASSES, class_name, edit)
        expected.append([OrderSignal.CLASS_CHANGED, 2])
        await settled(wid, expected)

        # An owned Service: the module's own apply is nothing; someone else's change is observed.
        service: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "chat",
                "namespace": namespace,
                "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_ORDER: "chat"},
                "ownerReferences": [
                    {
                        "apiVersion": f"{GROUP}/{VERSION}",
                        "kind": "InferenceService",
                        "name": "chat",
                        "uid": uid,
                        "controller": True,
                    }
                ],
            },
            "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8000}], "selector": {LABEL_ORDER: "chat"}},
        }
        module = Applier(kube_admin)
        await asyncio.to_thread(module.apply, service)
        await asyncio.sleep(1.0)
        reapplied = {**service, "metadata": {**service["metadata"], "annotations": {"ai.deckhouse.io/placement": "x"}}}
        await asyncio.to_thread(module.apply, reapplied)
        await settled(wid, expected)
        intruder = {**service, "metadata": {**service["metadata"], "labels": {"someone": "was-here"}}}
        intruder["metadata"].pop("ownerReferences")
        await asyncio.sleep(1.0)  # managedFields times have a one-second resolution
        await asyncio.to_thread(Applier(kube_admin, field_manager="intruder").apply, intruder)
        changed = {"what": f"Service {namespace}/chat changed by intruder", "kind": "Service"}
        expected.append([OrderSignal.OBSERVED, changed])
        await settled(wid, expected)

        core.delete_namespaced_service("chat", namespace)
        expected.append([OrderSignal.OBSERVED, {"what": f"Service {namespace}/chat deleted", "kind": "Service"}])
        await settled(wid, expected)

        # A catalog order: its ClusterModel appearing is told to it.
        catalog = new_order("catalog", {"src": "ai-models", "ref": {"kind": "ClusterModel", "name": model_name}})
        catalog_wid = order_workflow_id(namespace, "catalog", catalog["metadata"]["uid"])
        await settled(catalog_wid, [[OrderSignal.SPEC_CHANGED, 1]])
        custom.create_cluster_custom_object(
            CATALOG_GROUP,
            CATALOG_VERSION,
            "clustermodels",
            {
                "apiVersion": f"{CATALOG_GROUP}/{CATALOG_VERSION}",
                "kind": "ClusterModel",
                "metadata": {"name": model_name},
                "spec": {"source": "hf://Qwen/Qwen2.5-7B"},
            },
        )
        await settled(
            catalog_wid,
            [
                [OrderSignal.SPEC_CHANGED, 1],
                [OrderSignal.OBSERVED, {"what": f"ClusterModel {model_name} appeared", "kind": "ClusterModel"}],
            ],
        )

        # Deletion: the deletionTimestamp is told once; the order gone after its finalizer is nothing more.
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, ORDERS, "chat")
        expected.append([OrderSignal.DELETE])
        await settled(wid, expected)
        custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            ORDERS,
            "chat",
            [{"op": "remove", "path": "/metadata/finalizers"}],
            _content_type=JSON_PATCH,
        )
        await settled(wid, expected)

    for name in ("catalog",):
        with contextlib.suppress(Exception):
            custom.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                ORDERS,
                name,
                [{"op": "remove", "path": "/metadata/finalizers"}],
                _content_type=JSON_PATCH,
            )
    custom.delete_cluster_custom_object(GROUP, VERSION, CLASSES, class_name)
    custom.delete_cluster_custom_object(CATALOG_GROUP, CATALOG_VERSION, "clustermodels", model_name)


def test_every_informer_of_the_observer_lists_and_watches(kube_admin: ApiClient) -> None:
    """Each kind the production observer informs on (catalog included) answers a paged listing with
    its resourceVersion, and a watch from there (with bookmarks) is accepted."""
    resources = inf.resources(kube_admin, catalog=True)
    assert {r.kind for r in resources} == {
        inf.ORDER,
        inf.CLASS,
        *inf.OWNED_KINDS,
        inf.POD,
        inf.PRIORITY_CLASS,
        *inf.CATALOG_KINDS,
        inf.NODE,
        inf.EVENT,
    }
    for resource in resources:
        items, resource_version = list_all(resource, page=2)
        assert resource_version, resource.kind
        for item in items:
            assert item["kind"] == resource.kind, resource.kind
            assert item["apiVersion"], resource.kind
        response = resource.list_fn(
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=1,
            _preload_content=False,
        )
        try:
            assert response.status == 200, resource.kind
            response.read()
        finally:
            response.release_conn()
