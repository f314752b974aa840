"""The worker's informer cache of orders and classes against a real kube-apiserver (issue 37 item 6).

``worker.order_cache.OrderCache`` lists and watches orders and classes; ``OrderActivities`` reads
them from it when it is fresh enough for the read (``activities.order_cache``) and GETs otherwise.
Each test counts the GETs the activities sent (``ai_inference_kubernetes_requests_total``). A cache
is made to fall behind by stopping its watches: what it holds then stays as it was.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest
from kubernetes.client import ApiClient, CoreV1Api, CustomObjectsApi
from prometheus_client import REGISTRY

from activities.kube import bounded
from activities.order import OrderActivities
from inference_api.payloads import OrderRead, StatusUpdate
from inference_api.settings import ModuleSettings
from inference_api.types import CLASSES, GROUP, ORDERS, VERSION, Condition, ConditionStatus, ConditionType, Phase
from tests.polling import wait_until
from worker.order_cache import OrderCache

pytestmark = pytest.mark.cluster

MODEL = "Qwen/Qwen2.5-0.5B-Instruct"


def _cached(bench: Bench, name: str) -> bool:
    return bench.cache.order(bench.namespace, name) is not None


def _gets(resource: str) -> float:
    return (
        REGISTRY.get_sample_value("ai_inference_kubernetes_requests_total", {"verb": "get", "resource": resource}) or 0
    )


class Bench:
    def __init__(self, api: ApiClient, namespace: str) -> None:
        self.namespace = namespace
        self.custom = CustomObjectsApi(api)
        self.core = CoreV1Api(api)
        self.class_name = f"cache-{uuid.uuid4().hex[:6]}"
        self.custom.create_cluster_custom_object(
            GROUP,
            VERSION,
            CLASSES,
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "InferenceServiceClass",
                "metadata": {"name": self.class_name},
                "spec": {
                    "modelPolicy": {"allowedEndpointTypes": ["Chat"]},
                    "exposurePolicy": {"type": "ClusterLocal", "authentication": "None"},
                },
            },
        )
        self.cache = OrderCache(api, watch_timeout_seconds=30)
        self.cache.start()
        self.activities = OrderActivities(bounded(api), ModuleSettings(), planner=self._no_planner, cache=self.cache)

    @staticmethod
    def _no_planner(_: Any) -> Any:
        raise AssertionError("not planned here")

    def close(self) -> None:
        self.cache.stop()
        self.custom.delete_cluster_custom_object(GROUP, VERSION, CLASSES, self.class_name)

    def create_order(self, name: str) -> OrderRead:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "InferenceService",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "inferenceServiceClassName": self.class_name,
                "model": {"src": "HuggingFace", "ref": {"name": MODEL}},
            },
        }
        made = self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, ORDERS, body)
        read = OrderRead(namespace=self.namespace, name=name, uid=made["metadata"]["uid"])
        wait_until(lambda: self.cache.order(self.namespace, name) is not None, timeout=20, what="the order cached")
        return read

    def edit_model(self, name: str, model: str) -> int:
        edited = self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, ORDERS, name, {"spec": {"model": {"ref": {"name": model}}}}
        )
        return int(edited["metadata"]["generation"])

    def freeze(self) -> None:
        """The cache falls behind: its watches stop, what it holds stays."""
        self.cache.stop()
        for loop in self.cache.loops:
            loop.thread.join(timeout=10)


@pytest.fixture
def bench(kube_admin: ApiClient, make_namespace: Callable[..., str]) -> Iterator[Bench]:
    bench = Bench(kube_admin, make_namespace("cache"))
    wait_until(bench.cache.synced, timeout=20, what="the order cache listed")
    try:
        yield bench
    finally:
        bench.close()


def test_a_reconcile_read_is_answered_by_the_cache_once_it_holds_what_the_run_knows(bench: Bench) -> None:
    ref = bench.create_order("cached")
    orders, classes = _gets("inferenceservices"), _gets("inferenceserviceclasses")
    # A run's first read: it holds generation 1 (the observer's start) and no class yet.
    first = bench.activities.read_order(ref.model_copy(update={"generation": 1, "firstClassRead": True}))
    assert first.order is not None
    assert first.order.metadata.uid == ref.uid
    assert first.cls is not None
    assert first.cls.metadata.name == bench.class_name
    held_class = first.cls.metadata.generation
    again = bench.activities.read_order(ref.model_copy(update={"generation": 1, "classGeneration": held_class}))
    assert again.order == first.order
    assert again.cls == first.cls
    assert (_gets("inferenceservices") - orders, _gets("inferenceserviceclasses") - classes) == (0, 0)
    # A spec edit reaches the cache by its watch; the read that knows of it is answered from there too.
    generation = bench.edit_model("cached", "Qwen/Qwen2.5-1.5B-Instruct")
    wait_until(
        lambda: (bench.cache.order(bench.namespace, "cached") or {})["metadata"]["generation"] == generation,
        timeout=20,
        what="the edit cached",
    )
    edited = bench.activities.read_order(
        ref.model_copy(update={"generation": generation, "classGeneration": held_class})
    )
    assert edited.order is not None
    assert edited.order.spec.model.ref.name == "Qwen/Qwen2.5-1.5B-Instruct"
    assert _gets("inferenceservices") - orders == 0


def test_a_cache_behind_what_the_run_was_told_is_not_believed(bench: Bench) -> None:
    ref = bench.create_order("behind")
    bench.freeze()
    generation = bench.edit_model("behind", "Qwen/Qwen2.5-1.5B-Instruct")
    orders = _gets("inferenceservices")
    # Told of the edit (spec_changed): the cache holds the older spec, so the API server answers.
    told = bench.activities.read_order(ref.model_copy(update={"generation": generation}))
    assert told.order is not None
    assert told.order.spec.model.ref.name == "Qwen/Qwen2.5-1.5B-Instruct"
    assert _gets("inferenceservices") - orders == 1
    # Told of a deletion the cache has not seen: the API server answers that too.
    bench.custom.patch_namespaced_custom_object(
        GROUP, VERSION, bench.namespace, ORDERS, "behind", {"metadata": {"finalizers": ["test.example/hold"]}}
    )
    bench.custom.delete_namespaced_custom_object(GROUP, VERSION, bench.namespace, ORDERS, "behind")
    deleting = bench.activities.read_order(ref.model_copy(update={"generation": generation, "deleting": True}))
    assert deleting.order is not None
    assert deleting.order.metadata.deletionTimestamp
    assert _gets("inferenceservices") - orders == 2
    # A read of an earlier release's run (no generation: a plain OrderRef's payload) is always a GET.
    bench.activities.read_order(OrderRead(namespace=ref.namespace, name=ref.name, uid=ref.uid))
    assert _gets("inferenceservices") - orders == 3
    bench.custom.patch_namespaced_custom_object(
        GROUP, VERSION, bench.namespace, ORDERS, "behind", {"metadata": {"finalizers": None}}
    )


def _conditions(*ready: ConditionType) -> list[Condition]:
    return [
        Condition(
            type=kind.value,
            status=ConditionStatus.TRUE,
            reason="Done",
            message=f"{kind.value} done",
            lastTransitionTime="2026-12-06T08:00:00Z",
        )
        for kind in ready
    ]


def test_step_events_are_told_once_while_the_cache_is_behind_the_workers_own_status_writes(bench: Bench) -> None:
    """Two status writes in a row, the cache still holding the order from before the first: the
    second write's Events are what it changed since the first, not since what the cache held."""
    ref = bench.create_order("steps")
    bench.freeze()
    first = _conditions(ConditionType.CLASS_RESOLVED)
    second = _conditions(ConditionType.CLASS_RESOLVED, ConditionType.MODEL_RESOLVED)
    orders = _gets("inferenceservices")
    for conditions in (first, second):
        bench.activities.publish_status(
            StatusUpdate(ref=ref, phase=Phase.PENDING, reason="Resolving", observedGeneration=1, conditions=conditions)
        )
    assert _gets("inferenceservices") - orders == 0  # both read from the cache

    def told() -> dict[str, int]:
        events = bench.core.list_namespaced_event(bench.namespace, field_selector="involvedObject.name=steps").items
        return {e.message: e.count or 1 for e in events}

    wait_until(lambda: len(told()) == 2, timeout=20, what="two step Events")
    assert told() == {"ClassResolved True: ClassResolved done": 1, "ModelResolved True: ModelResolved done": 1}
    written = bench.custom.get_namespaced_custom_object(GROUP, VERSION, bench.namespace, ORDERS, "steps")
    assert [c["type"] for c in written["status"]["conditions"]] == ["ClassResolved", "ModelResolved"]


def test_a_first_apply_confirms_the_order_from_the_cache_and_an_uncached_one_asks_the_api_server(
    bench: Bench, kube_admin: ApiClient
) -> None:
    """The apply confirms the order stands before it makes anything (its token Secret, its writes):
    from the cache when it holds the order's uid, not being deleted; by GET without a cache."""
    from tests import factories as f
    from tests.workload.test_apply_cluster import DEVICE_CLASS, cluster_local_class
    from tests.workload.test_apply_cluster import Bench as ApplyBench

    applies = ApplyBench(bounded(kube_admin), bench.namespace)
    plan = f.plan(share=50, device_class=DEVICE_CLASS)
    gets: dict[str, float] = {}
    for name, cache in (("uncached", None), ("cached", bench.cache)):
        applies.activities = OrderActivities(
            bounded(kube_admin), ModuleSettings(), planner=Bench._no_planner, cache=cache
        )
        order = applies.create_order(name, bench.class_name)
        wait_until(partial(_cached, bench, name), timeout=20, what="the order cached")
        before = _gets("inferenceservices")
        applies.apply(applies.apply_input(order, cluster_local_class(), plan))
        gets[name] = _gets("inferenceservices") - before
        assert applies.get("apps/v1", "StatefulSet", name) is not None
    # A class without a token: no Secret to make, so one confirmation, before the writes.
    assert gets == {"uncached": 1, "cached": 0}
