"""An observer that judges classes against a real API server, for the cluster tests of a class's
conditions: its production informers of the kinds a class names (PriorityClasses, and the
metadata-only DeviceClasses, StorageClasses and cert-manager ClusterIssuers), classes, and orders of
one namespace only (no order of another test is ever signalled). Only the informers and the event
handling run — no outbox, resync or probes: no Temporal is needed — and the class status is written
to the API server as the watcher writes it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from kubernetes.client import ApiClient, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from inference_api.settings import ModuleSettings, ObserverSettings, TemporalSettings
from inference_api.types import CLASSES, GROUP, ORDERS, VERSION
from worker.observer import Observer
from worker.observer import informer as inf
from worker.observer.informer import Resource


def class_resources(api: ApiClient, namespace: str) -> list[Resource]:
    custom = CustomObjectsApi(api)
    production = {r.kind: r for r in inf.resources(api, catalog=False)}
    return [
        production[inf.CLASS],
        production[inf.PRIORITY_CLASS],
        Resource(inf.ORDER, lambda **kw: custom.list_namespaced_custom_object(GROUP, VERSION, namespace, ORDERS, **kw)),
        *inf.reference_resources(api),
    ]


@contextlib.asynccontextmanager
async def class_watch(api: ApiClient, namespace: str, watch_timeout_seconds: int = 30) -> AsyncIterator[Observer]:
    settings = ModuleSettings(
        temporal=TemporalSettings(taskQueue="class-watch"), observer=ObserverSettings(debounceSeconds=0.1)
    )
    observer = Observer(
        api,
        object(),  # type: ignore[arg-type]  # the outbox never runs: nothing is sent
        settings,
        resources=class_resources(api, namespace),
        watch_timeout_seconds=watch_timeout_seconds,
        fingerprint="class-watch",
        read_secret=lambda ns, name: None,
    )
    queue = observer.start_informers()

    async def pump() -> None:
        while True:
            observer.handle(await queue.get())

    task = asyncio.create_task(pump())
    try:
        yield observer
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await observer.stop()


def conditions(api: ApiClient, name: str) -> dict[str, dict[str, Any]]:
    try:
        obj = CustomObjectsApi(api).get_cluster_custom_object(GROUP, VERSION, CLASSES, name)
    except ApiException as err:
        if err.status == 404:
            return {}
        raise
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def phase(api: ApiClient, name: str) -> str | None:
    obj = CustomObjectsApi(api).get_cluster_custom_object(GROUP, VERSION, CLASSES, name)
    found: str | None = (obj.get("status") or {}).get("phase")
    return found


async def until_ready(
    api: ApiClient, name: str, status: str, reason: str, timeout: float = 60
) -> dict[str, dict[str, Any]]:
    """The class's conditions once its Ready says ``status`` with ``reason``."""
    deadline = time.monotonic() + timeout
    found: dict[str, dict[str, Any]] = {}
    while time.monotonic() < deadline:
        found = await asyncio.to_thread(conditions, api, name)
        ready = found.get("Ready") or {}
        if ready.get("status") == status and ready.get("reason") == reason:
            return found
        await asyncio.sleep(0.2)
    raise AssertionError(f"class {name}: Ready={status} {reason} never came; now {found.get('Ready')}")


def class_body(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceServiceClass",
        "metadata": {"name": name},
        "spec": {"modelPolicy": {"allowedEndpointTypes": ["Chat"]}, **spec},
    }


def delete_quietly(delete: Callable[[], Any]) -> None:
    with contextlib.suppress(ApiException):
        delete()
