"""The workload on a real API server: Pod Security ``restricted``, the NetworkPolicy, the certificate mark.

* An order applied by the apply activity into a namespace labelled
  ``pod-security.kubernetes.io/enforce: restricted``: the StatefulSet controller creates its pod
  (kwok nodes take it) and reports no FailedCreate. A control StatefulSet without the builders'
  security contexts gets FailedCreate in the same namespace, so the namespace does enforce.
* The NetworkPolicy is accepted as built (named port, namespace selector) and is owned by the order.
* A CustomCertificate class copies only a Secret the administrator labelled
  ``ai.deckhouse.io/custom-certificate: "true"``; another one refuses the workload (WorkloadRefused,
  non-retryable) and nothing of it reaches the order's namespace.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes.client import ApiClient, CoreV1Api, CustomObjectsApi
from temporalio.exceptions import ApplicationError

from activities.builders import build_statefulset
from activities.builders.common import LABEL_ORDER
from activities.builders.exposure import CUSTOM_CERTIFICATE_LABEL
from activities.order import OrderActivities
from devstack.cluster.launcher import LocalCluster
from inference_api.payloads import ApplyInput, ModelResolution, OrderRef
from inference_api.reasons import Reason
from inference_api.settings import ModuleSettings
from inference_api.types import GROUP, VERSION, EndpointType, InferenceService, InferenceServiceClass
from tests import factories as f
from tests.polling import wait_until

pytestmark = pytest.mark.cluster

MODEL = "Qwen/Qwen2.5-7B-Instruct"
DEVICE_CLASS = "nvidia-h100-mps-mig"  # one of the simulated inventory's DeviceClasses
ENFORCE = "pod-security.kubernetes.io/enforce"


def _class(exposure: dict[str, Any]) -> InferenceServiceClass:
    return InferenceServiceClass.model_validate(
        {
            "metadata": {"name": "security-class"},
            "spec": {
                "modelPolicy": {"allowedEndpointTypes": ["Chat"]},
                "scalingPolicy": {"minReplicas": 1, "maxReplicas": 2},
                "exposurePolicy": exposure,
                "updatePolicy": {"strategy": "RollingUpdate"},
            },
        }
    )


EXTERNAL_TOKEN = _class(
    {
        "type": "External",
        "authentication": "Token",
        "https": {"mode": "CertManager", "certManager": {"clusterIssuerName": "selfsigned"}},
    }
)


class Orders:
    """Orders in one namespace, applied with the real apply activity."""

    def __init__(self, api: ApiClient, namespace: str, settings: ModuleSettings | None = None) -> None:
        self.api = api
        self.namespace = namespace
        self.core = CoreV1Api(api)
        self.activities = OrderActivities(api, settings or ModuleSettings(), planner=self._no_planner)

    @staticmethod
    def _no_planner(_: Any) -> Any:
        raise AssertionError("apply_workload must not plan")

    def create(self, name: str) -> InferenceService:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "InferenceService",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "inferenceServiceClassName": "security-class",
                "model": {"src": "HuggingFace", "ref": {"name": MODEL}},
            },
        }
        created = CustomObjectsApi(self.api).create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "inferenceservices", body
        )
        return InferenceService.model_validate(created)

    def apply(self, order: InferenceService, cls: InferenceServiceClass) -> None:
        assert order.metadata.uid
        self.activities.apply_request(
            ApplyInput(
                ref=OrderRef(namespace=self.namespace, name=order.metadata.name, uid=order.metadata.uid),
                order=order,
                cls=cls,
                plan=f.plan(share=50, device_class=DEVICE_CLASS),
                resolution=ModelResolution(servedName=MODEL, source=MODEL),
                endpointType=EndpointType.CHAT,
            )
        )

    def get(self, api_version: str, kind: str, name: str) -> dict[str, Any] | None:
        return self.activities.applier.get(api_version, kind, name, self.namespace)

    def pods(self, order: str) -> list[Any]:
        return list(self.core.list_namespaced_pod(self.namespace, label_selector=f"{LABEL_ORDER}={order}").items)

    def failed_creates(self, statefulset: str) -> list[str]:
        listing = self.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={statefulset},reason=FailedCreate"
        )
        return [str(event.message) for event in listing.items]


@pytest.fixture
def restricted(kube_admin: ApiClient, make_namespace: Callable[..., str]) -> Orders:
    namespace = make_namespace("restricted")
    labels = {ENFORCE: "restricted", f"{ENFORCE}-version": "latest"}
    CoreV1Api(kube_admin).patch_namespace(namespace, {"metadata": {"labels": labels}})
    return Orders(kube_admin, namespace)


def _without_security_contexts(sts: dict[str, Any], name: str) -> dict[str, Any]:
    """The built StatefulSet as it was before this hardening: no security contexts, no owner."""
    body = copy.deepcopy(sts)
    body["metadata"]["name"] = name
    del body["metadata"]["ownerReferences"]
    labels = {LABEL_ORDER: name}
    body["spec"]["selector"] = {"matchLabels": labels}
    body["spec"]["template"]["metadata"]["labels"] = labels
    body["spec"]["replicas"] = 1
    pod = body["spec"]["template"]["spec"]
    del pod["securityContext"]
    for container in pod["initContainers"] + pod["containers"]:
        del container["securityContext"]
    return body


def test_the_api_server_admits_the_workload_pods_under_restricted(
    restricted: Orders, local_cluster: LocalCluster
) -> None:
    order = restricted.create("hardened")
    restricted.apply(order, EXTERNAL_TOKEN)

    # The StatefulSet controller made the pod, and Pod Security let it in.
    (pod,) = wait_until(lambda: restricted.pods("hardened"), timeout=60, what="the pod of hardened")
    assert pod.metadata.name == "hardened-0"
    assert pod.spec.security_context.run_as_non_root is True
    assert pod.spec.security_context.run_as_user == 1000
    for container in pod.spec.init_containers + pod.spec.containers:
        assert container.security_context.allow_privilege_escalation is False
        assert container.security_context.capabilities.drop == ["ALL"]
    # The controller reports a refused pod creation as FailedCreate; there is none.
    assert restricted.failed_creates("hardened") == []

    # Control: the same pod without the security contexts is refused in this namespace.
    sts = restricted.get("apps/v1", "StatefulSet", "hardened")
    assert sts is not None
    built = build_statefulset(f.inputs(the_order=f.order(name="unhardened", namespace=restricted.namespace)))
    local_cluster.apply([_without_security_contexts(built, "unhardened")])
    (message, *_) = wait_until(
        lambda: restricted.failed_creates("unhardened"), timeout=60, what="FailedCreate for unhardened"
    )
    assert "violates PodSecurity" in message, message
    assert "restricted" in message, message
    assert restricted.pods("unhardened") == []


def test_the_network_policy_is_accepted_as_built_and_owned(restricted: Orders) -> None:
    order = restricted.create("fenced")
    restricted.apply(order, EXTERNAL_TOKEN)
    policy = restricted.get("networking.k8s.io/v1", "NetworkPolicy", "fenced")
    assert policy is not None
    assert [(o["kind"], o["uid"]) for o in policy["metadata"]["ownerReferences"]] == [
        ("InferenceService", order.metadata.uid)
    ]
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": {LABEL_ORDER: "fenced"}}
    assert spec["policyTypes"] == ["Ingress"]
    (rule,) = spec["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": "http"}]
    (peer,) = rule["from"]
    (expression,) = peer["namespaceSelector"]["matchExpressions"]
    assert expression["values"] == sorted(
        ["d8-ai-inference", "d8-ingress-nginx", "d8-monitoring", restricted.namespace]
    )
    # The namespace selector matches by the label the API server puts on every namespace.
    namespace = restricted.core.read_namespace(restricted.namespace)
    assert namespace.metadata.labels[expression["key"]] == restricted.namespace


CUSTOM_CERTIFICATE = _class(
    {
        "type": "External",
        "authentication": "None",
        "https": {"mode": "CustomCertificate", "customCertificate": {"secretName": "wildcard"}},
    }
)


def _certificate_secret(labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "wildcard", "labels": labels},
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": "Q0VSVA==", "tls.key": "S0VZ"},
    }


def test_only_a_certificate_the_administrator_marked_is_copied(
    kube_admin: ApiClient, make_namespace: Callable[..., str]
) -> None:
    module_namespace = make_namespace("module")
    core = CoreV1Api(kube_admin)
    core.create_namespaced_secret(module_namespace, _certificate_secret({"app": "something-else"}))
    orders = Orders(kube_admin, make_namespace("orders"), ModuleSettings(moduleNamespace=module_namespace))
    order = orders.create("public")

    with pytest.raises(ApplicationError) as refused:
        orders.apply(order, CUSTOM_CERTIFICATE)
    assert refused.value.type == str(Reason.WORKLOAD_REFUSED) == "WorkloadRefused"
    assert refused.value.non_retryable
    assert f"{module_namespace}/wildcard" in refused.value.message
    assert CUSTOM_CERTIFICATE_LABEL in refused.value.message
    assert "Q0VSVA==" not in refused.value.message
    # Refused before anything was applied: no copy, no workload.
    assert orders.get("v1", "Secret", "public-tls") is None
    assert orders.get("apps/v1", "StatefulSet", "public") is None

    core.patch_namespaced_secret(
        "wildcard", module_namespace, {"metadata": {"labels": {CUSTOM_CERTIFICATE_LABEL: "true"}}}
    )
    orders.apply(order, CUSTOM_CERTIFICATE)
    copied = orders.get("v1", "Secret", "public-tls")
    assert copied is not None
    assert copied["data"] == {"tls.crt": "Q0VSVA==", "tls.key": "S0VZ"}
    assert CUSTOM_CERTIFICATE_LABEL not in (copied["metadata"].get("labels") or {})
    ingress = orders.get("networking.k8s.io/v1", "Ingress", "public")
    assert ingress is not None
    assert ingress["spec"]["tls"][0]["secretName"] == "public-tls"
    assert [p["path"] for p in ingress["spec"]["rules"][0]["http"]["paths"]] == ["/v1"]
