"""Kinds of other modules that may not be served (ai-models' Model/ClusterModel, cert-manager's
ClusterIssuer): a 404 on their list is an answer — an empty listing marked ``served=False``, fresh
for /readyz — and they are listed again, so a module installed later is informed on.

The list+watch threads run for real against a fake API (list functions that answer as the official
client does, or raise its 404); the watcher's readiness is judged by ``informers_fresh`` itself."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from inference_api.settings import ModuleSettings
from worker.observer import Observer
from worker.observer import informer as inf
from worker.observer.informer import InformerItem, Listed, ListWatch, Resource
from worker.processes import informers_fresh


class _Response:
    """What the official client returns with ``_preload_content=False``: a list's body, or a watch's stream."""

    def __init__(self, data: bytes = b"", lines: list[bytes] | None = None, hold: float = 0.0) -> None:
        self.data = data
        self.lines = lines or []
        self.hold = hold
        self.closed = threading.Event()

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        yield from self.lines
        # A watch that stays open until its timeout (or until stopped).
        self.closed.wait(self.hold)

    def release_conn(self) -> None:
        pass

    def close(self) -> None:
        self.closed.set()

    def shutdown(self) -> None:
        self.closed.set()


class FakeKind:
    """One kind of a fake API server: not served (404) until ``serve`` is called, then listed with its
    items and watched (each watch stays open ``hold`` seconds, with no event)."""

    def __init__(self, kind: str, served: bool = False, items: list[dict[str, Any]] | None = None) -> None:
        self.kind = kind
        self.served = served
        self.items = items or []
        self.lists = 0

    def serve(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.served = True

    def __call__(self, **kwargs: Any) -> _Response:
        if not self.served:
            raise ApiException(status=404, reason="Not Found")
        if kwargs.get("watch"):
            return _Response(hold=0.2)
        self.lists += 1
        body = {"kind": f"{self.kind}List", "apiVersion": "x/v1", "metadata": {"resourceVersion": "7"}}
        return _Response(json.dumps({**body, "items": self.items}).encode())


def named(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": "1", "uid": f"uid-{name}"}}


def collect(watch_resource: Resource, recheck: float) -> tuple[ListWatch, list[InformerItem]]:
    delivered: list[InformerItem] = []
    watch = ListWatch(watch_resource, delivered.append, timeout_seconds=2, absent_recheck_seconds=recheck)
    return watch, delivered


def wait_for(check: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.01)
    raise AssertionError("timed out")


def test_an_optional_kind_that_is_not_served_is_an_empty_fresh_listing_until_it_is() -> None:
    api = FakeKind(inf.CLUSTER_MODEL)
    watch, delivered = collect(Resource(inf.CLUSTER_MODEL, api, optional=True), recheck=0.05)
    watch.start()
    try:
        wait_for(lambda: delivered)
        assert delivered[0] == Listed(inf.CLUSTER_MODEL, [], served=False)
        assert watch.served is False
        assert watch.last_contact is not None
        assert watch.failing_since is None  # an answer, not a failure
        time.sleep(0.3)  # listed again several times: told once
        assert len(delivered) == 1

        # ai-models installed: its objects are listed, then watched.
        api.serve([named("qwen")])
        wait_for(lambda: len(delivered) == 2)
        listed = delivered[1]
        assert isinstance(listed, Listed)
        assert listed.served
        assert [i["metadata"]["name"] for i in listed.items] == ["qwen"]
        assert watch.served is True

        # Uninstalled again (the CRD deleted): the next list says so.
        api.served = False
        wait_for(lambda: len(delivered) == 3, timeout=10)
        assert delivered[2] == Listed(inf.CLUSTER_MODEL, [], served=False)
    finally:
        watch.stop()
        watch.thread.join(5)


def test_a_kind_of_the_module_itself_that_answers_404_still_fails() -> None:
    api = FakeKind(inf.ORDER)
    watch, delivered = collect(Resource(inf.ORDER, api), recheck=0.05)
    watch.max_backoff = 0.05
    watch.start()
    try:
        wait_for(lambda: watch.failing_since is not None)
        assert watch.failure == "HTTP 404"
        assert delivered == []
    finally:
        watch.stop()
        watch.thread.join(5)


def test_the_informer_cache_empties_when_its_kind_goes_and_knows_it_is_not_served() -> None:
    informer = inf.Informer(inf.CLUSTER_ISSUER)
    informer.listed([named("letsencrypt")])
    assert informer.served
    changes = informer.listed([], served=False)
    assert [c.type for c in changes] == ["DELETED"]
    assert not informer.served
    assert informer.cache == {}


async def test_the_watcher_is_ready_without_ai_models_and_informs_on_it_once_installed() -> None:
    """catalog.mode Enabled (the default) on a cluster without ai-models: before, the Model informer
    kept failing on its 404 and /readyz never passed."""
    orders = FakeKind(inf.ORDER, served=True)
    models = FakeKind(inf.MODEL)
    cluster_models = FakeKind(inf.CLUSTER_MODEL)
    observer = Observer(
        ApiClient(),
        object(),  # type: ignore[arg-type]  # no Temporal call is made here
        ModuleSettings(),
        resources=[
            Resource(inf.ORDER, orders),
            Resource(inf.MODEL, models, optional=True),
            Resource(inf.CLUSTER_MODEL, cluster_models, optional=True),
        ],
        watch_timeout_seconds=2,
        fingerprint="fp",
        read_secret=lambda namespace, name: None,
    )
    assert observer.settings.catalog.mode == "Enabled"
    queue = observer.start_informers()
    for watch in observer.watches:
        watch.absent_recheck_seconds = 0.05

    async def pump(until: Any, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while not until():
            assert time.monotonic() < deadline, informers_fresh(observer)
            with contextlib.suppress(TimeoutError):
                observer.handle(await asyncio.wait_for(queue.get(), 0.05))

    try:
        await pump(lambda: informers_fresh(observer)[0])
        ready, detail = informers_fresh(observer)
        assert ready, detail
        assert not observer.informers[inf.MODEL].served
        assert not observer.informers[inf.CLUSTER_MODEL].served

        cluster_models.serve([named("qwen")])
        await pump(lambda: "qwen" in observer.informers[inf.CLUSTER_MODEL].cache)
        assert observer.informers[inf.CLUSTER_MODEL].served
        assert informers_fresh(observer)[0]
    finally:
        await observer.stop()
