"""The worker's informer cache of orders and classes (what ``activities.order_cache`` reads).

Two list+watch loops (``worker.observer.informer.ListWatch``, the observer's own: paged lists, watches
with bookmarks, a relist on 410 Gone, backoff on failures), one for every InferenceService and one for
every InferenceServiceClass, each in its thread; this keeps what they deliver, by ``namespace/name``
(or ``name``), under a lock, since the activities read it from their own threads. The managed fields
are not kept (the activities never read them, and they are most of an object's size).

The cache serves a read only once both kinds have listed (``synced``); before that, and whenever a
read needs a fresher object than it holds, the activities GET (``activities.order_cache``).
"""

from __future__ import annotations

import threading
from typing import Any, cast

import structlog
from kubernetes.client import ApiClient, CustomObjectsApi

from inference_api.types import CLASSES, GROUP, ORDERS, VERSION
from worker.observer.informer import CLASS, ORDER, Informer, InformerItem, Listed, ListWatch, Resource, Watched

log = structlog.get_logger(__name__)


def _kept(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata")
    if isinstance(metadata, dict) and "managedFields" in metadata:
        obj = {**obj, "metadata": {k: v for k, v in metadata.items() if k != "managedFields"}}
    return obj


class OrderCache:
    """Every order and class as the last listing or watch event said (``activities.order_cache.OrderCacheView``)."""

    def __init__(self, api: ApiClient, watch_timeout_seconds: int = 300) -> None:
        custom = CustomObjectsApi(api)

        def lister(plural: str) -> Any:
            def list_fn(**kwargs: Any) -> Any:
                return custom.list_cluster_custom_object(GROUP, VERSION, plural, **kwargs)

            return list_fn

        self._lock = threading.Lock()
        # The observer's caches by key (Informer); the changes they report are not needed here.
        self._informers = {ORDER: Informer(ORDER), CLASS: Informer(CLASS)}
        self.loops = [
            ListWatch(Resource(kind, lister(plural)), self._deliver, timeout_seconds=watch_timeout_seconds)
            for kind, plural in ((ORDER, ORDERS), (CLASS, CLASSES))
        ]

    def start(self) -> None:
        for loop in self.loops:
            loop.start()

    def stop(self) -> None:
        for loop in self.loops:
            loop.stop()

    def _deliver(self, item: InformerItem) -> None:
        with self._lock:
            informer = self._informers[item.kind]
            if isinstance(item, Listed):
                if not informer.synced:
                    log.info("order cache listed", kind=item.kind, objects=len(item.items))
                informer.listed([_kept(obj) for obj in item.items], item.served)
            elif isinstance(item, Watched):
                informer.watched(item.type, _kept(item.obj))

    def synced(self) -> bool:
        return all(informer.synced for informer in self._informers.values())

    def order(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            return cast(dict[str, Any] | None, self._informers[ORDER].get(f"{namespace}/{name}"))

    def order_class(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            return cast(dict[str, Any] | None, self._informers[CLASS].get(name))

    def alive(self) -> bool:
        return all(loop.thread.is_alive() for loop in self.loops)
