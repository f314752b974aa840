"""The NetworkPolicy of an order: the serving port is reachable only from the namespaces that need it."""

from __future__ import annotations

from typing import Any

from activities.builders import build_network_policy, build_statefulset
from activities.builders.network_policy import allowed_namespaces
from inference_api.settings import ExposureSettings, ModuleSettings
from tests import factories as f


def _namespaces(policy: dict[str, Any]) -> list[str]:
    (rule,) = policy["spec"]["ingress"]
    (peer,) = rule["from"]
    assert set(peer) == {"namespaceSelector"}, "a podSelector beside it would narrow the peer to those pods"
    (expression,) = peer["namespaceSelector"]["matchExpressions"]
    assert expression["key"] == "kubernetes.io/metadata.name"
    assert expression["operator"] == "In"
    return list(expression["values"])


def test_external_order_lets_in_its_namespace_the_module_monitoring_and_the_ingress_controller() -> None:
    policy = build_network_policy(f.inputs())
    assert policy["apiVersion"] == "networking.k8s.io/v1"
    assert policy["kind"] == "NetworkPolicy"
    assert policy["metadata"]["name"] == "support-llm"
    assert policy["metadata"]["namespace"] == "support"
    assert policy["spec"]["podSelector"] == {"matchLabels": {"ai.deckhouse.io/inference-service": "support-llm"}}
    # Ingress only: the model fetcher downloads from the network.
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert _namespaces(policy) == ["d8-ai-inference", "d8-ingress-nginx", "d8-monitoring", "support"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": "http"}]


def test_the_policy_selects_the_pods_and_names_their_serving_port() -> None:
    inputs = f.inputs()
    policy = build_network_policy(inputs)
    pod = build_statefulset(inputs)["spec"]["template"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    ports = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
    assert policy["spec"]["ingress"][0]["ports"][0]["port"] in ports


def test_cluster_local_order_does_not_let_the_ingress_controller_in() -> None:
    policy = build_network_policy(f.inputs(the_class=f.cluster_local_none()))
    assert _namespaces(policy) == ["d8-ai-inference", "d8-monitoring", "support"]


def test_namespaces_come_from_the_settings_and_appear_once() -> None:
    settings = ModuleSettings(
        moduleNamespace="ai",
        exposure=ExposureSettings(ingressControllerNamespace="ingress", monitoringNamespace="support"),
    )
    assert allowed_namespaces(f.inputs(settings=settings)) == ["ai", "ingress", "support"]


def test_output_is_deterministic() -> None:
    assert build_network_policy(f.inputs()) == build_network_policy(f.inputs())
