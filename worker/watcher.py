"""The watcher: kubectl's changes become Temporal signals.

List+watch InferenceService and InferenceServiceClass (resourceVersion, bookmarks, relist on
410 Gone). An order event is a signal-with-start of its order workflow carrying the generation;
a deleting order gets the ``delete`` signal; a class event writes the class's status and tells
the orders of that class to replan. Stateless and idempotent: two watchers may run at once.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog
from kubernetes import watch
from kubernetes.client import ApiClient, CustomObjectsApi
from kubernetes.client.exceptions import ApiException
from prometheus_client import Counter
from temporalio.client import Client
from temporalio.common import WorkflowIDReusePolicy
from temporalio.service import RPCError

from inference_api.payloads import OrderRef, order_workflow_id
from inference_api.settings import CatalogMode, ModuleSettings
from inference_api.types import CLASSES, GROUP, ORDERS, VERSION, InferenceServiceClass
from workflows.class_status import class_status_patch
from workflows.order import OrderState, OrderTimings, OrderWorkflow

log = structlog.get_logger(__name__)


# Served at /metrics on the health port (prometheus-client's default registry).
EVENTS_HANDLED = Counter("ai_inference_watcher_events", "List and watch events the watcher handled.", ["kind", "type"])
SIGNALS_SENT = Counter(
    "ai_inference_watcher_signals",
    "Signals the watcher sent to workflows (outcome: sent, or refused by Temporal).",
    ["signal", "outcome"],
)


def order_timings(settings: ModuleSettings) -> OrderTimings:
    health = settings.health
    return OrderTimings(
        healthIntervalSeconds=health.intervalSeconds,
        failureThreshold=health.failureThreshold,
        probeTimeoutSeconds=health.probeTimeoutSeconds,
        serveWaitSeconds=health.serveWaitSeconds,
        scalingIntervalSeconds=health.scalingIntervalSeconds,
        catalogEnabled=settings.catalog.mode == CatalogMode.ENABLED,
    )


@dataclass
class WatchEvent:
    kind: str  # "order" | "class"
    type: str  # ADDED | MODIFIED | DELETED | SYNC (from a list)
    obj: dict[str, Any]


@dataclass
class OrderIndex:
    """Which orders name which class: a class event signals exactly those orders."""

    by_key: dict[str, tuple[str, str]] = field(default_factory=dict)  # ns/name -> (uid, class)

    def put(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        self.by_key[f"{meta['namespace']}/{meta['name']}"] = (meta["uid"], obj["spec"]["inferenceServiceClassName"])

    def drop(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        self.by_key.pop(f"{meta['namespace']}/{meta['name']}", None)

    def of_class(self, class_name: str) -> list[OrderRef]:
        refs = []
        for key, (uid, cls) in self.by_key.items():
            if cls == class_name:
                namespace, name = key.split("/", 1)
                refs.append(OrderRef(namespace=namespace, name=name, uid=uid))
        return refs


def _list_and_watch(
    list_fn: Callable[..., Any],
    kind: str,
    emit: Callable[[WatchEvent], None],
    stop: threading.Event,
    timeout_seconds: int = 300,
) -> None:
    """Blocking list+watch loop of one kind; runs in a thread until ``stop`` is set."""
    resource_version: str | None = None
    while not stop.is_set():
        try:
            if resource_version is None:
                listing = list_fn()
                for item in listing.get("items", []):
                    emit(WatchEvent(kind, "SYNC", item))
                resource_version = listing["metadata"]["resourceVersion"]
            stream = watch.Watch()
            for event in stream.stream(
                list_fn,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout_seconds,
            ):
                if stop.is_set():
                    stream.stop()
                    break
                obj = event["object"]
                resource_version = obj.get("metadata", {}).get("resourceVersion", resource_version)
                if event["type"] == "BOOKMARK":
                    continue
                if event["type"] == "ERROR":
                    raise ApiException(status=obj.get("code", 500), reason=obj.get("message"))
                emit(WatchEvent(kind, event["type"], obj))
        except ApiException as err:
            if err.status == 410:
                # The resourceVersion is too old: relist (idempotent: signals dedupe by generation).
                log.info("watch expired, relisting", kind=kind)
                resource_version = None
                continue
            log.warning("watch failed, retrying", kind=kind, status=err.status)
            stop.wait(2)
            resource_version = None
        except Exception as err:  # a network hiccup must not end the watcher
            log.warning("watch broke, retrying", kind=kind, error=type(err).__name__)
            stop.wait(2)


class Watcher:
    def __init__(self, api: ApiClient, client: Client, settings: ModuleSettings) -> None:
        self.custom = CustomObjectsApi(api)
        self.client = client
        self.settings = settings
        self.index = OrderIndex()
        self.stop = threading.Event()

    async def handle(self, event: WatchEvent) -> None:
        if event.kind == "order":
            await self.on_order(event)
        else:
            await self.on_class(event)

    async def on_order(self, event: WatchEvent) -> None:
        obj = event.obj
        meta = obj["metadata"]
        if event.type == "DELETED":
            self.index.drop(obj)
            return
        self.index.put(obj)
        ref = OrderRef(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"])
        workflow_id = order_workflow_id(ref.namespace, ref.name, ref.uid)
        deleting = bool(meta.get("deletionTimestamp"))
        signal, args = ("delete", []) if deleting else ("spec_changed", [int(meta.get("generation") or 0)])
        try:
            await self.client.start_workflow(
                OrderWorkflow.run,
                OrderState(ref=ref, timings=order_timings(self.settings)),
                id=workflow_id,
                task_queue=self.settings.temporal.taskQueue,
                start_signal=signal,
                start_signal_args=args,
                # A finished order workflow is not restarted (it removed its finalizer);
                # a failed or terminated one is, so a bug fix can pick the order up again.
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
                static_summary=f"order {ref.namespace}/{ref.name}",
            )
        except RPCError as err:
            SIGNALS_SENT.labels(signal, "refused").inc()
            log.info("order workflow not signalled", order=ref.key, signal=signal, why=str(err))
            return
        SIGNALS_SENT.labels(signal, "sent").inc()
        log.info("order signalled", order=ref.key, signal=signal, generation=args[0] if args else None)

    async def on_class(self, event: WatchEvent) -> None:
        if event.type == "DELETED":
            await self._signal_class_orders(event.obj["metadata"]["name"])
            return
        cls = InferenceServiceClass.model_validate(event.obj)
        patch = class_status_patch(cls, datetime.now(UTC))
        if patch is not None:
            await asyncio.to_thread(self._write_class_status, cls.metadata.name, patch)
        if event.type != "SYNC" or patch is not None:
            await self._signal_class_orders(cls.metadata.name)

    def _write_class_status(self, name: str, status: dict[str, object]) -> None:
        try:
            self.custom.patch_cluster_custom_object_status(GROUP, VERSION, CLASSES, name, {"status": status})
        except ApiException as err:
            log.warning("class status not written", cls=name, status=err.status)

    async def _signal_class_orders(self, class_name: str) -> None:
        for ref in self.index.of_class(class_name):
            handle = self.client.get_workflow_handle(order_workflow_id(ref.namespace, ref.name, ref.uid))
            try:
                await handle.signal(OrderWorkflow.class_changed)
            except RPCError:
                SIGNALS_SENT.labels("class_changed", "refused").inc()
                continue
            SIGNALS_SENT.labels("class_changed", "sent").inc()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[WatchEvent] = asyncio.Queue()

        def emit(event: WatchEvent) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, event)

        def list_orders(**kwargs: Any) -> Any:
            return self.custom.list_cluster_custom_object(GROUP, VERSION, ORDERS, **kwargs)

        def list_classes(**kwargs: Any) -> Any:
            return self.custom.list_cluster_custom_object(GROUP, VERSION, CLASSES, **kwargs)

        threads = [
            threading.Thread(target=_list_and_watch, args=(fn, kind, emit, self.stop), daemon=True, name=kind)
            for fn, kind in ((list_classes, "class"), (list_orders, "order"))
        ]
        for thread in threads:
            thread.start()
        log.info("watcher started", task_queue=self.settings.temporal.taskQueue)
        try:
            while True:
                event = await queue.get()
                try:
                    await self.handle(event)
                except Exception:  # one bad event must not stop the watcher
                    log.exception("event not handled", kind=event.kind, type=event.type)
                    continue
                EVENTS_HANDLED.labels(event.kind, event.type).inc()
        finally:
            self.stop.set()
