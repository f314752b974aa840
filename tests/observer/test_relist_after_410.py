"""The observer's relist after a 410, against the real API server (docs/operations.md: "a relist on
`410 Gone` or a broken watch, delivering only what differs from its cache").

One informer thread (``ListWatch``) lists the orders (InferenceServices) of a namespace, then
watches. Its first watch is made to start from a resourceVersion older than anything the API
server's watch cache of the kind keeps ("1": the cache began when the CRD was established, long
after), so the real kube-apiserver answers ``410 Gone`` (too old resource version) — and meanwhile objects were made,
changed and deleted that no watch saw. The loop relists at once — no failure recorded, no backoff —
and the cache (``Informer``) turns the second listing into exactly what was missed: one ADDED, one
MODIFIED, one DELETED, nothing for the object that did not change. The watch after it delivers
what happens next.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import pytest
from kubernetes.client import ApiClient, CustomObjectsApi

from inference_api.types import GROUP, ORDERS, VERSION
from worker.observer.decisions import ADDED, DELETED, MODIFIED, SYNC, object_key
from worker.observer.informer import ORDER, Change, Informer, InformerItem, Listed, ListWatch, Resource, Watched

pytestmark = pytest.mark.cluster

EXPIRED = "1"  # older than the watch cache of any custom resource keeps


def order(name: str, model: str) -> dict[str, Any]:
    # No module runs meanwhile: these orders are objects to list and watch, nothing acts on them.
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceService",
        "metadata": {"name": name, "labels": {"relist-test": "yes"}},
        "spec": {"inferenceServiceClassName": "relist-test", "model": {"src": "HuggingFace", "ref": {"name": model}}},
    }


def model_of(obj: Mapping[str, Any]) -> str:
    name: str = obj["spec"]["model"]["ref"]["name"]
    return name


def wait_for(check: Any, timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out: {what}")


def test_a_watch_answered_410_relists_and_delivers_only_what_was_missed(kube_admin: ApiClient, namespace: str) -> None:
    custom = CustomObjectsApi(kube_admin)

    def create(name: str) -> None:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, ORDERS, order(name, "org/one"))

    for name in ("kept", "changed", "deleted"):
        create(name)

    lists = 0
    watches: list[str] = []
    expired = threading.Event()

    def list_fn(**kwargs: Any) -> Any:
        nonlocal lists
        if kwargs.get("watch"):
            watches.append(str(kwargs.get("resource_version")))
            if not expired.is_set():
                # Between the listing and the watch, changes no watch will see; then the watch
                # starts from a resourceVersion the server no longer has.
                create("added")
                patch = {"spec": {"model": {"ref": {"name": "org/two"}}}}
                custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, ORDERS, "changed", patch)
                custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, ORDERS, "deleted")
                kwargs["resource_version"] = EXPIRED
                expired.set()
        else:
            lists += 1
        return custom.list_namespaced_custom_object(GROUP, VERSION, namespace, ORDERS, **kwargs)

    delivered: list[InformerItem] = []
    watch = ListWatch(Resource(ORDER, list_fn, label_selector="relist-test=yes"), delivered.append, timeout_seconds=30)
    watch.start()
    try:
        wait_for(lambda: lists >= 2 and len(watches) >= 2, what=f"a relist after the 410: {watches}, {delivered}")
        # The 410 is an answer, not a failure: relisted at once, nothing recorded against freshness.
        assert watch.failing_since is None, watch.failure
        assert watch.failure is None
        listings = [item for item in delivered if isinstance(item, Listed)]
        assert len(listings) == 2, delivered
        assert not [item for item in delivered if isinstance(item, Watched)], "the expired watch delivered events"

        cache = Informer(ORDER)
        first = cache.listed(listings[0].items)
        assert sorted((c.type, object_key(c.obj)) for c in first) == [
            (SYNC, f"{namespace}/{name}") for name in ("changed", "deleted", "kept")
        ]
        missed = cache.listed(listings[1].items)

        def summary(changes: list[Change]) -> list[tuple[str, str]]:
            return sorted((c.type, object_key(c.obj)) for c in changes)

        assert summary(missed) == [
            (ADDED, f"{namespace}/added"),
            (DELETED, f"{namespace}/deleted"),
            (MODIFIED, f"{namespace}/changed"),
        ]
        modified = next(c for c in missed if c.type == MODIFIED)
        assert modified.old is not None
        assert modified.new is not None
        assert (model_of(modified.old), model_of(modified.new)) == ("org/one", "org/two")
        assert set(cache.cache) == {f"{namespace}/{n}" for n in ("kept", "changed", "added")}

        # The watch from the relist's resourceVersion carries on.
        assert watches[1] != EXPIRED
        create("after")
        wait_for(
            lambda: any(isinstance(i, Watched) and i.obj["metadata"]["name"] == "after" for i in delivered),
            what="the watch after the relist delivers a new object",
        )
        assert lists == 2
    finally:
        watch.stop()
        watch.thread.join(10)
