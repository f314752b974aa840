"""Four hundred labelled 700 KB Secrets made by a tenant leave the observer's memory where it was.

Anyone who may create Secrets in a namespace may put the module's labels on them. The observer's
Secret informer selects by those labels and, before, cached every such Secret whole: a tenant could
grow the observer's memory by the size of its Secrets (about 400 MB for these 400). It now lists and
watches their metadata only (PartialObjectMetadata): the informer, run in its own process exactly as
the observer runs it, against the real API server, grows by well under a megabyte. The whole-object
baseline and the numbers: benchmarks/secret_flood.py.
"""

from __future__ import annotations

import base64
import contextlib
import queue
import time
from collections.abc import Callable

import pytest
from kubernetes.client import ApiClient, CoreV1Api

from activities.builders.common import LABEL_MANAGED_BY, LABEL_ORDER, MANAGED_BY
from activities.health import token_from_secret
from devstack.cluster.launcher import LocalCluster
from tests.security.flood import COUNT, SIZE, measure
from worker.observer import decisions as d
from worker.observer import informer as inf
from worker.observer.decisions import FIELD_MANAGER
from worker.observer.informer import MODULE_SELECTOR, Change, Informer, InformerItem, Listed, ListWatch, Resource
from worker.observer.observer import secret_reader

pytestmark = pytest.mark.cluster


def test_a_flood_of_labelled_secrets_leaves_the_observers_memory_where_it_was(
    local_cluster: LocalCluster, namespace: str
) -> None:
    with local_cluster.api_client("ns-user") as tenant:
        memory = measure(local_cluster.kubeconfig("admin"), namespace, tenant, full=False)
    assert memory.cached == COUNT
    flood_kib = COUNT * SIZE // 1024
    # The whole Secrets would be ~273,000 KiB of data (and more as Python strings); their metadata is
    # a few hundred bytes each. 8 MiB leaves room for the allocator's noise, not for one in 30 Secrets.
    assert memory.growth_kib < 8 * 1024, (memory, flood_kib)
    # Free the API server's memory for the tests that follow (the namespace goes with its fixture).
    with local_cluster.api_client("admin") as admin:
        CoreV1Api(admin).delete_collection_namespaced_secret(namespace, label_selector=LABEL_ORDER)


def test_the_metadata_informer_sees_a_secret_changed_and_deleted_and_the_token_is_read_by_name(
    local_cluster: LocalCluster, kube_admin: ApiClient, namespace: str
) -> None:
    """Against the real API server: the Accept header is honoured (no data reaches the cache), a
    tenant's edit of the data arrives as a drift by the tenant's field manager, a deletion as
    DELETED, and the observer's one read of a Secret (by name) returns its token."""
    core = CoreV1Api(kube_admin)
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_ORDER: "chat"}
    core.create_namespaced_secret(
        namespace,
        {"metadata": {"name": "chat-auth", "labels": labels}, "data": {"token": base64.b64encode(b"one").decode()}},
        field_manager=FIELD_MANAGER,
    )
    resource = Resource(
        inf.SECRET, lambda **kw: core.list_namespaced_secret(namespace, **kw), MODULE_SELECTOR, metadata_only=True
    )
    items: queue.Queue[InformerItem] = queue.Queue()
    watch = ListWatch(resource, items.put, timeout_seconds=30)
    cache = Informer(inf.SECRET)
    changes: list[Change] = []

    def drain(until: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 30
        while not until():
            assert time.monotonic() < deadline, changes
            with contextlib.suppress(queue.Empty):
                item = items.get(timeout=0.5)
                changes.extend(
                    cache.listed(item.items) if isinstance(item, Listed) else cache.watched(item.type, item.obj)
                )

    watch.start()
    try:
        drain(lambda: cache.get(f"{namespace}/chat-auth") is not None)
        made = cache.get(f"{namespace}/chat-auth")
        assert made is not None
        assert "data" not in made
        assert made["metadata"]["labels"] == labels
        assert d.last_writer(made) == FIELD_MANAGER
        assert token_from_secret(secret_reader(kube_admin)(namespace, "chat-auth")) == "one"
        assert secret_reader(kube_admin)(namespace, "nope") is None
        # The tenant rewrites the token.
        with local_cluster.api_client("ns-user") as tenant:
            CoreV1Api(tenant).patch_namespaced_secret(
                "chat-auth", namespace, {"data": {"token": base64.b64encode(b"two").decode()}}, field_manager="tenant"
            )
        drain(lambda: any(c.type == d.MODIFIED for c in changes))
        (modified,) = [c for c in changes if c.type == d.MODIFIED]
        assert d.owned_change(inf.SECRET, d.MODIFIED, modified.old, modified.new) == (
            f"Secret {namespace}/chat-auth changed by tenant"
        )
        assert token_from_secret(secret_reader(kube_admin)(namespace, "chat-auth")) == "two"
        core.delete_namespaced_secret("chat-auth", namespace)
        drain(lambda: any(c.type == d.DELETED for c in changes))
        assert cache.get(f"{namespace}/chat-auth") is None
    finally:
        watch.stop()
