"""The module's long-running processes as coroutines: the CLI runs them, tests run them in-process."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import structlog
import uvicorn
from kubernetes.client import ApiClient
from prometheus_client import REGISTRY, CollectorRegistry, make_asgi_app
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send
from temporalio.client import Client
from temporalio.worker import Worker

from activities.order import OrderActivities
from activities.preemption import PreemptionActivities
from inference_api.payloads import PlanInput
from inference_api.plan import PlanOutcome
from inference_api.settings import ModuleSettings
from worker.observer import Observer
from worker.worker import build_worker

log = structlog.get_logger(__name__)

PlanFunction = Callable[[PlanInput], PlanOutcome]


def default_planner(settings: ModuleSettings, api: ApiClient) -> PlanFunction:
    # Imported late: the planner client pulls in the planning library and its recipe tables.
    from activities.planner_client import make_planner

    return make_planner(settings, api)


def order_worker(
    client: Client,
    api: ApiClient,
    settings: ModuleSettings,
    planner: PlanFunction | None = None,
    **kwargs: Any,
) -> Worker:
    activities = OrderActivities(api, settings, planner or default_planner(settings, api))
    preemption = PreemptionActivities()
    return build_worker(client, settings.temporal.taskQueue, [*activities.all(), *preemption.all()], **kwargs)


async def run_worker(client: Client, api: ApiClient, settings: ModuleSettings) -> None:
    worker = order_worker(client, api, settings)
    log.info("worker started", task_queue=settings.temporal.taskQueue, planner=settings.planner.baseURL or "in-process")
    await worker.run()


async def run_watcher(client: Client, api: ApiClient, settings: ModuleSettings) -> None:
    """The observer (``ai-inference watch``): informers, health probes, resync; see worker/observer/."""
    await Observer(api, client, settings).run()


class _EmbeddedServer(uvicorn.Server):
    """uvicorn inside a process that owns its signals: the worker or the watcher decides how it stops."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def health_app(ready: Callable[[], bool] = lambda: True, registry: CollectorRegistry = REGISTRY) -> Starlette:
    """``GET /healthz`` (and ``/readyz``, the same answer) for the probes: 200 ``ok`` while ``ready()``,
    else 503 ``not ready``; ``GET /metrics``: prometheus_client's exposition of ``registry``."""

    async def healthz(request: Request) -> Response:
        ok = ready()
        return PlainTextResponse("ok\n" if ok else "not ready\n", status_code=200 if ok else 503)

    return Starlette(
        routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", healthz, methods=["GET"]),
            # A Route, not a Mount: a Mount would redirect /metrics to /metrics/.
            Route("/metrics", _Asgi(make_asgi_app(registry=registry)), methods=["GET"]),
        ]
    )


class _Asgi:
    """An ASGI app as a Route's endpoint (a plain function there would be taken for a request handler)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


class HealthServer:
    """The health server running as a task of this event loop; ``close()`` then ``wait_closed()``
    (or ``async with``) stops it."""

    def __init__(self, server: uvicorn.Server, task: asyncio.Task[None], sockets: list[socket.socket]) -> None:
        self._server = server
        self._task = task
        self.sockets = sockets

    @property
    def port(self) -> int:
        return int(self.sockets[0].getsockname()[1])

    def close(self) -> None:
        self._server.should_exit = True

    async def wait_closed(self) -> None:
        # asyncio.wait: the server's own end (even a failure) does not raise here; a cancel of the caller does.
        await asyncio.wait([self._task])

    async def __aenter__(self) -> HealthServer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
        await self.wait_closed()


async def serve_health(
    port: int,
    ready: Callable[[], bool] = lambda: True,
    registry: CollectorRegistry = REGISTRY,
    host: str = "0.0.0.0",
) -> HealthServer:
    """A small HTTP server for the chart, started on this event loop: ``GET /healthz`` for the probes,
    ``GET /metrics`` for the PodMonitor (prometheus_client's exposition of ``registry``; the worker's
    preemption metrics). Port 0 takes a free one (``.port``). Returns once it accepts connections."""
    # Bound here, so a taken port fails this call (OSError) rather than uvicorn's sys.exit.
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    config = uvicorn.Config(
        health_app(ready, registry),
        log_config=None,
        log_level="warning",
        access_log=False,
        lifespan="off",
        ws="none",
        server_header=False,
        timeout_graceful_shutdown=5,
    )
    server = _EmbeddedServer(config)
    task = asyncio.create_task(server.serve(sockets=[sock]), name="health-server")
    try:
        while not server.started:
            if task.done():
                task.result()  # its exception, if it has one
                raise RuntimeError("the health server stopped before it started")
            await asyncio.sleep(0.01)
    except BaseException:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait([task], timeout=5)
        sock.close()
        raise
    log.debug("health server listening", host=host, port=int(sock.getsockname()[1]))
    return HealthServer(server, task, [sock])


async def with_health(port: int | None, main: Awaitable[None]) -> None:
    """Run ``main`` with the health server on ``port`` (none when ``port`` is None or 0); the server
    stops when ``main`` ends, fails or is cancelled."""
    if not port:
        await main
        return
    async with await serve_health(port):
        await main
