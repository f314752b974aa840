"""The stand-in kubelet's pure rules (devstack.standins.pod_kubelet): which local program an image's
command is, the names a pod's /etc/hosts gives, the variables of Service links and ``$(VAR)`` expansion.
The kubelet itself runs the chart's pods in tests/chart/test_chart_pods_run.py."""

from __future__ import annotations

from typing import Any

import pytest

from devstack.cluster.pki import KUBERNETES_SERVICE_IP
from devstack.standins.pod_kubelet import PodAddresses, backoff, expand, hosts_file, image_segment, service_link_env


@pytest.mark.parametrize(
    ("image", "segment"),
    [
        ("ai-inference:0.1.0", "ai-inference"),
        ("registry.example.com/deckhouse/ai-inference:0.2.0@sha256:" + "a" * 64, "ai-inference"),
        ("temporalio/temporal:1.9.1@sha256:" + "b" * 64, "temporal"),
        ("nginxinc/nginx-unprivileged:1.28-alpine", "nginx-unprivileged"),
        ("localhost:5000/nginx-unprivileged", "nginx-unprivileged"),
    ],
)
def test_an_image_is_known_by_its_repositorys_last_segment(image: str, segment: str) -> None:
    assert image_segment(image) == segment


def _pod(name: str, ip: str | None, labels: dict[str, str], ready: bool) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {
            **({"podIP": ip} if ip else {}),
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def _service(name: str, selector: dict[str, str] | None, ip: str = "10.96.3.4", port: int = 7233) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"selector": selector, "clusterIP": ip, "ports": [{"port": port, "protocol": "TCP"}]},
    }


def test_hosts_name_each_service_at_a_ready_pod_it_selects_and_the_api_server_at_its_service_address() -> None:
    pods = [
        _pod("temporal-0", "10.244.0.9", {"app": "temporal"}, ready=False),
        _pod("temporal-1", "10.244.0.8", {"app": "temporal"}, ready=True),
        _pod("planner-x", None, {"app": "planner"}, ready=False),
        _pod("worker-a", "10.244.0.2", {"app": "worker"}, ready=True),
    ]
    services = [_service("temporal", {"app": "temporal"}), _service("planner", {"app": "planner"}), _service("x", None)]
    hosts = hosts_file("d8-ai-inference", services, pods, pods[3]).splitlines()
    assert "10.244.0.8\ttemporal.d8-ai-inference.svc temporal.d8-ai-inference.svc.cluster.local" in hosts
    assert "10.244.0.2\tworker-a" in hosts
    assert any(line.startswith(f"{KUBERNETES_SERVICE_IP}\t") and "kubernetes.default.svc" in line for line in hosts)
    # No address yet, or no selector: no name (a lookup fails at once rather than reaching a wrong pod).
    assert not [line for line in hosts if "planner." in line or "\tx." in line]


def test_a_not_ready_pod_is_named_when_no_ready_one_exists() -> None:
    pods = [_pod("temporal-0", "10.244.0.9", {"app": "temporal"}, ready=False)]
    hosts = hosts_file("ns", [_service("temporal", {"app": "temporal"})], pods, pods[0])
    assert "10.244.0.9\ttemporal.ns.svc temporal.ns.svc.cluster.local" in hosts


def test_service_links_are_the_kubelets_variables() -> None:
    env = service_link_env([_service("ai-inference-temporal", {"a": "b"}), _service("headless", {"a": "b"}, ip="None")])
    assert env["AI_INFERENCE_TEMPORAL_SERVICE_HOST"] == "10.96.3.4"
    assert env["AI_INFERENCE_TEMPORAL_SERVICE_PORT"] == "7233"
    assert env["AI_INFERENCE_TEMPORAL_PORT"] == "tcp://10.96.3.4:7233"
    assert env["AI_INFERENCE_TEMPORAL_PORT_7233_TCP_ADDR"] == "10.96.3.4"
    assert not [k for k in env if k.startswith("HEADLESS")]


@pytest.mark.parametrize(
    ("value", "expanded"),
    [
        ("$(A)/x", "1/x"),
        ("$$(A)", "$(A)"),
        ("$(MISSING)", "$(MISSING)"),
        ("plain", "plain"),
        ("$(A)$(B)", "12"),
    ],
)
def test_variables_expand_as_the_kubelet_does(value: str, expanded: str) -> None:
    assert expand(value, {"A": "1", "B": "2"}) == expanded


def test_restarts_back_off_doubling_up_to_five_minutes() -> None:
    assert [backoff(n) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]
    assert backoff(30) == 300.0


def test_each_running_pod_has_an_address_of_its_own_and_a_finished_ones_is_given_again() -> None:
    addresses = PodAddresses(network="10.245.0.0/29")  # six hosts
    given = [addresses.allocate(f"uid-{i}") for i in range(6)]
    assert len(set(given)) == 6
    assert addresses.allocate("uid-2") == given[2]  # the same pod asks again: the same address
    with pytest.raises(RuntimeError, match="no address left"):
        addresses.allocate("uid-6")
    addresses.release("uid-2")
    assert addresses.allocate("uid-6") == given[2]
