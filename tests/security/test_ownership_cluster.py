"""Owner references are checked, not believed; writes are bound to the order's uid (real kube-apiserver).

The apply is called directly (``OrderActivities.apply_request``, what the ``apply_workload`` activity
runs once it has checked the workflow's request), against a real API server with its garbage collector:

* a decoy carrying the module's labels is never adopted, patched or deleted, and the apply says why;
* an order deleted and made again under the same name while an apply of the old one is held between
  its reads and its writes: the held apply writes nothing, the new order keeps its objects, alone;
* ``kubectl delete --cascade=orphan`` of an order leaves no workload, Service or Ingress behind.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes.client import ApiClient, CoreV1Api, CustomObjectsApi, V1DeleteOptions
from temporalio.exceptions import ApplicationError

import activities.order as order_module
from activities.order import OrderActivities
from inference_api.payloads import ApplyInput, ModelResolution, OrderRef
from inference_api.reasons import Reason
from inference_api.settings import ModuleSettings
from inference_api.types import GROUP, VERSION, EndpointType, InferenceService, InferenceServiceClass
from tests import factories as f
from tests.polling import wait_until

pytestmark = pytest.mark.cluster

MODEL = "Qwen/Qwen2.5-7B-Instruct"
DEVICE_CLASS = "nvidia-h100-mps-mig"
ORDERS = "inferenceservices"
LABELS = {"app.kubernetes.io/managed-by": "ai-inference", "ai.deckhouse.io/inference-service": "{name}"}
# (apiVersion, kind, name suffix) of what an External + Token order owns.
OWNED: list[tuple[str, str, str]] = [
    ("v1", "Secret", "-auth"),
    ("resource.k8s.io/v1", "ResourceClaimTemplate", "-claim"),
    ("v1", "Service", ""),
    ("apps/v1", "StatefulSet", ""),
    ("autoscaling/v2", "HorizontalPodAutoscaler", ""),
    ("networking.k8s.io/v1", "Ingress", ""),
    ("networking.k8s.io/v1", "NetworkPolicy", ""),
]


def external_class() -> InferenceServiceClass:
    return f.external_token_certmanager().model_copy(
        update={"metadata": f.external_token_certmanager().metadata.model_copy(update={"name": "trust-external"})}
    )


def labels(name: str) -> dict[str, str]:
    return {k: v.format(name=name) for k, v in LABELS.items()}


class Bench:
    def __init__(self, api: ApiClient, namespace: str) -> None:
        self.namespace = namespace
        self.custom = CustomObjectsApi(api)
        self.core = CoreV1Api(api)
        self.activities = OrderActivities(api, ModuleSettings(), planner=self._no_planner)

    @staticmethod
    def _no_planner(_: Any) -> Any:
        raise AssertionError("the apply must not plan")

    def create_order(self, name: str) -> InferenceService:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "InferenceService",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "inferenceServiceClassName": "trust-external",
                "model": {"src": "HuggingFace", "ref": {"name": MODEL}},
            },
        }
        return InferenceService.model_validate(
            self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, ORDERS, body)
        )

    def request(self, order: InferenceService) -> ApplyInput:
        assert order.metadata.uid
        return ApplyInput(
            ref=OrderRef(namespace=self.namespace, name=order.metadata.name, uid=order.metadata.uid),
            order=order,
            cls=external_class(),
            plan=f.plan(share=50, device_class=DEVICE_CLASS),
            resolution=ModelResolution(servedName=MODEL, source=MODEL),
            endpointType=EndpointType.CHAT,
        )

    def get(self, api_version: str, kind: str, name: str) -> dict[str, Any] | None:
        return self.activities.applier.get(api_version, kind, name, self.namespace)

    def owned(self, order: str) -> dict[str, dict[str, Any]]:
        found = {}
        for api_version, kind, suffix in OWNED:
            obj = self.get(api_version, kind, order + suffix)
            if obj is not None:
                found[kind] = obj
        return found

    def owners(self, order: str) -> dict[str, list[str]]:
        return {
            kind: [o["uid"] for o in obj["metadata"].get("ownerReferences") or []]
            for kind, obj in self.owned(order).items()
        }

    def delete_order(self, name: str, policy: str | None = None) -> None:
        self.custom.delete_namespaced_custom_object(
            GROUP, VERSION, self.namespace, ORDERS, name, body=V1DeleteOptions(propagation_policy=policy)
        )


@pytest.fixture
def bench(kube_admin: ApiClient, make_namespace: Callable[..., str]) -> Bench:
    return Bench(kube_admin, make_namespace("trust"))


def refusal(call: Callable[[], Any]) -> str:
    with pytest.raises(ApplicationError) as caught:
        call()
    assert caught.value.type == Reason.WORKLOAD_REFUSED
    assert caught.value.non_retryable
    return str(caught.value)


def test_a_decoy_with_the_modules_labels_is_never_adopted_patched_or_deleted(bench: Bench) -> None:
    # A tenant's own Service named like the order, labelled as the module's, with no owner.
    decoy_service = bench.core.create_namespaced_service(
        bench.namespace,
        {
            "metadata": {"name": "decoyed", "labels": labels("decoyed")},
            "spec": {"ports": [{"port": 81, "name": "mine"}], "selector": {"app": "tenant"}},
        },
    )
    # And a labelled Secret of another name, which the order does not want: a prune would take it.
    decoy_secret = bench.core.create_namespaced_secret(
        bench.namespace, {"metadata": {"name": "decoyed-extra", "labels": labels("decoyed")}, "stringData": {"k": "v"}}
    )
    order = bench.create_order("decoyed")
    message = refusal(lambda: bench.activities.apply_request(bench.request(order)))
    assert "Service" in message
    assert "decoyed" in message
    assert "not this order's" in message
    service = bench.core.read_namespaced_service("decoyed", bench.namespace)
    assert not service.metadata.owner_references, "the decoy Service was adopted"
    assert service.metadata.resource_version == decoy_service.metadata.resource_version, "the decoy was patched"
    assert [p.port for p in service.spec.ports] == [81]
    # Nothing of the order stands past the refused object (the Service comes before the workload).
    assert bench.get("apps/v1", "StatefulSet", "decoyed") is None

    # The decoy Service goes; the order applies and its prune leaves the labelled Secret alone.
    bench.core.delete_namespaced_service("decoyed", bench.namespace)
    wait_until(lambda: bench.get("v1", "Service", "decoyed") is None, timeout=30, what="decoy Service gone")
    bench.activities.apply_request(bench.request(order))
    assert all(owners == [order.metadata.uid] for owners in bench.owners("decoyed").values())
    secret = bench.core.read_namespaced_secret("decoyed-extra", bench.namespace)
    assert secret.metadata.uid == decoy_secret.metadata.uid
    assert secret.metadata.resource_version == decoy_secret.metadata.resource_version
    assert not secret.metadata.owner_references


def test_an_order_made_again_while_an_apply_of_the_old_one_is_held_keeps_its_objects_alone(
    bench: Bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = bench.create_order("twin")
    old_request = bench.request(old)
    bench.activities.apply_request(old_request)  # the old order serves: its objects stand

    # The next apply of the old order is held between its reads and its writes.
    reached, go = threading.Event(), threading.Event()
    real = order_module.desired_objects

    def held(inputs: Any, *args: Any, **kwargs: Any) -> Any:
        if inputs.order.metadata.uid == old.metadata.uid:
            reached.set()
            assert go.wait(120)
        return real(inputs, *args, **kwargs)

    monkeypatch.setattr(order_module, "desired_objects", held)
    outcome: dict[str, Any] = {}

    def run_old() -> None:
        try:
            outcome["result"] = bench.activities.apply_request(old_request)
        except Exception as err:
            outcome["error"] = err

    thread = threading.Thread(target=run_old, daemon=True)
    thread.start()
    assert reached.wait(60), "the old apply never got to its writes"

    # The order is deleted (its objects go by garbage collection) and made again under the same name.
    bench.delete_order("twin")
    wait_until(lambda: not bench.owned("twin"), timeout=90, what="the old order's objects collected")
    new = bench.create_order("twin")
    assert new.metadata.uid != old.metadata.uid
    bench.activities.apply_request(bench.request(new))
    before = {kind: obj["metadata"]["uid"] for kind, obj in bench.owned("twin").items()}
    assert len(before) == len(OWNED)

    go.set()
    thread.join(60)
    error = outcome.get("error")
    assert isinstance(error, ApplicationError), f"the held apply of the deleted order went on: {outcome}"
    assert error.type == Reason.WORKLOAD_REFUSED
    assert "twin" in str(error)

    owners = bench.owners("twin")
    assert all(uids == [new.metadata.uid] for uids in owners.values()), owners
    after = {kind: obj["metadata"]["uid"] for kind, obj in bench.owned("twin").items()}
    assert after == before, "the new order lost or had replaced an object"
    # The StatefulSet is still the new order's own apply (the old one's writes never landed).
    sts = bench.get("apps/v1", "StatefulSet", "twin")
    assert sts is not None
    assert sts["metadata"]["ownerReferences"][0]["uid"] == new.metadata.uid


def test_a_held_apply_of_a_deleted_order_creates_nothing(bench: Bench, monkeypatch: pytest.MonkeyPatch) -> None:
    gone = bench.create_order("lonely")
    request = bench.request(gone)
    reached, go = threading.Event(), threading.Event()
    real = order_module.desired_objects

    def held(*args: Any, **kwargs: Any) -> Any:
        reached.set()
        assert go.wait(120)
        return real(*args, **kwargs)

    monkeypatch.setattr(order_module, "desired_objects", held)
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = bench.activities.apply_request(request)
        except Exception as err:
            outcome["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert reached.wait(60)
    bench.delete_order("lonely")
    wait_until(
        lambda: bench.custom.list_namespaced_custom_object(GROUP, VERSION, bench.namespace, ORDERS)["items"] == [],
        timeout=30,
        what="order gone",
    )
    go.set()
    thread.join(60)
    assert isinstance(outcome.get("error"), ApplicationError), outcome
    # Only the token Secret came before the hold; nothing was written after it.
    assert set(bench.owned("lonely")) <= {"Secret"}


def test_delete_with_cascade_orphan_leaves_no_workload_or_ingress_without_an_owner(bench: Bench) -> None:
    order = bench.create_order("orphaned")
    request = bench.request(order)
    bench.activities.ensure_finalizer(request.ref)
    bench.activities.apply_request(request)
    assert len(bench.owned("orphaned")) == len(OWNED)
    # A labelled object the module never applied stays whatever happens to the order.
    bench.core.create_namespaced_config_map(bench.namespace, {"metadata": {"name": "x", "labels": labels("orphaned")}})
    decoy = bench.core.create_namespaced_secret(
        bench.namespace,
        {"metadata": {"name": "orphaned-decoy", "labels": labels("orphaned")}, "stringData": {"k": "v"}},
    )

    bench.delete_order("orphaned", policy="Orphan")

    def stripped() -> bool:
        return all(not uids for uids in bench.owners("orphaned").values())

    # The garbage collector strips the ownerReferences instead of deleting (the module's finalizer holds
    # the order meanwhile).
    wait_until(stripped, timeout=60, what="ownerReferences stripped by --cascade=orphan")
    bench.activities.finalize_order(request.ref)  # the workflow's last step of a deletion
    wait_until(lambda: not bench.owned("orphaned"), timeout=60, what="the orphaned objects deleted")
    assert bench.core.read_namespaced_secret("orphaned-decoy", bench.namespace).metadata.uid == decoy.metadata.uid
    wait_until(
        lambda: bench.custom.list_namespaced_custom_object(GROUP, VERSION, bench.namespace, ORDERS)["items"] == [],
        timeout=30,
        what="order gone",
    )
