"""The module's guard of an External endpoint: whatever the Ingress publishes needs the token.

vLLM's API key guards only the path prefixes /v1, /v2, /inference and /cohere, and vLLM serves
many routes outside them (checked on vLLM 0.33.0). The stand-in runtime guards exactly what vLLM
guards, so these tests prove the Ingress's paths, not the runtime's key: every route the stand-in
serves that the built Ingress would forward answers 401 without the token, and none of vLLM's
unguarded routes is forwarded at all.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.routing import Route

from activities.builders import build_ingress, build_network_policy, build_service, build_statefulset
from activities.builders import endpoint_front as front
from activities.builders import endpoint_front_app as front_app
from devstack.standins import engine as eng
from devstack.standins.runtime import RuntimeConfig, StandInRuntime, create_app
from tests import factories as f

TOKEN = "guard-token-7c1e-do-not-log"
MODEL = "Qwen/Qwen2.5-32B-Instruct-AWQ"
# vLLM 0.33.0's routes that its API key does not guard (shared/notes/checked-facts-2026-11.md).
VLLM_UNGUARDED = (
    "/classify",
    "/pause",
    "/resume",
    "/sleep",
    "/wake_up",
    "/is_sleeping",
    "/reset_prefix_cache",
    "/collective_rpc",
    "/load",
    "/metrics",
    "/health",
    "/ping",
    "/server_info",
    "/tokenizer_info",
    "/version",
    "/rerank",
    "/score",
    "/pooling",
    "/tokenize",
    "/detokenize",
    "/invocations",
    "/",
    "/docs",
    "/openapi.json",
)
# What the user guide promises for Chat, Embeddings and Rerank.
DOCUMENTED = ("/v1/models", "/v1/chat/completions", "/v1/embeddings", "/v1/rerank")


def ingress_paths(ingress: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p["path"], p["pathType"]) for rule in ingress["spec"]["rules"] for p in rule["http"]["paths"]]


def forwarded(ingress: dict[str, Any], request_path: str) -> bool:
    """Whether the Ingress forwards ``request_path``: Kubernetes ``Prefix`` matches element by element."""
    for path, path_type in ingress_paths(ingress):
        assert path_type in ("Prefix", "Exact"), path_type
        if path_type == "Exact":
            if request_path == path:
                return True
            continue
        elements = [e for e in path.split("/") if e]
        if [e for e in request_path.split("/") if e][: len(elements)] == elements:
            return True
    return False


@pytest.fixture(scope="module")
def ingress() -> dict[str, Any]:
    built = build_ingress(f.inputs(the_class=f.external_token_certmanager()))
    assert built is not None
    return built


@pytest.fixture(scope="module")
def runtime() -> Iterator[StandInRuntime]:
    with StandInRuntime(MODEL, token=TOKEN) as r:
        yield r


def standin_routes() -> list[tuple[str, str]]:
    """(method, path) of every route of the stand-in, less its own /admin/* test hooks."""
    app = create_app(RuntimeConfig(model=MODEL, token=TOKEN))
    out = []
    for route in app.routes:
        assert isinstance(route, Route)
        if route.path.startswith("/admin/"):
            continue
        out += [(method, route.path) for method in sorted(route.methods or ()) if method != "HEAD"]
    return out


def test_the_prefix_match_is_kubernetes_element_wise() -> None:
    ingress = {"spec": {"rules": [{"http": {"paths": [{"path": "/v1", "pathType": "Prefix"}]}}]}}
    assert forwarded(ingress, "/v1")
    assert forwarded(ingress, "/v1/")
    assert forwarded(ingress, "/v1/models")
    assert not forwarded(ingress, "/v1x")
    assert not forwarded(ingress, "/")
    assert not forwarded(ingress, "/rerank")


def test_the_documented_api_is_published(ingress: dict[str, Any]) -> None:
    for path in DOCUMENTED:
        assert forwarded(ingress, path), path


def test_no_route_vllm_leaves_unguarded_is_published(ingress: dict[str, Any]) -> None:
    published = [path for path in VLLM_UNGUARDED if forwarded(ingress, path)]
    assert published == [], f"the Ingress publishes routes vLLM serves without the key: {published}"


def test_every_published_route_of_the_runtime_needs_the_token(ingress: dict[str, Any], runtime: StandInRuntime) -> None:
    routes = standin_routes()
    published = [(method, path) for method, path in routes if forwarded(ingress, path)]
    # The stand-in serves unguarded inference routes too, and the Ingress keeps them out.
    assert {path for _, path in routes if not forwarded(ingress, path)} >= {"/rerank", "/score", "/tokenize"}
    assert {path for _, path in published} >= set(DOCUMENTED)
    with httpx.Client(timeout=5) as client:
        for method, path in published:
            answer = client.request(method, f"{runtime.url}{path}", json={})
            assert answer.status_code == 401, f"{method} {path} answered {answer.status_code} without the token"
            assert TOKEN not in answer.text
            with_token = client.request(
                method, f"{runtime.url}{path}", json={}, headers={"Authorization": f"Bearer {TOKEN}"}
            )
            assert with_token.status_code != 401, f"{method} {path}"


# ------------------------------------------------------------------ the endpoint front (in the pod)
#
# vLLM's key leaves /invocations (a full chat completion) and the routes above open to whoever reaches
# its port, and a ClusterLocal endpoint's Service reaches the whole port. The engine binds the pod's
# loopback; the endpoint front is the pod's one listener (activities.builders.endpoint_front).

CLASSES = {
    "external-token": f.external_token_certmanager,
    "cluster-local-none": f.cluster_local_none,
}


@pytest.mark.parametrize("the_class", list(CLASSES))
def test_the_engine_binds_the_pods_loopback_and_the_front_is_the_pods_one_listener(the_class: str) -> None:
    inputs = f.inputs(the_class=CLASSES[the_class]())
    pod = build_statefulset(inputs)["spec"]["template"]["spec"]
    runtime = f.runtime_container(build_statefulset(inputs))
    command = runtime["command"]
    assert command[command.index("--host") + 1] == "127.0.0.1"
    assert command[command.index("--port") + 1] == str(front.ENGINE_PORT)
    assert "ports" not in runtime
    ports = [(c["name"], p) for c in pod["containers"] for p in c.get("ports") or []]
    assert ports == [(front.FRONT_CONTAINER, {"name": "http", "containerPort": 8000, "protocol": "TCP"})]
    # What reaches the pod names that port: the Service, the NetworkPolicy (and the Ingress, the Service).
    assert build_service(inputs)["spec"]["ports"][0]["targetPort"] == "http"
    assert build_network_policy(inputs)["spec"]["ingress"][0]["ports"] == [{"protocol": "TCP", "port": "http"}]
    # An httpGet probe comes from the node, which the loopback does not reach: the engine's are exec probes.
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert "httpGet" not in runtime[probe]
        assert f"127.0.0.1:{front.ENGINE_PORT}" in runtime[probe]["exec"]["command"][2]


def test_the_front_reads_the_token_from_the_orders_secret_and_only_a_token_class_has_one() -> None:
    with_token = build_statefulset(f.inputs(the_class=f.external_token_certmanager()))
    (container,) = [
        c for c in with_token["spec"]["template"]["spec"]["containers"] if c["name"] == front.FRONT_CONTAINER
    ]
    assert container["command"] == front.front_command()
    assert {"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {"name": "support-llm-auth", "key": "token"}}} in (
        container["env"]
    )
    assert container["securityContext"]["runAsNonRoot"] is True
    assert container["image"] == f.runtime_container(with_token)["image"]
    without = build_statefulset(f.inputs(the_class=f.cluster_local_none()))
    (container,) = [c for c in without["spec"]["template"]["spec"]["containers"] if c["name"] == front.FRONT_CONTAINER]
    assert "VLLM_API_KEY" not in {e["name"] for e in container["env"]}


def test_the_engines_readiness_probe_sends_the_token_from_its_own_environment() -> None:
    runtime = f.runtime_container(build_statefulset(f.inputs(the_class=f.external_token_certmanager())))
    script = runtime["readinessProbe"]["exec"]["command"][2]
    assert "/v1/models" in script
    assert "os.environ['VLLM_API_KEY']" in script
    compile(script, "probe", "exec")
    none = f.runtime_container(build_statefulset(f.inputs(the_class=f.cluster_local_none())))
    assert "VLLM_API_KEY" not in none["readinessProbe"]["exec"]["command"][2]


def test_the_front_publishes_what_the_ingress_publishes(ingress: dict[str, Any]) -> None:
    for path in (*DOCUMENTED, "/v1"):
        assert front_app.is_published(path, front.PUBLISHED_PREFIXES) == forwarded(ingress, path), path
    for path in VLLM_UNGUARDED:
        assert not front_app.is_published(path, front.PUBLISHED_PREFIXES), path
    assert not front_app.is_published("/v1x", front.PUBLISHED_PREFIXES)


def test_the_token_is_compared_whole() -> None:
    assert front_app.authorized(f"Bearer {TOKEN}", TOKEN)
    for header in (None, "", TOKEN, f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", f"bearer {TOKEN}", f"Basic {TOKEN}"):
        assert not front_app.authorized(header, TOKEN), header
    assert front_app.authorized(None, None)


@dataclass
class Front:
    url: str
    process: subprocess.Popen[str]

    def output(self) -> str:
        self.process.terminate()
        out, _ = self.process.communicate(timeout=10)
        return out


@contextlib.contextmanager
def running_front(upstream_port: int, token: str | None) -> Iterator[Front]:
    """The built front container's own command (python3 -> this interpreter, the local stack's change)."""
    port = eng.free_port()
    argv, env = eng.front_launch(
        front.front_command(), token, python=Path(sys.executable), port=port, engine_port=upstream_port
    )
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, process.communicate()[0]
            try:
                httpx.get(f"{url}/nowhere", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the front never listened"
                time.sleep(0.1)
        yield Front(url, process)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


@pytest.fixture(scope="module")
def guarded(runtime: StandInRuntime) -> Iterator[Front]:
    with running_front(_port(runtime.url), TOKEN) as started:
        yield started


CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def test_without_the_token_only_health_and_metrics_pass_the_front(guarded: Front, runtime: StandInRuntime) -> None:
    routes = standin_routes()
    with httpx.Client(timeout=5) as client:
        # Behind the front is a runtime that serves /invocations to anyone, as vLLM does.
        assert client.post(f"{runtime.url}/invocations", json=CHAT).status_code == 200
        for method, path in [*routes, *[("POST", p) for p in VLLM_UNGUARDED], ("GET", "/"), ("GET", "/v1")]:
            answer = client.request(method, f"{guarded.url}{path}", json=CHAT)
            if method == "GET" and path in front.OPEN_PATHS:
                assert answer.status_code == 200, f"{method} {path}"
                continue
            assert answer.status_code == 401, f"{method} {path} answered {answer.status_code} without the token"
            assert answer.json() == {"error": "Unauthorized"}
            wrong = client.request(method, f"{guarded.url}{path}", json=CHAT, headers={"Authorization": "Bearer x"})
            assert wrong.status_code == 401, f"{method} {path} with a wrong token"


def test_with_the_token_the_published_api_is_forwarded_and_nothing_else(guarded: Front) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(timeout=5, headers=auth) as client:
        models = client.get(f"{guarded.url}/v1/models")
        assert models.status_code == 200
        assert models.json()["data"][0]["id"] == MODEL
        chat = client.post(f"{guarded.url}/v1/chat/completions", json=CHAT)
        assert chat.status_code == 200
        assert chat.json()["choices"][0]["message"]["content"]
        assert client.post(f"{guarded.url}/v1/embeddings?x=1", json={"model": MODEL, "input": "a"}).status_code in (
            200,
            400,
        )
        for path in ("/invocations", "/tokenize", "/rerank", "/score", "/v2/rerank", "/version", "/ping"):
            assert client.post(f"{guarded.url}{path}", json=CHAT).status_code == 404, path
    # A dot segment is refused, never resolved into another route by the forwarding client (sent as
    # is: http.client does not normalise the path, httpx would).
    for path in ("/v1/../invocations", "/v1/%2e%2e/invocations", "/v1/./models", "/v1/x/../../invocations"):
        connection = http.client.HTTPConnection("127.0.0.1", _port(guarded.url), timeout=5)
        try:
            connection.request("POST", path, body=json.dumps(CHAT), headers=auth)
            assert connection.getresponse().status == 404, path
        finally:
            connection.close()


def test_a_streamed_completion_passes_the_front_event_by_event(guarded: Front) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with (
        httpx.Client(timeout=5, headers=auth) as client,
        client.stream("POST", f"{guarded.url}/v1/chat/completions", json={**CHAT, "stream": True}) as answer,
    ):
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        events = [line for line in answer.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    assert len(events) >= 3


def test_the_token_never_reaches_the_fronts_output(runtime: StandInRuntime) -> None:
    with running_front(_port(runtime.url), TOKEN) as started:
        httpx.get(f"{started.url}/v1/models", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5)
        httpx.get(f"{started.url}/v1/models", headers={"Authorization": "Bearer wrong"}, timeout=5)
        httpx.post(f"{started.url}/invocations", json=CHAT, timeout=5)
        output = started.output()
    assert TOKEN not in output
    assert "wrong" not in output


def test_a_class_without_authentication_still_publishes_only_the_api(runtime: StandInRuntime) -> None:
    # The stand-in behind it wants the token; the front has none and forwards the client's header.
    with running_front(_port(runtime.url), None) as started, httpx.Client(timeout=5) as client:
        assert client.get(f"{started.url}/v1/models", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert client.get(f"{started.url}/v1/models").status_code == 401  # the engine's own answer
        assert client.post(f"{started.url}/invocations", json=CHAT).status_code == 404
        assert client.get(f"{started.url}/metrics").status_code == 200


@pytest.mark.parametrize("emptied", ["", "  "])
def test_an_emptied_token_fails_closed(runtime: StandInRuntime, emptied: str) -> None:
    # The Secret's key emptied: the kubelet sets VLLM_API_KEY to "". Before, the front took that for a
    # class without authentication and forwarded every request (vLLM itself serves anyone then).
    assert not front_app.authorized("Bearer ", emptied)
    assert not front_app.authorized(f"Bearer {emptied}", emptied)
    with running_front(_port(runtime.url), emptied) as started, httpx.Client(timeout=5) as client:
        # (h11 sends no header value with trailing blanks: "Bearer " itself is checked above.)
        for headers in ({}, {"Authorization": "Bearer"}, {"Authorization": "Bearer x"}):
            answer = client.get(f"{started.url}/v1/models", headers=headers)
            assert answer.status_code == 401, headers
            assert answer.json() == {"error": "Unauthorized"}
        assert client.post(f"{started.url}/v1/chat/completions", json=CHAT).status_code == 401
        assert client.get(f"{started.url}/health").status_code == 200  # the open paths stay open
        output = started.output()
    assert "the token is empty" in output


def test_an_engine_that_does_not_answer_is_a_502() -> None:
    with running_front(eng.free_port(), TOKEN) as started:
        answer = httpx.get(f"{started.url}/v1/models", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
        assert answer.status_code == 502
        assert httpx.get(f"{started.url}/health", timeout=10).status_code == 502
