"""The module's guard of an External endpoint: whatever the Ingress publishes needs the token.

vLLM's API key guards only the path prefixes /v1, /v2, /inference and /cohere, and vLLM serves
many routes outside them (checked on vLLM 0.33.0). The stand-in runtime guards exactly what vLLM
guards, so these tests prove the Ingress's paths, not the runtime's key: every route the stand-in
serves that the built Ingress would forward answers 401 without the token, and none of vLLM's
unguarded routes is forwarded at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.routing import Route

from activities.builders import build_ingress
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
