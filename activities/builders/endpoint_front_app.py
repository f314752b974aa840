"""The endpoint front: the one listener of a replica's pod, in front of a vLLM bound to the pod's loopback.

vLLM's API key guards only the path prefixes ``/v1``, ``/v2``, ``/inference`` and ``/cohere``;
``POST /invocations`` (a full chat completion), ``/tokenize``, ``/pooling``, ``/score``,
``/pause``, ``/collective_rpc`` and more answer anyone who reaches the port. So the engine
listens on ``127.0.0.1`` only, and this front, in a container of the same pod, is what the
Service, the NetworkPolicy and the Ingress reach:

* ``--open`` paths (exactly; ``GET`` only) are forwarded to anyone: ``/health`` for probes,
  ``/metrics`` for Prometheus (the HPA's metric);
* every other request must carry ``Authorization: Bearer <token>`` when the container has a
  token (``VLLM_API_KEY``, the same Secret key the engine reads): otherwise 401, whatever the
  path, so a caller without the token learns nothing about which routes exist; a token variable
  that is set but empty (the Secret's key emptied) refuses every such request (fail closed);
* with the token (or on a class without authentication), a path under a ``--publish`` prefix
  (whole path elements, as Kubernetes ``Prefix`` matches: ``/v1`` and ``/v1/...``, never
  ``/v1x``) is forwarded as it came, streamed both ways; anything else is 404.

The token is compared in constant time and never logged (no access log, and no request header
is ever written anywhere). An engine that does not answer is 502 (connection refused, while it
loads or after a crash) or 504 (no response head in time: never cut a long generation, only a
hung connect). An idle connection is only ever closed by the side that opened it (the keep-alive
times below), so no request is lost to a close racing it: a loaded endpoint answers every request.

It runs in the runtime's own image (vLLM ships starlette, uvicorn and httpx, which are all it
imports besides the standard library) as ``python3 -c <this file> --listen 0.0.0.0:8000
--upstream http://127.0.0.1:8001 --publish /v1 --open /health --open /metrics``, so no second
image is shipped or pulled. ``activities.builders.endpoint_front`` builds that container.
"""

from __future__ import annotations

import argparse
import contextlib
import hmac
import os
import sys
from collections.abc import AsyncIterator, Sequence

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

TOKEN_ENV = "VLLM_API_KEY"
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"]
# Hop-by-hop headers (RFC 9110 section 7.6.1) and Host: a proxy never forwards them.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
    }
)
# The engine listens on the pod's loopback: a refused connect (it loads, it crashed) is 502 at once, and a
# connect that waits means the engine's process is starved of CPU or its backlog full — the client is
# better served waiting than refused (5 s gave 16 of 2,406 requests a 504 on a loaded 2-core machine).
CONNECT_TIMEOUT_SECONDS = 30.0
# Keep-alive on both hops, so that the side that opened a connection is always the one to close it
# when it idles: a server closing an idle connection races the client's next request on it, and the
# request is lost without an answer (uvicorn's default is 5 s, the same as httpx's pool expiry).
# Towards clients: longer than any client or proxy in front keeps an idle connection to us (ingress-nginx's
# upstream-keepalive-timeout is 60 s, httpx's pool 5 s). Towards the engine: our pool lets an idle
# connection go well before vLLM closes it (its uvicorn's keep-alive, VLLM_HTTP_TIMEOUT_KEEP_ALIVE, 5 s).
CLIENT_KEEP_ALIVE_SECONDS = 75
ENGINE_KEEP_ALIVE_SECONDS = 5.0
UPSTREAM_IDLE_SECONDS = 2.0
# vLLM's own refusal, so a client sees the same answer from the front as from the engine.
UNAUTHORIZED_BODY = {"error": "Unauthorized"}


def is_published(path: str, prefixes: Sequence[str]) -> bool:
    """Whether ``path`` lies under one of ``prefixes``, whole path elements (Kubernetes ``Prefix``)."""
    elements = [e for e in path.split("/") if e]
    for prefix in prefixes:
        wanted = [e for e in prefix.split("/") if e]
        if elements[: len(wanted)] == wanted:
            return True
    return False


def has_dot_segment(path: str) -> bool:
    """Whether ``path`` has a ``.`` or ``..`` element (refused: a forwarding client would resolve it)."""
    return any(element in (".", "..") for element in path.split("/"))


def authorized(header: str | None, token: str | None) -> bool:
    """``Authorization: Bearer <token>`` exactly (vLLM's check), compared in constant time.

    ``token`` None: the class asks for none (the container has no token variable). An empty or blank
    token (the Secret's key emptied) fails closed: nothing matches it, where vLLM would serve anyone.
    """
    if token is None:
        return True
    if header is None or not token.strip():
        return False
    return hmac.compare_digest(header.encode(), f"Bearer {token}".encode())


def create_app(
    upstream: str,
    token: str | None,
    published: Sequence[str],
    open_paths: Sequence[str],
    transport: httpx.AsyncBaseTransport | None = None,
) -> Starlette:
    client = httpx.AsyncClient(
        base_url=upstream,
        timeout=httpx.Timeout(None, connect=CONNECT_TIMEOUT_SECONDS),
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=64, keepalive_expiry=UPSTREAM_IDLE_SECONDS),
        transport=transport,
    )
    opened = frozenset(open_paths)

    async def forward(request: Request) -> Response:
        path = request.url.path
        is_open = path in opened and request.method in ("GET", "HEAD")
        if not is_open and not authorized(request.headers.get("authorization"), token):
            return JSONResponse(UNAUTHORIZED_BODY, status_code=401)
        if not is_open and (not is_published(path, published) or has_dot_segment(path)):
            # A dot segment is refused, not resolved: the client would resolve it to another route.
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        headers = [(k, v) for k, v in request.headers.raw if k.decode("latin-1").lower() not in HOP_BY_HOP]
        outgoing = client.build_request(
            request.method,
            httpx.URL(path=path, query=request.url.query.encode("latin-1")),
            headers=headers,
            content=request.stream(),
        )
        try:
            answer = await client.send(outgoing, stream=True)
        except httpx.TimeoutException:
            return JSONResponse({"error": "the engine did not answer in time"}, status_code=504)
        except httpx.TransportError:
            return JSONResponse({"error": "the engine is not answering"}, status_code=502)
        kept = {k: v for k, v in answer.headers.multi_items() if k.lower() not in HOP_BY_HOP}
        return StreamingResponse(
            answer.aiter_raw(), status_code=answer.status_code, headers=kept, background=BackgroundTask(answer.aclose)
        )

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        await client.aclose()

    return Starlette(routes=[Route("/{path:path}", forward, methods=METHODS)], lifespan=lifespan)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="endpoint-front", description="the token-checking front of a vLLM replica")
    parser.add_argument("--listen", required=True, help="HOST:PORT the pod publishes")
    parser.add_argument("--upstream", required=True, help="the engine's loopback URL")
    parser.add_argument("--publish", action="append", default=[], help="a path prefix the endpoint publishes")
    parser.add_argument("--open", action="append", default=[], help="a path served without the token (GET)")
    return parser.parse_args(list(argv))


def main(argv: Sequence[str]) -> None:
    args = parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    # Unset: no authentication asked. Set but empty: every request is refused (fail closed).
    token = os.environ.get(TOKEN_ENV)
    if token is not None and not token.strip():
        print("endpoint-front: the token is empty: every request but the open paths is refused", file=sys.stderr)
    app = create_app(args.upstream, token, args.publish, args.open)
    uvicorn.run(
        app,
        host=host,
        port=int(port),
        access_log=False,
        log_level="warning",
        timeout_keep_alive=CLIENT_KEEP_ALIVE_SECONDS,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
