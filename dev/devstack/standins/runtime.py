"""Stand-in for the vLLM runtime: a tiny OpenAI-compatible server, for the local cluster and tests.

kwok pods run nothing, so on the local cluster an order's replicas never answer. This server
answers in their place — with the routes, status codes and auth behaviour of vLLM's OpenAI
server that the module relies on — so the probe, the health watch and a user's curl can be
exercised end to end, and failure can be injected (503s, or the process stopped).

Run it::

    python -m devstack.standins.runtime --port 8000 --model Qwen/Qwen2.5-7B-Instruct \\
        [--token-file /path/to/token] [--fail-file /path/to/flag] [--port-file /path/to/port]

or, many orders from one port (``MultiplexedRuntime``: each order under ``/o/<namespace>/<name>``, or
named by ``Host: <name>.<namespace>``, added with ``POST /admin/orders``)::

    python -m devstack.standins.runtime --multiplexed --port 8000

Routes (answers are deterministic: the same request gets the same bytes):

* ``GET /v1/models``; ``POST /v1/chat/completions`` (``stream: true`` gives server-sent
  events); ``POST /v1/embeddings``; ``POST /v1/rerank`` (also ``/v2/rerank`` and ``/rerank``);
  ``POST /v1/score`` (also ``/score``); ``POST /tokenize``; ``POST /invocations`` (a chat
  completion, as vLLM's SageMaker route answers a body with ``messages``);
* auth exactly as vLLM's ``--api-key``/``VLLM_API_KEY`` middleware does it: with a token
  configured, every path that starts with ``/v1``, ``/v2``, ``/inference`` or ``/cohere``
  (string prefixes, routes or not, any method but OPTIONS) answers 401 ``{"error":
  "Unauthorized"}`` without ``Authorization: Bearer <token>``; every other path is open, so
  ``/rerank``, ``/score`` and ``/tokenize`` serve the model to anyone, as they do
  in vLLM, and so does ``/invocations``. The module's own guard (the endpoint front in every pod,
  the Ingress publishing ``/v1`` only, a NetworkPolicy limiting who reaches the port) is what the
  tests prove, not this one. The multiplexed server plays the fleet's pods, so each of its orders
  is served behind the endpoint front's rules (``EndpointFrontGuard``); ``StandInRuntime`` is vLLM
  alone;
* ``GET /health``, ``GET|POST /ping``, ``GET /version``, ``GET /metrics`` — open; ``/metrics`` serves
  vLLM's series under their names (``vllm:num_requests_running``/``_waiting``,
  ``vllm:kv_cache_usage_perc``, the ``vllm:time_to_first_token_seconds`` and
  ``vllm:e2e_request_latency_seconds`` histograms, ``vllm:prompt_tokens_total``,
  ``vllm:generation_tokens_total``, ``vllm:request_success_total``), counted from the requests
  served; the gauges are set with ``POST /admin/load`` (to drive an autoscaler);
* ``POST /admin/fail {"status": 503}`` / ``POST /admin/recover`` / ``GET /admin/stats`` — failure
  injection, open; ``POST /admin/load {"running": 2, "waiting": 5, "kv_cache_usage": 0.4}`` sets
  the load gauges, open (a loopback test tool; ``gpu_cache_usage``, the key named after vLLM's old
  gauge, is still accepted). While failing, or while the ``--fail-file`` exists,
  every route but ``/admin/*`` answers that status.

The token is read from ``--token-file``, else from the environment variable named by
``--token-env`` (default ``VLLM_API_KEY``, as vLLM does). It is never written to a log, a
response or the command line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import math
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from activities.builders.endpoint_front import OPEN_PATHS, PUBLISHED_PREFIXES
from activities.builders.endpoint_front_app import authorized, has_dot_segment, is_published
from devstack.standins import process

log = logging.getLogger("ai_inference.standin.runtime")

DEFAULT_TOKEN_ENV = "VLLM_API_KEY"
OWNER = "ai-inference-standin"
# vLLM's API-key middleware (vllm/entrypoints/serve/middleware/authenticate.py) checks only these
# path prefixes, with str.startswith: everything else is served to anyone.
GUARDED_PREFIXES = ("/v1", "/v2", "/inference", "/cohere")
_WORD = re.compile(r"\w+")


@dataclass
class RuntimeConfig:
    model: str
    # Kept out of repr: a config printed in a test failure or a log must not show the token.
    token: str | None = field(default=None, repr=False)
    fail_file: Path | None = None
    embedding_dim: int = 8
    max_model_len: int = 4096
    runtime_version: str = "0.0.0-standin"


# vLLM's own bucket bounds for the two latency histograms (vllm/v1/metrics/loggers.py).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)
LABELS = ("model_name", "engine")


class _WithoutCreated:
    """A registry's families less prometheus_client's ``*_created`` samples, which this page never had."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            family.samples = [s for s in family.samples if s.name != family.name + "_created"]
            yield family


class RuntimeMetrics:
    """vLLM's series for one served model, under vLLM's names and labels, on a registry of their own.

    Counters are named without ``_total``: prometheus_client adds it in the exposition, which gives
    vLLM's ``vllm:prompt_tokens_total`` etc.
    """

    def __init__(self, model: str) -> None:
        self.registry = CollectorRegistry()
        labels = {"model_name": model, "engine": "0"}

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, LABELS, registry=self.registry).labels(**labels)

        def counter(name: str, doc: str, extra: Mapping[str, str] | None = None) -> Counter:
            extra = extra or {}
            return Counter(name, doc, [*LABELS, *extra], registry=self.registry).labels(**labels, **extra)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, LABELS, buckets=buckets, registry=self.registry).labels(**labels)

        # The load gauges: set from outside (POST /admin/load), the stand-in does no scheduling.
        self.running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
        self.waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        self.kv_cache_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        self.successes = counter(
            "vllm:request_success", "Count of successfully processed requests.", {"finished_reason": "stop"}
        )
        self.ttft = histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS
        )
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", E2E_BUCKETS
        )

    def render(self) -> bytes:
        return generate_latest(_WithoutCreated(self.registry))


@dataclass
class RuntimeState:
    model: str
    failing_status: int | None = None
    requests: dict[str, int] = field(default_factory=dict)
    # The load as last set (POST /admin/load); the gauges serve it.
    running: int = 0
    waiting: int = 0
    kv_cache_usage: float = 0.0
    # Made on first use: thousands of multiplexed orders that are only probed need no registry.
    _metrics: RuntimeMetrics | None = field(default=None, init=False, repr=False)

    @property
    def metrics(self) -> RuntimeMetrics:
        if self._metrics is None:
            self._metrics = RuntimeMetrics(self.model)
        return self._metrics

    def count(self, route: str) -> None:
        self.requests[route] = self.requests.get(route, 0) + 1

    def set_load(self, running: int, waiting: int, kv_cache_usage: float) -> None:
        self.running, self.waiting, self.kv_cache_usage = running, waiting, kv_cache_usage
        self.metrics.running.set(running)
        self.metrics.waiting.set(waiting)
        self.metrics.kv_cache_usage.set(kv_cache_usage)

    def served(self, started: float, prompt_tokens: int, generation_tokens: int) -> None:
        """One request finished with ``finished_reason="stop"``; the answer is all at once."""
        elapsed = time.monotonic() - started
        self.metrics.prompt_tokens.inc(prompt_tokens)
        self.metrics.generation_tokens.inc(generation_tokens)
        self.metrics.successes.inc()
        self.metrics.ttft.observe(elapsed)
        self.metrics.e2e.observe(elapsed)


def _error(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse({"object": "error", "message": message, "type": kind, "param": None, "code": status}, status)


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _tokens(text: str) -> int:
    return len(_WORD.findall(text))


def embed(text: str, dim: int) -> list[float]:
    """A unit vector derived from the text's hash: same text, same vector."""
    raw = hashlib.sha256(text.encode()).digest()
    while len(raw) < dim * 2:
        raw += hashlib.sha256(raw).digest()
    values = [(int.from_bytes(raw[i * 2 : i * 2 + 2], "big") / 32767.5) - 1.0 for i in range(dim)]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [round(v / norm, 6) for v in values]


def relevance(query: str, document: str) -> float:
    """Word overlap (Jaccard) of query and document: a fake score with a sensible order."""
    q, d = set(_WORD.findall(query.lower())), set(_WORD.findall(document.lower()))
    if not q or not d:
        return 0.0
    return round(len(q & d) / len(q | d), 6)


def guarded(path: str) -> bool:
    """Whether vLLM's API key applies to ``path`` (a plain string prefix, as vLLM checks it)."""
    return path.startswith(GUARDED_PREFIXES)


class _ApiKeyGuard:
    """vLLM's authentication middleware: a pure ASGI layer in front of every route.

    With a token, a request whose path is guarded and that is not an OPTIONS request needs
    ``Authorization: Bearer <token>``; a missing or wrong one gets 401 ``{"error": "Unauthorized"}``
    before any route (or 404) is looked at. Without a token nothing is checked.
    """

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self._token = token.encode() if token else None

    def _authorized(self, scope: Scope) -> bool:
        assert self._token is not None
        scheme, _, presented = Headers(scope=scope).get("authorization", "").partition(" ")
        # Constant-time comparison; vLLM answers exactly this body for a missing or wrong key.
        return scheme.lower() == "bearer" and hmac.compare_digest(presented.encode(), self._token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            self._token is not None
            and scope["type"] in ("http", "websocket")
            and scope.get("method") != "OPTIONS"
            and guarded(str(scope["path"]).removeprefix(str(scope.get("root_path", ""))))
            and not self._authorized(scope)
        ):
            await JSONResponse({"error": "Unauthorized"}, status_code=401)(scope, receive, send)
            return
        await self.app(scope, receive, send)


class EndpointFrontGuard:
    """The pod's endpoint front before one order's stand-in, for the fleet's pods (``MultiplexedRuntime``).

    A replica's pod publishes only what its ``endpoint-front`` container forwards
    (``activities.builders.endpoint_front``): ``GET /health`` and ``GET /metrics`` to anyone, and with
    the token (401 ``{"error": "Unauthorized"}`` without it, whatever the path) only paths under
    ``/v1``; any other path, or a dot segment, is 404. The same rules, from the same functions, on the
    path below the order's prefix. The stand-in's own ``/admin/*`` test hooks pass: no pod has them,
    they drive the stand-in. ``StandInRuntime`` (vLLM alone) has no guard.
    """

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self._token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = str(scope["path"]).removeprefix(str(scope.get("root_path", ""))) or "/"
            is_open = path.startswith("/admin/") or (path in OPEN_PATHS and scope["method"] in ("GET", "HEAD"))
            if not is_open:
                answer: Response | None = None
                if not authorized(Headers(scope=scope).get("authorization"), self._token):
                    answer = JSONResponse({"error": "Unauthorized"}, status_code=401)
                elif not is_published(path, PUBLISHED_PREFIXES) or has_dot_segment(path):
                    answer = JSONResponse({"detail": "Not Found"}, status_code=404)
                if answer is not None:
                    await answer(scope, receive, send)
                    return
        await self.app(scope, receive, send)


def token_ids(text: str) -> list[int]:
    """One fake token id per word, from the word's hash: same text, same ids."""
    return [int.from_bytes(hashlib.sha256(word.encode()).digest()[:2], "big") for word in _WORD.findall(text)]


def create_app(config: RuntimeConfig, state: RuntimeState | None = None) -> Starlette:
    state = state if state is not None else RuntimeState(config.model)

    def failing() -> int | None:
        if state.failing_status is not None:
            return state.failing_status
        if config.fail_file is not None and config.fail_file.exists():
            return 503
        return None

    def refused(request: Request) -> Response | None:
        """The failure-injection answer for this request, or None to serve it (auth is _ApiKeyGuard's)."""
        status = failing()
        if status is not None:
            return _error(status, "the stand-in runtime is failing (injected)", "ServiceUnavailableError")
        return None

    async def body_of(request: Request) -> dict[str, Any] | Response:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "the request body is not JSON", "BadRequestError")
        if not isinstance(body, dict):
            return _error(400, "the request body must be a JSON object", "BadRequestError")
        model = body.get("model")
        if model is not None and model != config.model:
            return _error(404, f"The model `{model}` does not exist.", "NotFoundError")
        return body

    async def health(request: Request) -> Response:
        state.count("health")
        return refused(request) or Response(status_code=200)

    async def version(request: Request) -> Response:
        return refused(request) or JSONResponse({"version": config.runtime_version})

    async def metrics(request: Request) -> Response:
        # vLLM's series, under vLLM's names: what the HPA scales on and the dashboards read.
        answer = refused(request)
        return answer or Response(state.metrics.render(), media_type=CONTENT_TYPE_PLAIN_0_0_4)

    async def models(request: Request) -> Response:
        state.count("models")
        if (answer := refused(request)) is not None:
            return answer
        card = {
            "id": config.model,
            "object": "model",
            "created": 0,
            "owned_by": OWNER,
            "root": config.model,
            "parent": None,
            "max_model_len": config.max_model_len,
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def chat(request: Request) -> Response:
        started = time.monotonic()
        state.count("chat")
        if (answer := refused(request)) is not None:
            return answer
        body = await body_of(request)
        if isinstance(body, Response):
            return body
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error(400, "messages must be a non-empty list", "BadRequestError")
        last = next(
            (str(m.get("content", "")) for m in reversed(messages) if isinstance(m, dict) and m.get("role") == "user"),
            "",
        )
        content = f"stand-in reply from {config.model}: {last}"
        ident = "chatcmpl-" + _digest("chat", messages)[:24]
        prompt_tokens = sum(_tokens(str(m.get("content", ""))) for m in messages if isinstance(m, dict))
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": _tokens(content),
            "total_tokens": prompt_tokens + _tokens(content),
        }
        state.served(started, prompt_tokens, _tokens(content))
        if body.get("stream"):
            return StreamingResponse(_stream_chat(ident, config.model, content), media_type="text/event-stream")
        return JSONResponse(
            {
                "id": ident,
                "object": "chat.completion",
                "created": 0,
                "model": config.model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                        "logprobs": None,
                    }
                ],
                "usage": usage,
            }
        )

    async def embeddings(request: Request) -> Response:
        started = time.monotonic()
        state.count("embeddings")
        if (answer := refused(request)) is not None:
            return answer
        body = await body_of(request)
        if isinstance(body, Response):
            return body
        raw = body.get("input")
        if isinstance(raw, str):
            texts = [raw]
        elif isinstance(raw, list) and raw and all(isinstance(item, str) for item in raw):
            texts = list(raw)
        elif isinstance(raw, list) and raw and all(isinstance(item, int) for item in raw):
            texts = [" ".join(map(str, raw))]  # one pre-tokenized input
        else:
            return _error(400, "input must be a string, a list of strings or a list of token ids", "BadRequestError")
        data = [
            {"object": "embedding", "index": i, "embedding": embed(text, config.embedding_dim)}
            for i, text in enumerate(texts)
        ]
        tokens = sum(_tokens(text) for text in texts)
        state.served(started, tokens, 0)
        return JSONResponse(
            {
                "id": "embd-" + _digest("embed", texts)[:24],
                "object": "list",
                "created": 0,
                "model": config.model,
                "data": data,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    async def rerank(request: Request) -> Response:
        started = time.monotonic()
        state.count("rerank")
        if (answer := refused(request)) is not None:
            return answer
        body = await body_of(request)
        if isinstance(body, Response):
            return body
        query, documents = body.get("query"), body.get("documents")
        if not isinstance(query, str) or not isinstance(documents, list) or not documents:
            return _error(400, "query must be a string and documents a non-empty list", "BadRequestError")
        texts = [doc if isinstance(doc, str) else str((doc or {}).get("text", "")) for doc in documents]
        scored = sorted(
            ((relevance(query, text), index, text) for index, text in enumerate(texts)), key=lambda s: (-s[0], s[1])
        )
        top_n = body.get("top_n")
        if isinstance(top_n, int) and top_n > 0:
            scored = scored[:top_n]
        tokens = _tokens(query) + sum(_tokens(text) for text in texts)
        state.served(started, tokens, 0)
        return JSONResponse(
            {
                "id": "rerank-" + _digest("rerank", query, texts)[:24],
                "model": config.model,
                "usage": {"total_tokens": tokens},
                "results": [
                    {"index": index, "document": {"text": text}, "relevance_score": score}
                    for score, index, text in scored
                ],
            }
        )

    async def score(request: Request) -> Response:
        """vLLM's score API: ``text_1`` against each of ``text_2`` (a string or a list)."""
        started = time.monotonic()
        state.count("score")
        if (answer := refused(request)) is not None:
            return answer
        body = await body_of(request)
        if isinstance(body, Response):
            return body
        first, second = body.get("text_1"), body.get("text_2")
        if isinstance(second, str):
            second = [second]
        if not isinstance(first, str) or not isinstance(second, list) or not second:
            return _error(400, "text_1 must be a string and text_2 a string or a non-empty list", "BadRequestError")
        texts = [str(text) for text in second]
        data = [{"index": i, "object": "score", "score": relevance(first, text)} for i, text in enumerate(texts)]
        tokens = _tokens(first) * len(texts) + sum(_tokens(text) for text in texts)
        state.served(started, tokens, 0)
        return JSONResponse(
            {
                "id": "score-" + _digest("score", first, texts)[:24],
                "object": "list",
                "created": 0,
                "model": config.model,
                "data": data,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    async def tokenize(request: Request) -> Response:
        state.count("tokenize")
        if (answer := refused(request)) is not None:
            return answer
        body = await body_of(request)
        if isinstance(body, Response):
            return body
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            return _error(400, "prompt must be a string", "BadRequestError")
        ids = token_ids(prompt)
        return JSONResponse(
            {"count": len(ids), "max_model_len": config.max_model_len, "tokens": ids, "token_strs": None}
        )

    async def admin_fail(request: Request) -> Response:
        status = 503
        with contextlib.suppress(ValueError):
            body = await request.json()
            if isinstance(body, dict) and isinstance(body.get("status"), int):
                status = int(body["status"])
        state.failing_status = status
        log.info("failure injected: every route answers %s", status)
        return JSONResponse({"failing": status})

    async def admin_recover(request: Request) -> Response:
        state.failing_status = None
        log.info("failure cleared")
        return JSONResponse({"failing": None})

    async def admin_load(request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return _error(400, "the request body must be a JSON object", "BadRequestError")
        try:
            running = int(body.get("running", state.running))
            waiting = int(body.get("waiting", state.waiting))
            # gpu_cache_usage: the key named after the KV-cache gauge vLLM had before kv_cache_usage_perc.
            key = "kv_cache_usage" if "kv_cache_usage" in body else "gpu_cache_usage"
            kv_cache_usage = float(body.get(key, state.kv_cache_usage))
        except (TypeError, ValueError):
            return _error(400, "running and waiting are integers, kv_cache_usage a number", "BadRequestError")
        state.set_load(running, waiting, kv_cache_usage)
        load = {"running": state.running, "waiting": state.waiting, "kv_cache_usage": state.kv_cache_usage}
        log.info("load set: %s", load)
        return JSONResponse(load)

    async def admin_stats(request: Request) -> Response:
        return JSONResponse({"failing": failing(), "requests": dict(state.requests), "model": config.model})

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/ping", health, methods=["GET", "POST"]),
        Route("/version", version, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/embeddings", embeddings, methods=["POST"]),
        Route("/v1/rerank", rerank, methods=["POST"]),
        Route("/v2/rerank", rerank, methods=["POST"]),
        Route("/rerank", rerank, methods=["POST"]),
        Route("/v1/score", score, methods=["POST"]),
        Route("/score", score, methods=["POST"]),
        Route("/tokenize", tokenize, methods=["POST"]),
        # vLLM's SageMaker route: a chat completion for a body with "messages", open without the key.
        Route("/invocations", chat, methods=["POST"]),
        Route("/admin/fail", admin_fail, methods=["POST"]),
        Route("/admin/recover", admin_recover, methods=["POST"]),
        Route("/admin/stats", admin_stats, methods=["GET"]),
        Route("/admin/load", admin_load, methods=["POST"]),
    ]
    app = Starlette(routes=routes, middleware=[Middleware(_ApiKeyGuard, token=config.token)])
    app.state.runtime = state
    return app


async def _stream_chat(ident: str, model: str, content: str) -> AsyncIterator[bytes]:
    def chunk(delta: Mapping[str, Any], finish: str | None) -> bytes:
        payload = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": dict(delta), "finish_reason": finish}],
        }
        return f"data: {json.dumps(payload)}\n\n".encode()

    yield chunk({"role": "assistant", "content": ""}, None)
    for word in content.split(" "):
        yield chunk({"content": word + " "}, None)
        await asyncio.sleep(0)
    yield chunk({}, "stop")
    yield b"data: [DONE]\n\n"


def resolve_token(token_file: Path | None, token_env: str | None) -> str | None:
    """The configured token: the file's content (stripped) first, then the environment variable."""
    if token_file is not None:
        value = token_file.read_text().strip()
        if not value:
            raise ValueError(f"token file {token_file} is empty")
        return value
    if token_env:
        return os.environ.get(token_env) or None
    return None


def bind_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # Reuse: a restarted stand-in takes its old port back while the old connections linger.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _server(app: Starlette) -> uvicorn.Server:
    # No access log: request lines are noise here, and nothing about a request may leak anyway.
    return uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))


def _serve_in_thread(
    server: uvicorn.Server, sock: socket.socket, name: str, timeout_seconds: float
) -> threading.Thread:
    """Run ``server`` on ``sock`` in a daemon thread; return once it serves (it then owns the socket)."""
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name=name)
    thread.start()
    deadline = time.monotonic() + timeout_seconds
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            raise RuntimeError(f"the {name} server did not start")
        time.sleep(0.01)
    return thread


def _stop_in_thread(server: uvicorn.Server | None, thread: threading.Thread | None, timeout_seconds: float) -> None:
    if server is not None and thread is not None:
        server.should_exit = True
        thread.join(timeout_seconds)


# ------------------------------------------------------------------ Python API: in a thread


class StandInRuntime:
    """One stand-in in a thread of this process, on a free loopback port (or the one given)."""

    def __init__(
        self,
        model: str,
        *,
        token: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        fail_file: Path | None = None,
        embedding_dim: int = 8,
        runtime_version: str = "0.0.0-standin",
    ) -> None:
        self.config = RuntimeConfig(
            model=model,
            token=token,
            fail_file=fail_file,
            embedding_dim=embedding_dim,
            runtime_version=runtime_version,
        )
        self.state = RuntimeState(model)
        self.host = host
        self.port = port
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, timeout_seconds: float = 10) -> StandInRuntime:
        if self.running:
            return self
        sock = bind_socket(self.host, self.port)
        self.port = int(sock.getsockname()[1])
        server = _server(create_app(self.config, self.state))
        # The server owns the socket from here: it closes it when it shuts down.
        self._thread = _serve_in_thread(server, sock, "standin-runtime", timeout_seconds)
        self._server = server
        return self

    def stop(self, timeout_seconds: float = 10) -> None:
        server, thread = self._server, self._thread
        self._server, self._thread = None, None
        _stop_in_thread(server, thread, timeout_seconds)

    def fail(self, status: int = 503) -> None:
        self.state.failing_status = status

    def recover(self) -> None:
        self.state.failing_status = None

    def __enter__(self) -> StandInRuntime:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ------------------------------------------------ many orders from one server (multiplexed)

# An order's runtime in a multiplexed server: http://<host>:<port>/o/<namespace>/<name>/<vLLM route>.
ORDER_PREFIX = "/o"


def order_path(namespace: str, name: str) -> str:
    return f"{ORDER_PREFIX}/{namespace}/{name}"


@dataclass
class OrderRuntime:
    """One order's stand-in inside a :class:`MultiplexedRuntime`: its own model, token, load gauges,
    request counts and ``/metrics``, at ``url`` (the server's address and the order's path prefix).
    ``fail``/``recover`` as :class:`StandInRuntime`; ``stop`` takes it out of the server."""

    namespace: str
    name: str
    config: RuntimeConfig
    state: RuntimeState
    app: ASGIApp = field(repr=False)
    server: MultiplexedRuntime = field(repr=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def url(self) -> str:
        return f"{self.server.url}{order_path(self.namespace, self.name)}"

    @property
    def running(self) -> bool:
        return self.server.running and self.server.get(self.namespace, self.name) is self

    def fail(self, status: int = 503) -> None:
        self.state.failing_status = status

    def recover(self) -> None:
        self.state.failing_status = None

    def stop(self) -> None:
        self.server.remove(self.namespace, self.name, self)


class MultiplexedRuntime:
    """Many orders' stand-ins served by one uvicorn server on one port, in a thread of this process.

    An order is told apart by its path prefix, ``/o/<namespace>/<name>`` (its URL, as the fleet writes
    it on the order's Service), or by ``Host: <name>.<namespace>[.svc…]`` at the root. Below the prefix
    each order is a whole stand-in of its own (``create_app``): vLLM's routes, its auth (the key guards
    ``<prefix>/v1…`` as vLLM guards ``/v1…`` under a root path), its failure injection, its load
    gauges and its ``/metrics`` (``vllm:*`` series labelled with its model). A path of no order
    answers 404; the server's own ``GET /admin/orders`` lists the orders served (no token).

    ``add_route``: the admin routes ``POST /admin/orders`` (``{"namespace", "name", "model", "token"}``)
    and ``DELETE /admin/orders/<namespace>/<name>`` let another process add and remove orders (the
    scale benchmark runs the server as its own process: ``python -m devstack.standins.runtime
    --multiplexed``).
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, runtime_version: str = "0.0.0-standin") -> None:
        self.host = host
        self.port = port
        self.runtime_version = runtime_version
        self.orders: dict[tuple[str, str], OrderRuntime] = {}
        self._lock = threading.Lock()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.app = self._dispatch

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -------------------------------------------------------------------- orders

    def add(self, namespace: str, name: str, model: str, token: str | None = None) -> OrderRuntime:
        """Serve an order (again: a new stand-in replaces the one it had), as its pods do: behind the
        endpoint front (``EndpointFrontGuard``)."""
        config = RuntimeConfig(model=model, token=token, runtime_version=self.runtime_version)
        state = RuntimeState(model)
        app = EndpointFrontGuard(create_app(config, state), token)
        runtime = OrderRuntime(namespace, name, config, state, app, self)
        with self._lock:
            self.orders[(namespace, name)] = runtime
        return runtime

    def get(self, namespace: str, name: str) -> OrderRuntime | None:
        return self.orders.get((namespace, name))

    def remove(self, namespace: str, name: str, only: OrderRuntime | None = None) -> None:
        with self._lock:
            found = self.orders.get((namespace, name))
            if found is not None and (only is None or found is only):
                del self.orders[(namespace, name)]

    # ------------------------------------------------------------------ dispatch

    def _route(self, scope: Scope) -> tuple[OrderRuntime | None, str]:
        """The order a request is for, and the root path its app sees."""
        path = str(scope.get("path", ""))
        if path.startswith(ORDER_PREFIX + "/"):
            parts = path.split("/", 4)  # "", "o", namespace, name, rest
            if len(parts) >= 4:
                runtime = self.orders.get((parts[2], parts[3]))
                return runtime, order_path(parts[2], parts[3])
            return None, ""
        host = Headers(scope=scope).get("host", "").split(":", 1)[0]
        labels = host.split(".")
        if len(labels) >= 2:
            return self.orders.get((labels[1], labels[0])), ""
        return None, ""

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return
        runtime, root = self._route(scope)
        if runtime is None:
            if scope["type"] == "http" and str(scope.get("path", "")).startswith("/admin/orders"):
                await self._admin(scope, receive, send)
                return
            await JSONResponse({"detail": "Not Found"}, status_code=404)(scope, receive, send)
            return
        if root:
            # ASGI: ``path`` keeps the prefix, ``root_path`` names it; routing and the key guard strip it.
            scope = {**scope, "root_path": str(scope.get("root_path", "")) + root}
        await runtime.app(scope, receive, send)

    async def _admin(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        method, path = request.method, request.url.path
        answer: Response
        if method == "GET" and path == "/admin/orders":
            answer = JSONResponse({"orders": sorted(f"{ns}/{n}" for ns, n in self.orders)})
        elif method == "POST" and path == "/admin/orders":
            try:
                body = await request.json()
                runtime = self.add(str(body["namespace"]), str(body["name"]), str(body["model"]), body.get("token"))
            except (ValueError, KeyError, TypeError):
                answer = _error(400, "namespace, name and model are required", "BadRequestError")
            else:
                answer = JSONResponse({"url": runtime.url}, status_code=201)
        elif method == "DELETE" and path.startswith("/admin/orders/") and path.count("/") == 4:
            _, _, _, namespace, name = path.split("/")
            self.remove(namespace, name)
            answer = Response(status_code=204)
        else:
            answer = _error(404, "no such admin route", "NotFoundError")
        await answer(scope, receive, send)

    # ------------------------------------------------------------------- serving

    def start(self, timeout_seconds: float = 10) -> MultiplexedRuntime:
        if self.running:
            return self
        sock = bind_socket(self.host, self.port)
        self.port = int(sock.getsockname()[1])
        server = uvicorn.Server(
            uvicorn.Config(
                self.app, log_level="warning", access_log=False, lifespan="off", backlog=2048, interface="asgi3"
            )
        )
        self._thread = _serve_in_thread(server, sock, "standin-mux", timeout_seconds)
        self._server = server
        return self

    def stop(self, timeout_seconds: float = 10) -> None:
        server, thread = self._server, self._thread
        self._server, self._thread = None, None
        _stop_in_thread(server, thread, timeout_seconds)

    def __enter__(self) -> MultiplexedRuntime:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ------------------------------------------------------------ Python API: as a subprocess


class RuntimeProcess:
    """One stand-in as a separate process: ``stop()`` makes the endpoint absent, like a dead pod.

    The first start takes a free port (the child binds port 0 and reports it); ``restart()``
    comes back on the same port so a client configured once sees the runtime go and return.
    A token is handed over in a 0600 file, never on the command line, where `ps` would show it.
    """

    def __init__(
        self,
        model: str,
        *,
        token: str | None = None,
        token_file: Path | None = None,
        port: int = 0,
        fail_file: Path | None = None,
        runtime_version: str = "0.0.0-standin",
        startup_timeout_seconds: float = 20,
    ) -> None:
        self.model = model
        self.port = port
        self.fail_file = fail_file
        self.runtime_version = runtime_version
        self._startup_timeout = startup_timeout_seconds
        self._tmp = tempfile.TemporaryDirectory(prefix="runtime-standin-")
        self._dir = Path(self._tmp.name)
        self._log = self._dir / "runtime.log"
        self.token_file = token_file
        if token is not None:
            self.token_file = self._dir / "token"
            self.token_file.touch(mode=0o600)
            self.token_file.write_text(token)
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        if not self.port:
            raise RuntimeError("the stand-in runtime was never started")
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def log_text(self) -> str:
        return self._log.read_text(errors="replace") if self._log.exists() else ""

    def start(self) -> RuntimeProcess:
        if self.running:
            return self
        port_file = self._dir / "port"
        port_file.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "devstack.standins.runtime", "--model", self.model, "--port", str(self.port)]
        cmd += ["--port-file", str(port_file), "--runtime-version", self.runtime_version, "--token-env", ""]
        if self.token_file is not None:
            cmd += ["--token-file", str(self.token_file)]
        if self.fail_file is not None:
            cmd += ["--fail-file", str(self.fail_file)]
        self._process = process.spawn(cmd, self._log)
        deadline = time.monotonic() + self._startup_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                self._process = None
                raise RuntimeError(f"the stand-in runtime exited:\n{self.log_text[-4000:]}")
            if port_file.exists() and port_file.read_text().strip():
                self.port = int(port_file.read_text().strip())
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{self.url}/health", timeout=1).status_code in (200, 503):
                        return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"the stand-in runtime did not answer in time:\n{self.log_text[-4000:]}")

    def stop(self) -> None:
        child, self._process = self._process, None
        process.stop(child)

    def restart(self) -> RuntimeProcess:
        self.stop()
        return self.start()

    def fail(self, status: int = 503) -> None:
        httpx.post(f"{self.url}/admin/fail", json={"status": status}, timeout=5).raise_for_status()

    def recover(self) -> None:
        httpx.post(f"{self.url}/admin/recover", timeout=5).raise_for_status()

    def close(self) -> None:
        self.stop()
        self._tmp.cleanup()

    def __enter__(self) -> RuntimeProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


# ------------------------------------------------------------------------------ command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Stand-in OpenAI-compatible runtime (vLLM's API surface).")
    parser.add_argument("--model", help="Served model name, e.g. Qwen/Qwen2.5-7B-Instruct.")
    parser.add_argument(
        "--multiplexed",
        action="store_true",
        help="Serve many orders from this one port, added with POST /admin/orders (no --model).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port (see --port-file).")
    parser.add_argument("--port-file", type=Path, help="Write the bound port here once listening.")
    parser.add_argument("--token-file", type=Path, help="File holding the bearer token.")
    parser.add_argument(
        "--token-env",
        default=DEFAULT_TOKEN_ENV,
        help="Environment variable holding the token when no --token-file is given ('' for none).",
    )
    parser.add_argument("--fail-file", type=Path, help="While this file exists, every route answers 503.")
    parser.add_argument("--embedding-dim", type=int, default=8)
    parser.add_argument("--runtime-version", default="0.0.0-standin")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.multiplexed == bool(args.model):
        parser.error("give either --model or --multiplexed")
    if args.multiplexed:
        mux = MultiplexedRuntime(host=args.host, port=args.port, runtime_version=args.runtime_version)
        mux_sock = bind_socket(args.host, args.port)
        mux.port = int(mux_sock.getsockname()[1])
        if args.port_file is not None:
            tmp = args.port_file.with_suffix(".tmp")
            tmp.write_text(str(mux.port))
            tmp.replace(args.port_file)
        log.info("serving orders on %s%s/<namespace>/<name>", mux.url, ORDER_PREFIX)
        server = uvicorn.Server(
            uvicorn.Config(
                mux.app, log_level="warning", access_log=False, lifespan="off", backlog=2048, interface="asgi3"
            )
        )
        server.run(sockets=[mux_sock])
        return 0

    config = RuntimeConfig(
        model=args.model,
        token=resolve_token(args.token_file, args.token_env or None),
        fail_file=args.fail_file,
        embedding_dim=args.embedding_dim,
        runtime_version=args.runtime_version,
    )
    sock = bind_socket(args.host, args.port)
    port = int(sock.getsockname()[1])
    if args.port_file is not None:
        # Written after binding, so a reader that sees the port can connect.
        tmp = args.port_file.with_suffix(".tmp")
        tmp.write_text(str(port))
        tmp.replace(args.port_file)
    log.info("serving %s on http://%s:%d (auth %s)", config.model, args.host, port, "on" if config.token else "off")
    _server(create_app(config)).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
