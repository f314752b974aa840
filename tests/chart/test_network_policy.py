"""The module namespace's NetworkPolicies, judged on the rendered chart.

A small evaluator of NetworkPolicy semantics (policy types, pod and namespace selectors with
matchLabels and matchExpressions, ipBlock, named and numbered ports, both directions) answers, for
a connection between two endpoints, whether the rendered policies let it through. The module's
pods are the rendered pod templates with their labels and container ports; a connection to a
Service goes to its targetPort on the pods it selects, so a policy that names a port the Service
no longer sends to fails here. The other endpoints are what the admin guide names: Prometheus in
the monitoring namespace, the cluster DNS, the API server (an address, not a pod), the catalog, an
order's replica and an attacker's pod in a tenant namespace, a stray pod in the module namespace.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.chart.helm import NAMESPACE, REPO_ROOT, Doc, Helm, find, of_kind

NAME_LABEL = "kubernetes.io/metadata.name"
MONITORING = "d8-monitoring"
API_SERVER = "10.0.0.1"
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "Job")


@dataclass(frozen=True)
class Pod:
    name: str
    namespace: str
    labels: dict[str, str]
    ports: dict[str, int] = field(default_factory=dict)
    ip: str = ""

    @property
    def namespace_labels(self) -> dict[str, str]:
        return {NAME_LABEL: self.namespace}


def ip_endpoint(ip: str) -> Pod:
    """An address outside the pod network (the API server, the internet)."""
    return Pod(name=ip, namespace="", labels={}, ip=ip)


def selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def peer_matches(peer: dict[str, Any], policy_namespace: str, other: Pod) -> bool:
    if "ipBlock" in peer:
        if not other.ip:
            return False  # pod traffic: ipBlock is meant for addresses outside the pod network
        block = peer["ipBlock"]
        address = ipaddress.ip_address(other.ip)
        return address in ipaddress.ip_network(block["cidr"]) and not any(
            address in ipaddress.ip_network(e) for e in block.get("except") or []
        )
    if other.ip:
        return False
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], other.namespace_labels):
            return False
    elif other.namespace != policy_namespace:
        return False
    return "podSelector" not in peer or selects(peer["podSelector"], other.labels)


def port_matches(ports: list[dict[str, Any]] | None, target: Pod, port: int, protocol: str) -> bool:
    if not ports:
        return True
    for entry in ports:
        if entry.get("protocol", "TCP") != protocol:
            continue
        wanted = entry.get("port")
        if wanted is None:
            return True
        number = target.ports.get(wanted) if isinstance(wanted, str) else wanted
        if number == port:
            return True
    return False


def allowed_one_way(
    policies: list[Doc], pod: Pod, other: Pod, direction: str, port: int, protocol: str, target: Pod
) -> bool:
    """Whether ``pod``'s policies let ``other`` in (Ingress) or let ``pod`` out to ``other`` (Egress)."""
    if pod.ip:
        return True  # not a pod: no policy of ours applies
    mine = [
        p
        for p in policies
        if p["metadata"]["namespace"] == pod.namespace
        and selects(p["spec"]["podSelector"], pod.labels)
        and direction in p["spec"].get("policyTypes", ["Ingress"])
    ]
    if not mine:
        return True
    key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    for policy in mine:
        for rule in policy["spec"].get(key) or []:
            peers = rule.get(peers_key)
            if peers and not any(peer_matches(peer, pod.namespace, other) for peer in peers):
                continue
            if port_matches(rule.get("ports"), target, port, protocol):
                return True
    return False


def allowed(policies: list[Doc], source: Pod, destination: Pod, port: int, protocol: str = "TCP") -> bool:
    return allowed_one_way(policies, source, destination, "Egress", port, protocol, destination) and allowed_one_way(
        policies, destination, source, "Ingress", port, protocol, destination
    )


def module_pods(docs: list[Doc]) -> dict[str, Pod]:
    """The rendered pod templates, by component, with their container ports."""
    out = {}
    for kind in WORKLOAD_KINDS:
        for workload in of_kind(docs, kind):
            template = workload["spec"]["template"]
            labels = template["metadata"]["labels"]
            ports = {
                p["name"]: p["containerPort"]
                for c in template["spec"]["containers"]
                for p in c.get("ports") or []
                if "name" in p
            }
            out[labels["app.kubernetes.io/component"]] = Pod(workload["metadata"]["name"], NAMESPACE, labels, ports)
    return out


def via_service(docs: list[Doc], pods: dict[str, Pod], service: str, port: int) -> tuple[Pod, int]:
    """The pod and container port a connection to ``service``:``port`` lands on."""
    svc = find(docs, "Service", service)
    (spec_port,) = [p for p in svc["spec"]["ports"] if p["port"] == port]
    (pod,) = [p for p in pods.values() if selects({"matchLabels": svc["spec"]["selector"]}, p.labels)]
    target = spec_port.get("targetPort", port)
    return pod, pod.ports[target] if isinstance(target, str) else target


OTHERS = {
    "prometheus": Pod("prometheus-main-0", MONITORING, {"app.kubernetes.io/name": "prometheus"}),
    "dns": Pod("coredns", "kube-system", {"k8s-app": "kube-dns"}, {"dns": 53}),
    "catalog": Pod("ai-models-controller", "d8-ai-models", {"app": "ai-models-controller"}, {"https": 8080}),
    "replica": Pod(
        "chat-0",
        "team-a",
        {"app.kubernetes.io/managed-by": "ai-inference", "ai.deckhouse.io/inference-service": "chat"},
        {"http": 8000},
    ),
    "attacker": Pod("attacker", "team-a", {"app": "curl"}, {"http": 8000}),
    "stray": Pod("debug", NAMESPACE, {"run": "debug"}),
    "api": ip_endpoint(API_SERVER),
    "internet": ip_endpoint("203.0.113.7"),
}


@pytest.fixture(scope="module")
def docs(helm: Helm) -> list[Doc]:
    return helm.render()


def test_every_module_pod_is_selected_by_the_default_deny_and_its_own_policy(docs: list[Doc]) -> None:
    policies = of_kind(docs, "NetworkPolicy")
    deny = find(docs, "NetworkPolicy", "ai-inference-default-deny")
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    pods = module_pods(docs)
    assert set(pods) == {"worker", "watcher", "planner", "temporal", "crd-upgrade", "disable"}
    for component, pod in pods.items():
        own = find(docs, "NetworkPolicy", f"ai-inference-{component}")
        assert selects(own["spec"]["podSelector"], pod.labels), component
        assert own["spec"]["policyTypes"] == ["Ingress", "Egress"], component
        for policy in policies:
            if policy["metadata"]["name"] not in ("ai-inference-default-deny", f"ai-inference-{component}"):
                assert not selects(policy["spec"]["podSelector"], pod.labels), (component, policy["metadata"]["name"])
    # Every policy is in the module namespace and selects at least one of its pods.
    for policy in policies:
        assert policy["metadata"]["namespace"] == NAMESPACE
        assert any(selects(policy["spec"]["podSelector"], p.labels) for p in pods.values()), policy["metadata"]["name"]


def test_temporals_frontend_answers_the_module_processes_only_and_its_ui_no_pod(docs: list[Doc]) -> None:
    policies = of_kind(docs, "NetworkPolicy")
    pods = module_pods(docs)
    temporal, grpc = via_service(docs, pods, "ai-inference-temporal", 7233)
    # The UI (and the dev server's own gRPC port) listen on the pod's loopback only: the Service
    # publishes the mTLS terminator alone, and `kubectl port-forward` (the admin guide's way to the
    # UI) goes through the kubelet, which no NetworkPolicy governs.
    service_ports = {p["port"] for p in find(docs, "Service", "ai-inference-temporal")["spec"]["ports"]}
    assert service_ports == {7233}
    for caller in ("worker", "watcher"):
        assert allowed(policies, pods[caller], temporal, grpc), caller
    for caller in ("planner", "crd-upgrade"):
        assert not allowed(policies, pods[caller], temporal, grpc), caller
    for other in ("prometheus", "replica", "attacker", "stray"):
        assert not allowed(policies, OTHERS[other], temporal, grpc), other
    # Temporal itself reaches nothing but DNS.
    assert allowed(policies, temporal, OTHERS["dns"], 53, "UDP")
    for other in ("api", "internet", "catalog", "replica"):
        assert not allowed(policies, temporal, OTHERS[other], 443), other
        assert not allowed(policies, temporal, OTHERS[other], 8000), other


def test_the_planner_answers_the_worker_and_monitoring_only(docs: list[Doc]) -> None:
    policies = of_kind(docs, "NetworkPolicy")
    pods = module_pods(docs)
    planner, https = via_service(docs, pods, "ai-inference-planner", 8443)
    assert allowed(policies, pods["worker"], planner, https)
    assert allowed(policies, OTHERS["prometheus"], planner, https)
    for caller in ("watcher", "temporal", "crd-upgrade"):
        assert not allowed(policies, pods[caller], planner, https), caller
    for other in ("attacker", "replica", "stray"):
        assert not allowed(policies, OTHERS[other], planner, https), other
    # Out: DNS and the API server, never a tenant's pod.
    assert allowed(policies, planner, OTHERS["dns"], 53, "UDP")
    assert allowed(policies, planner, OTHERS["api"], 6443)
    assert not allowed(policies, planner, OTHERS["replica"], 8000)
    assert not allowed(policies, planner, OTHERS["catalog"], 8080)


def test_metrics_ports_answer_monitoring_only(docs: list[Doc]) -> None:
    policies = of_kind(docs, "NetworkPolicy")
    pods = module_pods(docs)
    for component in ("worker", "watcher"):
        pod = pods[component]
        for port in ("health", "sdk-metrics"):
            assert allowed(policies, OTHERS["prometheus"], pod, pod.ports[port]), (component, port)
            for other in ("attacker", "replica", "stray"):
                assert not allowed(policies, OTHERS[other], pod, pod.ports[port]), (component, port, other)
            assert not allowed(policies, pods["planner"], pod, pod.ports[port])


def test_the_pod_monitors_scrape_the_ports_the_policies_open(helm: Helm) -> None:
    docs = helm.render(api_versions=("monitoring.coreos.com/v1/PodMonitor",))
    policies = of_kind(docs, "NetworkPolicy")
    pods = module_pods(docs)
    monitors = of_kind(docs, "PodMonitor")
    assert monitors
    for monitor in monitors:
        if monitor["metadata"]["name"] == "ai-inference-runtime":
            continue  # the orders' replicas: their own NetworkPolicies (activities/builders)
        (pod,) = [p for p in pods.values() if selects(monitor["spec"]["selector"], p.labels)]
        for endpoint in monitor["spec"]["podMetricsEndpoints"]:
            assert allowed(policies, OTHERS["prometheus"], pod, pod.ports[endpoint["port"]]), (pod.name, endpoint)


def test_the_processes_reach_what_they_call_and_nothing_else(docs: list[Doc]) -> None:
    policies = of_kind(docs, "NetworkPolicy")
    pods = module_pods(docs)
    for component in ("worker", "watcher", "planner", "crd-upgrade"):
        pod = pods[component]
        assert allowed(policies, pod, OTHERS["dns"], 53, "UDP"), component
        assert allowed(policies, pod, OTHERS["dns"], 53, "TCP"), component
        assert allowed(policies, pod, OTHERS["api"], 6443), component
        assert not allowed(policies, pod, OTHERS["attacker"], 8000), component
        assert not allowed(policies, pod, OTHERS["internet"], 80), component
    for prober in ("worker", "watcher"):
        assert allowed(policies, pods[prober], OTHERS["replica"], 8000), prober
        assert not allowed(policies, pods[prober], OTHERS["replica"], 22), prober
    assert allowed(policies, pods["worker"], OTHERS["catalog"], 8080)
    assert not allowed(policies, pods["watcher"], OTHERS["catalog"], 8080)
    for component in ("planner", "crd-upgrade"):
        assert not allowed(policies, pods[component], OTHERS["replica"], 8000), component


def test_the_api_server_addresses_narrow_egress(helm: Helm) -> None:
    docs = helm.render(
        {
            "networkPolicy.apiServer.cidrs": [f"{API_SERVER}/32"],
            "networkPolicy.apiServer.ports": [6443],
            # Else the worker reaches the hub's port 443 anywhere (the next test).
            "aiInference.workload.modelSource.huggingFace.pinRevision": False,
        }
    )
    policies = of_kind(docs, "NetworkPolicy")
    worker = module_pods(docs)["worker"]
    assert allowed(policies, worker, OTHERS["api"], 6443)
    assert not allowed(policies, worker, OTHERS["internet"], 6443)
    assert not allowed(policies, worker, OTHERS["api"], 443)
    # Without them (the default), the API server's ports are open to any address: the guide says to set them.
    defaults = of_kind(helm.render(), "NetworkPolicy")
    assert allowed(defaults, worker, OTHERS["internet"], 443)


def test_an_existing_temporal_and_the_catalog_off_change_the_worker_egress(helm: Helm) -> None:
    docs = helm.render(
        {
            "aiInference.temporal.embedded.enabled": False,
            "aiInference.temporal.address": "temporal.example.com:7444",
            "aiInference.catalog.mode": "None",
        }
    )
    policies = of_kind(docs, "NetworkPolicy")
    pods = module_pods(docs)
    assert "temporal" not in pods
    assert [p["metadata"]["name"] for p in policies if p["metadata"]["name"] == "ai-inference-temporal"] == []
    remote = ip_endpoint("198.51.100.9")
    for component in ("worker", "watcher"):
        assert allowed(policies, pods[component], remote, 7444), component
        assert not allowed(policies, pods[component], remote, 7233), component
    assert not allowed(policies, pods["worker"], OTHERS["catalog"], 8080)


def test_policies_can_be_left_out(helm: Helm) -> None:
    assert of_kind(helm.render({"networkPolicy.enabled": False}), "NetworkPolicy") == []


def test_the_admin_guide_tables_the_policies() -> None:
    guide = (REPO_ROOT / "docs" / "admin-guide.md").read_text()
    section = guide[guide.index("### Network policy") : guide.index("### Policy scan")]
    for pod in ("ai-inference-temporal", "ai-inference-planner", "ai-inference-worker", "ai-inference-watcher"):
        assert f"`{pod}`" in section, pod
    for words in ("port-forward", "monitoringNamespace", "networkPolicy.apiServer.cidrs", "default-deny"):
        assert words in section, words


def test_extra_egress_reaches_the_worker_and_the_watcher_only(helm: Helm) -> None:
    extra = [{"to": [{"ipBlock": {"cidr": "198.51.100.0/24"}}], "ports": [{"protocol": "TCP", "port": 7233}]}]
    docs = helm.render({"networkPolicy.extraEgress": extra})
    policies = of_kind(docs, "NetworkPolicy")
    pods = module_pods(docs)
    remote = ip_endpoint("198.51.100.9")
    for component in ("worker", "watcher"):
        assert allowed(policies, pods[component], remote, 7233), component
    for component in ("planner", "temporal", "crd-upgrade"):
        assert not allowed(policies, pods[component], remote, 7233), component
    assert not allowed(of_kind(helm.render(), "NetworkPolicy"), pods["worker"], remote, 7233)


def test_the_worker_reaches_the_hubs_port_to_pin_revisions_and_nothing_more(helm: Helm) -> None:
    """The worker asks the hub which commit an order's repository points at: huggingface.co's 443 by
    default, a mirror's or the proxy's own port when set, nothing at all with pinRevision off; the
    watcher never."""
    hf = "aiInference.workload.modelSource.huggingFace"
    cases: list[tuple[dict[str, object], int | None]] = [
        ({}, 443),
        ({f"{hf}.endpoint": "https://hf-mirror.example.com:8443"}, 8443),
        ({f"{hf}.endpoint": "http://hf-mirror.example.com"}, 80),
        ({f"{hf}.httpsProxy": "http://proxy.example.com:3128"}, 3128),
        ({f"{hf}.pinRevision": False}, None),
    ]
    for values, port in cases:
        docs = helm.render({"networkPolicy.apiServer.cidrs": [f"{API_SERVER}/32"], **values})
        policies = of_kind(docs, "NetworkPolicy")
        pods = module_pods(docs)
        for probe in (443, 8443, 80, 3128):
            assert allowed(policies, pods["worker"], OTHERS["internet"], probe) == (probe == port), (values, probe)
            assert not allowed(policies, pods["watcher"], OTHERS["internet"], probe), (values, probe)
