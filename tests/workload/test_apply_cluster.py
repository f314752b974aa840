"""The apply activity against a real kube-apiserver (and its controllers): no Temporal involved.

``OrderActivities.apply_workload`` is called directly with an ApplyInput built from a real
InferenceService (created in a namespace, so ownerReferences and Events point at a real uid),
a class, a LaunchPlan and a ModelResolution. What it must guarantee:

* idempotence: a second apply of the same input changes no object (no resourceVersion moves)
  and never rotates the auth token;
* a class that now names another StorageClass keeps the standing volume template and says so
  (``settledRegionKept``, then the SettledRegionKept Event);
* a new share replaces the immutable ResourceClaimTemplate without error;
* a ClusterLocal, unauthenticated class gets neither Secret nor Ingress;
* every object is owned by the order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes.client import ApiClient, CoreV1Api, CustomObjectsApi, NetworkingV1Api
from prometheus_client import REGISTRY

from activities.builders.common import (
    ANNOTATION_PRUNED_FOR,
    ANNOTATION_TEMPLATE_DIGEST,
    LABEL_MANAGED_BY,
    LABEL_ORDER,
    MANAGED_BY,
)
from activities.builders.move import ANNOTATION_MOVE, MOVE_TIMEOUT_SECONDS, MoveRecord
from activities.builders.objects import pruned_set_digest, settled_region_kept_message
from activities.builders.statefulset import API_KEY_ENV
from activities.kube import bounded
from activities.order import OrderActivities
from inference_api.payloads import ApplyInput, ApplyResult, ModelResolution, OrderEvent, OrderRef
from inference_api.plan import LaunchPlan
from inference_api.reasons import EventReason, Reason
from inference_api.settings import ModuleSettings
from inference_api.types import GROUP, VERSION, EndpointType, InferenceService, InferenceServiceClass
from tests import factories as f
from tests.polling import settled, wait_until

pytestmark = pytest.mark.cluster

MODEL = "Qwen/Qwen2.5-7B-Instruct"
DEVICE_CLASS = "nvidia-h100-mps-mig"  # one of the simulated inventory's DeviceClasses

# (apiVersion, kind, name suffix) of everything an External + Token order with an HPA owns.
OWNED: list[tuple[str, str, str]] = [
    ("v1", "Secret", "-auth"),
    ("resource.k8s.io/v1", "ResourceClaimTemplate", "-claim"),
    ("v1", "Service", ""),
    ("apps/v1", "StatefulSet", ""),
    ("autoscaling/v2", "HorizontalPodAutoscaler", ""),
    ("networking.k8s.io/v1", "Ingress", ""),
    ("networking.k8s.io/v1", "NetworkPolicy", ""),
]


def external_class(storage_class: str | None = "region-a") -> InferenceServiceClass:
    spec: dict[str, Any] = {
        "modelPolicy": {"allowedEndpointTypes": ["Chat", "Embeddings", "Rerank"]},
        "acceleratorPolicy": {
            "allowedSharingModes": ["Shared", "Dedicated"],
            "allowedPlacementTypes": ["WholeDevice", "Partition"],
            "maxAcceleratorCount": 1,
        },
        "scalingPolicy": {"minReplicas": 1, "maxReplicas": 2},
        "exposurePolicy": {
            "type": "External",
            "authentication": "Token",
            "https": {"mode": "CertManager", "certManager": {"clusterIssuerName": "selfsigned"}},
        },
        "updatePolicy": {"strategy": "RollingUpdate"},
    }
    if storage_class is not None:
        spec["modelStorageClassName"] = storage_class
    return InferenceServiceClass.model_validate({"metadata": {"name": "apply-external"}, "spec": spec})


def cluster_local_class() -> InferenceServiceClass:
    return InferenceServiceClass.model_validate(
        {
            "metadata": {"name": "apply-internal"},
            "spec": {
                "modelPolicy": {"allowedEndpointTypes": ["Chat"]},
                "exposurePolicy": {"type": "ClusterLocal", "authentication": "None"},
                "updatePolicy": {"strategy": "RollingUpdate"},
            },
        }
    )


class Bench:
    """One namespace, the activities object, and reads of what the apply made."""

    def __init__(self, api: ApiClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.custom = CustomObjectsApi(api)
        self.core = CoreV1Api(api)
        self.activities = OrderActivities(api, ModuleSettings(), planner=self._no_planner)

    @staticmethod
    def _no_planner(_: Any) -> Any:
        raise AssertionError("apply_workload must not plan")

    def create_order(self, name: str, class_name: str) -> InferenceService:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "InferenceService",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"inferenceServiceClassName": class_name, "model": {"src": "HuggingFace", "ref": {"name": MODEL}}},
        }
        created = self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, "inferenceservices", body)
        return InferenceService.model_validate(created)

    def apply_input(self, order: InferenceService, cls: InferenceServiceClass, plan: LaunchPlan) -> ApplyInput:
        assert order.metadata.uid
        return ApplyInput(
            ref=OrderRef(namespace=self.namespace, name=order.metadata.name, uid=order.metadata.uid),
            order=order,
            cls=cls,
            plan=plan,
            resolution=ModelResolution(servedName=MODEL, source=MODEL),
            endpointType=EndpointType.CHAT,
        )

    def apply(self, request: ApplyInput) -> ApplyResult:
        return self.activities.apply_request(request)

    def get(self, api_version: str, kind: str, name: str) -> dict[str, Any] | None:
        return self.activities.applier.get(api_version, kind, name, self.namespace)

    def owned(self, order: str) -> dict[str, dict[str, Any]]:
        """kind -> object, for each of OWNED that exists."""
        found = {}
        for api_version, kind, suffix in OWNED:
            obj = self.get(api_version, kind, order + suffix)
            if obj is not None:
                found[kind] = obj
        return found

    def versions(self, order: str) -> dict[str, str]:
        return {kind: obj["metadata"]["resourceVersion"] for kind, obj in self.owned(order).items()}

    def settle(self, order: str, quiet_seconds: float = 3, timeout: float = 60) -> dict[str, str]:
        """The resourceVersions once the controllers are done with the new objects.

        The StatefulSet controller writes the set's status as it makes the first pod, and the
        HPA controller writes the HPA's first status (its metric cannot be read here); a
        re-apply can only be judged once both have had their say and nothing moves.
        """

        def controllers_done() -> bool:
            objs = self.owned(order)
            sts, hpa = objs.get("StatefulSet"), objs.get("HorizontalPodAutoscaler")
            if sts is None:
                return False
            sts_status = sts.get("status") or {}
            if sts_status.get("observedGeneration") != sts["metadata"].get("generation"):
                return False
            if hpa is None:
                return True
            # The HPA looks every 15s: done once it has seen the replica the set made.
            hpa_status = hpa.get("status") or {}
            return bool(hpa_status.get("conditions")) and hpa_status.get("currentReplicas", 0) == sts_status.get(
                "replicas", 0
            )

        wait_until(controllers_done, timeout=timeout, what=f"controllers to observe {order}")
        return settled(lambda: self.versions(order), quiet=quiet_seconds, timeout=timeout, what=f"objects of {order}")

    def events(self, order: str, reason: str) -> list[Any]:
        listing = self.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={order},reason={reason}"
        )
        return list(listing.items)


@pytest.fixture
def bench(kube_admin: ApiClient, make_namespace: Callable[..., str]) -> Bench:
    return Bench(kube_admin, make_namespace("apply"))


def model_volume_storage_class(sts: dict[str, Any]) -> str | None:
    (template,) = [t for t in sts["spec"]["volumeClaimTemplates"] if t["metadata"]["name"] == "model"]
    value: str | None = template["spec"].get("storageClassName")
    return value


def test_a_second_apply_of_the_same_input_changes_nothing(bench: Bench) -> None:
    order = bench.create_order("steady", "apply-external")
    request = bench.apply_input(order, external_class(), f.plan(share=50, device_class=DEVICE_CLASS))

    first = bench.apply(request)
    assert not first.settledRegionKept
    assert first.authSecretName == "steady-auth"
    objects = bench.owned("steady")
    assert set(objects) == {kind for _, kind, _ in OWNED}, sorted(objects)
    token_before = bench.get("v1", "Secret", "steady-auth")["data"]["token"]  # type: ignore[index]
    before = bench.settle("steady")

    second = bench.apply(request)
    after = bench.versions("steady")
    changed = {kind: (before[kind], after.get(kind)) for kind in before if after.get(kind) != before[kind]}
    assert not changed, f"a re-apply of the same input rewrote {changed}"
    assert after == before
    # What the apply declares is the same; what it observed (replicas, their runtime) may have moved on.
    declared = {"endpoint", "authSecretName", "constraints", "settledRegionKept"}
    assert second.model_dump(include=declared) == first.model_dump(include=declared)
    secret = bench.get("v1", "Secret", "steady-auth")
    assert secret is not None, "the auth token was rotated"
    assert secret["data"]["token"] == token_before, "the auth token was rotated"


def test_every_object_is_owned_by_the_order(bench: Bench) -> None:
    order = bench.create_order("owned", "apply-external")
    bench.apply(bench.apply_input(order, external_class(), f.plan(share=50, device_class=DEVICE_CLASS)))
    objects = bench.owned("owned")
    assert set(objects) == {kind for _, kind, _ in OWNED}
    for kind, obj in objects.items():
        owners = obj["metadata"].get("ownerReferences") or []
        assert [(o["kind"], o["name"], o["uid"], o.get("controller")) for o in owners] == [
            ("InferenceService", "owned", order.metadata.uid, True)
        ], kind
        assert owners[0]["apiVersion"] == f"{GROUP}/{VERSION}", kind


def test_a_new_storage_class_keeps_the_standing_volume_and_is_recorded(bench: Bench) -> None:
    order = bench.create_order("settled", "apply-external")
    the_plan = f.plan(share=50, device_class=DEVICE_CLASS)
    first = bench.apply(bench.apply_input(order, external_class("region-a"), the_plan))
    assert not first.settledRegionKept
    sts = bench.get("apps/v1", "StatefulSet", "settled")
    assert sts is not None
    assert model_volume_storage_class(sts) == "region-a"

    moved = bench.apply(bench.apply_input(order, external_class("region-b"), the_plan))
    assert moved.settledRegionKept
    sts = bench.get("apps/v1", "StatefulSet", "settled")
    assert sts is not None
    assert model_volume_storage_class(sts) == "region-a"

    # The workflow records the divergence with the record_event activity: a real Event on the order.
    assert order.metadata.uid
    ref = OrderRef(namespace=bench.namespace, name="settled", uid=order.metadata.uid)
    message = settled_region_kept_message("region-a", "region-b")
    bench.activities.record_event(OrderEvent(ref=ref, reason=EventReason.SETTLED_REGION_KEPT, message=message))
    (event,) = bench.events("settled", EventReason.SETTLED_REGION_KEPT)
    assert event.involved_object.kind == "InferenceService"
    assert event.involved_object.uid == order.metadata.uid
    assert event.message == message
    assert event.type == "Normal"

    # Applying the new class again is still no change to the kept template.
    again = bench.apply(bench.apply_input(order, external_class("region-b"), the_plan))
    assert again.settledRegionKept


def test_a_new_share_replaces_the_claim_template(bench: Bench) -> None:
    order = bench.create_order("reshare", "apply-external")
    bench.apply(bench.apply_input(order, external_class(), f.plan(share=50, device_class=DEVICE_CLASS)))
    before = bench.get("resource.k8s.io/v1", "ResourceClaimTemplate", "reshare-claim")
    assert before is not None

    bench.apply(bench.apply_input(order, external_class(), f.plan(share=25, device_class=DEVICE_CLASS, volume_gib=40)))
    after = bench.get("resource.k8s.io/v1", "ResourceClaimTemplate", "reshare-claim")
    assert after is not None
    assert after["metadata"]["uid"] != before["metadata"]["uid"], "the template was not replaced"
    (request,) = after["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["capacity"]["requests"]["gpu.deckhouse.io/memory"] in ("20480Mi", "20Gi")
    assert [o["uid"] for o in after["metadata"]["ownerReferences"]] == [order.metadata.uid]


def test_a_withdrawn_move_says_the_replicas_are_rebuilt(bench: Bench) -> None:
    # A surge writes the new placement on the set; a withdraw after it (here: the new replicas never
    # Ready in time) rolls the old replicas onto it. Before, the order said RuntimeUpToDate meanwhile.
    order = bench.create_order("withdrawn", "apply-external")
    request = bench.apply_input(order, external_class(), f.plan(share=50, device_class=DEVICE_CLASS))
    first = bench.apply(request)
    assert first.runtimeReason == Reason.RUNTIME_UP_TO_DATE
    sts = bench.get("apps/v1", "StatefulSet", "withdrawn")
    assert sts is not None
    digest = sts["metadata"]["annotations"][ANNOTATION_TEMPLATE_DIGEST]
    late = MoveRecord(fromOrdinal=0, replicas=1, template=digest, since=1.0, gpus=1.0)
    assert late.since < MOVE_TIMEOUT_SECONDS
    bench.activities.applier.dynamic.resources.get(api_version="apps/v1", kind="StatefulSet").patch(
        name="withdrawn",
        namespace=bench.namespace,
        body={"metadata": {"annotations": {ANNOTATION_MOVE: late.encode()}}, "spec": {"replicas": 2}},
        content_type="application/merge-patch+json",
    )

    again = bench.apply(request)
    assert again.moveStep == "Withdraw"
    assert again.runtimeReason == Reason.WORKLOAD_REBUILDING
    assert not again.runtimeCurrent
    assert again.runtimeMessage.startswith("The move made before it breaks was withdrawn (")
    # This class autoscales (its HPA owns the replica count a surge needs): the move is not allowed.
    assert "no longer allows moves" in again.runtimeMessage


def test_cluster_local_without_authentication_has_no_secret_and_no_ingress(bench: Bench) -> None:
    order = bench.create_order("internal", "apply-internal")
    result = bench.apply(bench.apply_input(order, cluster_local_class(), f.plan(share=100)))
    assert result.authSecretName is None
    assert result.endpoint.type == "ClusterLocal"
    objects = bench.owned("internal")
    assert "Secret" not in objects
    assert "Ingress" not in objects
    assert {"NetworkPolicy", "ResourceClaimTemplate", "Service", "StatefulSet"} <= set(objects)
    assert bench.core.list_namespaced_secret(bench.namespace, label_selector=_order_label("internal")).items == []
    for obj in objects.values():
        assert [o["uid"] for o in obj["metadata"]["ownerReferences"]] == [order.metadata.uid]
    # The runtime is not told to expect a key.
    runtime = bench.get("apps/v1", "StatefulSet", "internal")["spec"]["template"]["spec"]["containers"][0]  # type: ignore[index]
    assert not any(item.get("name") == API_KEY_ENV for item in runtime.get("env") or [])


def _order_label(name: str) -> str:
    return f"ai.deckhouse.io/inference-service={name}"


def _requests(verb: str, resource: str) -> float:
    return (
        REGISTRY.get_sample_value("ai_inference_kubernetes_requests_total", {"verb": verb, "resource": resource}) or 0
    )


def test_an_apply_that_changes_no_name_lists_nothing_and_reads_the_statefulset_once(
    kube_admin: ApiClient, make_namespace: Callable[..., str]
) -> None:
    """The prune lists every kind an order can own; it runs when what the order should own (or the
    release) changed since the last one finished, as recorded on the StatefulSet — not at every apply."""
    bench = Bench(bounded(kube_admin), make_namespace("apply"))
    order = bench.create_order("quiet", "apply-external")
    request = bench.apply_input(order, external_class(), f.plan(share=50, device_class=DEVICE_CLASS))
    bench.apply(request)
    sts = bench.get("apps/v1", "StatefulSet", "quiet")
    assert sts is not None
    assert pruned_set_digest(sts), "the first apply's prune is recorded"
    # An object the order owns that nothing wants (an upgrade renamed it, say), made after that prune.
    stray = bench.get("v1", "Service", "quiet")
    assert stray is not None
    meta = stray["metadata"]
    bench.core.create_namespaced_service(
        bench.namespace,
        {
            "metadata": {"name": "quiet-old", "labels": meta["labels"], "ownerReferences": meta["ownerReferences"]},
            "spec": {"ports": [{"port": 80}]},
        },
    )
    bench.settle("quiet")  # the controllers' status writes done: the set read is the one written to
    owned_lists = ["statefulsets", "services", "ingresses", "horizontalpodautoscalers", "networkpolicies"]
    before = {r: _requests("list", r) for r in owned_lists}
    sts_reads = _requests("get", "statefulsets")

    bench.apply(request)
    assert {r: _requests("list", r) - before[r] for r in owned_lists} == dict.fromkeys(owned_lists, 0)
    assert _requests("get", "statefulsets") - sts_reads == 1  # the standing set, read once
    assert bench.get("v1", "Service", "quiet-old") is not None  # no prune: nothing changed since the last

    # Without the record (a release before this one, or a prune that did not finish) the apply prunes.
    bench.activities.apps.patch_namespaced_stateful_set(
        "quiet", bench.namespace, {"metadata": {"annotations": {ANNOTATION_PRUNED_FOR: None}}}
    )
    bench.apply(request)
    assert bench.get("v1", "Service", "quiet-old") is None
    assert bench.get("v1", "Service", "quiet") is not None
    assert pruned_set_digest(bench.get("apps/v1", "StatefulSet", "quiet"))


def test_a_first_apply_prunes_by_name_what_an_earlier_attempt_left(bench: Bench) -> None:
    """No StatefulSet of the order stands: anything it owns was made by an earlier attempt of this
    release's apply (cut short before the set), under this release's names — read by name, not listed."""
    order = bench.create_order("firstrun", "apply-internal")
    assert order.metadata.uid
    owner: dict[str, Any] = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService", "name": "firstrun"}
    owner |= {"uid": order.metadata.uid, "controller": True}
    labels = {LABEL_ORDER: "firstrun", LABEL_MANAGED_BY: MANAGED_BY}
    left: dict[str, Any] = {"metadata": {"name": "firstrun", "labels": labels, "ownerReferences": [owner]}}
    left["spec"] = {"defaultBackend": {"service": {"name": "firstrun", "port": {"number": 80}}}}
    NetworkingV1Api(bench.api).create_namespaced_ingress(bench.namespace, left)

    bench.apply(bench.apply_input(order, cluster_local_class(), f.plan(share=50, device_class=DEVICE_CLASS)))
    assert bench.get("networking.k8s.io/v1", "Ingress", "firstrun") is None  # a ClusterLocal order has none
    assert bench.get("apps/v1", "StatefulSet", "firstrun") is not None


def test_a_first_apply_reads_the_statefulset_and_the_claim_template_once_each(
    kube_admin: ApiClient, make_namespace: Callable[..., str]
) -> None:
    """A new order: the apply reads the StatefulSet at its start and the claim template before its
    write; finding neither, it makes them without reading either again (issue 37 item 6)."""
    bench = Bench(bounded(kube_admin), make_namespace("apply"))
    order = bench.create_order("fresh", "apply-internal")
    reads = {r: _requests("get", r) for r in ("statefulsets", "resourceclaimtemplates")}
    bench.apply(bench.apply_input(order, cluster_local_class(), f.plan(share=50, device_class=DEVICE_CLASS)))
    assert {r: _requests("get", r) - reads[r] for r in reads} == {"statefulsets": 1, "resourceclaimtemplates": 1}
    assert bench.get("apps/v1", "StatefulSet", "fresh") is not None
    assert bench.get("resource.k8s.io/v1", "ResourceClaimTemplate", "fresh-claim") is not None
