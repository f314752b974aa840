"""The request's edge: an External order reached through a real Ingress controller over HTTPS.

The stand of tests/e2e (real control plane, Temporal, watcher, worker, planner) with the stand-in
fleet running the real engine, and the local stack's Ingress controller (Traefik, built from its Go
module: ``devstack.ingress_controller``) watching the cluster. The order's class is External with a
token and the administrator's own certificate (``CustomCertificate``: a wildcard for the orders'
hosts signed by a CA made for the test, in the module's namespace, marked for copying). A user
outside the cluster reaches the order at the host its status publishes, through the controller's
HTTPS entry point, with SNI and the CA: the module's Ingress, Service and the pod's EndpointSlice
are what route it to the replica (the fleet makes the replica's pod address real,
``devstack.standins.pod_network``, so nothing but the cluster's routing is in the path).

Checked: the certificate served is the order's copy of the administrator's; ``GET /v1/models`` with
the token answers and lists the model, without it 401 (the token passes through the proxy, and the
proxy does not open the door); a chat completion; a streamed one arrives event by event while the
engine writes it (not buffered to the end by the proxy), ending with ``[DONE]``.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import pytest_asyncio
from kubernetes.client import ApiClient, CoreV1Api
from temporalio.testing import WorkflowEnvironment

from activities.builders.exposure import CUSTOM_CERTIFICATE_LABEL
from devstack.cluster.launcher import LocalCluster
from devstack.cluster.pki import create_ca, issue_certificate
from devstack.ingress_controller import INGRESS_CLASS, IngressController, ingress_controller
from devstack.vllm_cpu_env import VllmCpuEnv
from inference_api.types import CLASSES, GROUP, VERSION
from tests.e2e.stand import DEFAULT_LLM, Stand, open_stand
from tests.engine.serving import ENGINE_STAND_OVERRIDES, Served, chat_body, serve_order

pytestmark = [pytest.mark.engine, pytest.mark.cluster, pytest.mark.temporal]

ORDER = "edge"
CERTIFICATE_SECRET = "orders-wildcard"


@dataclass
class Edge:
    served: Served
    controller: IngressController
    ca: Path
    host: str  # the host the order's status publishes

    def request(
        self, method: str, path: str, token: str | None, body: dict[str, Any] | None = None
    ) -> tuple[http.client.HTTPResponse, PinnedConnection]:
        """A request to the order's published host, as a client outside the cluster sends it: to the
        controller's address, with the host's SNI and Host header, the certificate checked by the CA."""
        connection = PinnedConnection(self.host, ("127.0.0.1", self.controller.https_port), self.ca)
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        connection.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        return connection.getresponse(), connection


class PinnedConnection(http.client.HTTPSConnection):
    """HTTPS to ``host`` (SNI, Host, the certificate's name) at ``address`` (what DNS would answer)."""

    def __init__(self, host: str, address: tuple[str, int], ca: Path) -> None:
        super().__init__(host, 443, context=ssl.create_default_context(cafile=str(ca)), timeout=60)
        self.address = address

    def connect(self) -> None:
        raw = socket.create_connection(self.address, self.timeout)
        self.sock = self._context.wrap_socket(raw, server_hostname=self.host)  # type: ignore[attr-defined]


@pytest_asyncio.fixture(scope="module")
async def edge(
    local_cluster: LocalCluster,
    kube_admin: ApiClient,
    temporal_env: WorkflowEnvironment,
    engine_env: VllmCpuEnv,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Edge]:
    directory = tmp_path_factory.mktemp("edge")
    module_namespace = local_cluster.create_namespace(f"edge-module-{uuid.uuid4().hex[:6]}", users=())
    overrides = {
        **ENGINE_STAND_OVERRIDES,
        "moduleNamespace": module_namespace,
        "exposure": {"ingressClassName": INGRESS_CLASS},
    }
    core = CoreV1Api(kube_admin)
    class_name = f"e2e-edge-{uuid.uuid4().hex[:6]}"
    with ingress_controller(directory / "traefik", local_cluster.kubeconfig("admin"), kube_admin, print) as controller:
        async with open_stand(local_cluster, kube_admin, temporal_env.client, overrides) as stand:
            stand.fleet.real_pod_addresses = True  # what the controller routes to by the EndpointSlice
            ca = create_ca(directory / "pki", "orders-ca")
            wildcard = f"*.{stand.namespace}.ai.example.com"
            issued = issue_certificate(ca, directory / "pki", "wildcard", sans=(f"DNS:{wildcard}",))
            core.create_namespaced_secret(
                module_namespace,
                {
                    "metadata": {"name": CERTIFICATE_SECRET, "labels": {CUSTOM_CERTIFICATE_LABEL: "true"}},
                    "type": "kubernetes.io/tls",
                    "stringData": {"tls.crt": issued.cert.read_text(), "tls.key": issued.key.read_text()},
                },
            )
            exposure = {
                "type": "External",
                "authentication": "Token",
                "https": {"mode": "CustomCertificate", "customCertificate": {"secretName": CERTIFICATE_SECRET}},
            }
            body = {**DEFAULT_LLM, "metadata": {"name": class_name}}
            body["spec"] = {**DEFAULT_LLM["spec"], "exposurePolicy": exposure}
            stand.custom.create_cluster_custom_object(GROUP, VERSION, CLASSES, body)
            try:
                served = await serve_order(stand, ORDER, class_name=class_name)
                pod_ip = stand.core.read_namespaced_pod(f"{ORDER}-0", stand.namespace).status.pod_ip
                assert served.replica.front_host == pod_ip, (
                    f"the fleet could not make the pod's address {pod_ip} real (it needs root and `ip`): "
                    "nothing routed by the EndpointSlice reaches the replica"
                )
                endpoint = str((stand.status(ORDER).get("endpoint") or {}).get("url") or "")
                host = urlsplit(endpoint).hostname
                assert host is not None, f"the order publishes no endpoint: {stand.status(ORDER)}"
                yield Edge(served, controller, ca.cert, host)
            finally:
                stand.custom.delete_cluster_custom_object(GROUP, VERSION, CLASSES, class_name)
    core.delete_namespace(module_namespace)


def _until_routed(edge: Edge, timeout: float = 60) -> http.client.HTTPResponse:
    """The controller routes the host once it has seen the Ingress, its Secret and a ready endpoint."""
    deadline = time.monotonic() + timeout
    while True:
        response, _ = edge.request("GET", "/v1/models", edge.served.token)
        if response.status == 200 or time.monotonic() > deadline:
            return response
        response.read()
        time.sleep(0.5)


def test_the_published_host_answers_through_the_ingress_with_the_token_only(edge: Edge) -> None:
    stand: Stand = edge.served.stand
    assert urlsplit(str(stand.status(ORDER)["endpoint"]["url"])).scheme == "https"
    response = _until_routed(edge)
    answer = response.read()
    assert response.status == 200, f"{response.status}: {answer[:300]!r}\n{edge.controller.log_tail()}"
    assert [m["id"] for m in json.loads(answer)["data"]] == [edge.served.model]

    # The certificate served for the host is the order's copy of the administrator's.
    _, connection = edge.request("GET", "/health", None)
    assert isinstance(connection.sock, ssl.SSLSocket)
    certificate = connection.sock.getpeercert() or {}
    assert ("DNS", f"*.{stand.namespace}.ai.example.com") in certificate["subjectAltName"]

    refused, _ = edge.request("GET", "/v1/models", None)
    refused.read()
    assert refused.status == 401
    wrong, _ = edge.request("GET", "/v1/models", "not-the-token")
    wrong.read()
    assert wrong.status == 401


def test_a_chat_completion_and_a_streamed_one_pass_through_the_ingress(edge: Edge) -> None:
    assert _until_routed(edge).status == 200
    response, _ = edge.request("POST", "/v1/chat/completions", edge.served.token, chat_body(edge.served.model))
    answer = json.loads(response.read())
    assert response.status == 200, answer
    assert answer["choices"][0]["message"]["role"] == "assistant"

    body = {**chat_body(edge.served.model, stream=True, max_tokens=128), "ignore_eos": True}
    sent = time.monotonic()
    response, _ = edge.request("POST", "/v1/chat/completions", edge.served.token, body)
    assert response.status == 200
    assert response.getheader("Content-Type", "").startswith("text/event-stream")
    arrivals: list[tuple[float, str]] = []
    while line := response.readline():
        text = line.decode().strip()
        if text.startswith("data: "):
            arrivals.append((time.monotonic() - sent, text[len("data: ") :]))
    assert arrivals[-1][1] == "[DONE]"
    tokens = [json.loads(data) for _, data in arrivals[:-1]]
    # 128 tokens generated; some decode to no text of their own (a piece of a character, a special token).
    assert sum(1 for chunk in tokens if chunk["choices"] and chunk["choices"][0]["delta"].get("content")) >= 64
    first, last = arrivals[0][0], arrivals[-1][0]
    print(
        f"\nstreamed through the ingress: {len(arrivals)} events, the first at {first:.3f} s, the last at {last:.3f} s"
    )
    # Unbuffered: the events arrive over the generation (128 tokens: well over 50 ms on a CPU), not all
    # at its end (a proxy that buffers hands them over at once: a span of a few milliseconds). A busy
    # machine delays the first event (the prompt's prefill), so the span is judged against a quarter
    # of the whole.
    assert last - first > max(0.05, 0.25 * last), arrivals[:3]
