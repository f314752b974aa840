"""The module's long-running processes as coroutines: the CLI runs them, tests run them in-process."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
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
from activities.order_cache import OrderCacheView
from activities.preemption import PreemptionActivities
from inference_api.payloads import PlanInput
from inference_api.plan import PlanOutcome
from inference_api.settings import ModuleSettings
from worker.observer import Observer
from worker.order_cache import OrderCache
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
    cache: OrderCacheView | None = None,
    **kwargs: Any,
) -> Worker:
    """The order worker; ``cache``: the informer cache its activities read orders and classes from
    (``worker.order_cache.OrderCache``, started by the caller), None: every read a GET."""
    activities = OrderActivities(api, settings, planner or default_planner(settings, api), cache=cache)
    preemption = PreemptionActivities()
    sizing = {
        "workflow_task_slots": settings.worker.workflowTaskSlots,
        "activity_slots": settings.worker.activitySlots,
        "max_cached_workflows": settings.worker.cachedWorkflows,
    }
    return build_worker(
        client, settings.temporal.taskQueue, [*activities.all(), *preemption.all()], **(sizing | kwargs)
    )


async def run_worker(
    client: Client,
    api: ApiClient,
    settings: ModuleSettings,
    health: Health | None = None,
    register_search_attributes: bool = True,
) -> None:
    """The worker: registers the module's search attributes (``worker.search_attribute_registration``;
    ``SearchAttributeError`` when it may not), then polls its task queue until cancelled. ``health``
    gets its checks: live while the worker runs, ready while Temporal answers too."""
    from worker.patch_retirement import check_patch_retirement
    from worker.search_attribute_registration import ensure_search_attributes, keep_search_attributes

    keeper: asyncio.Task[None] | None = None
    if register_search_attributes:
        await ensure_search_attributes(client, settings.temporal.namespace)
        keeper = asyncio.create_task(
            keep_search_attributes(client, settings.temporal.namespace, settings.worker.searchAttributeCheckSeconds),
            name="keep-search-attributes",
        )
    # Before any task: no running run too old for the patches this code retired (PatchRetirementError).
    await check_patch_retirement(client, settings.temporal.taskQueue)
    # The orders and classes the activities read, from a watch rather than a GET each (worker/order_cache.py).
    cache = OrderCache(api)
    cache.start()
    worker = order_worker(client, api, settings, cache=cache)
    if health is not None:
        health.add_live("worker", lambda: (worker.is_running, "polling" if worker.is_running else "not running"))
        health.add_live("order cache", lambda: (cache.alive(), "watching" if cache.alive() else "a watch thread ended"))
        health.add_ready("temporal", temporal_reachable(client))
    log.info("worker started", task_queue=settings.temporal.taskQueue, planner=settings.planner.baseURL or "in-process")
    try:
        await worker.run()
    finally:
        cache.stop()
        if keeper is not None:
            keeper.cancel()


async def run_watcher(
    client: Client,
    api: ApiClient,
    settings: ModuleSettings,
    health: Health | None = None,
    identity: str | None = None,
) -> None:
    """The observer (``ai-inference watch``): informers, health probes, resync; see worker/observer/.
    ``health`` gets its checks: live while its informer threads run, ready once every informer has
    listed and its watches are fresh, and Temporal answers.

    With ``observer.leaderElection.enabled``: a replica among several (worker/observer/leader.py). It
    stands by until it holds its shard's Lease (``identity`` its name there), then observes with a
    fresh observer until it no longer does, and stands by again. A standby is live and ready (it is
    ready to take over); a leader as above."""
    election = settings.observer.leaderElection
    if not election.enabled:
        observer = Observer(api, client, settings)
        if health is not None:
            health.add_live("informers", lambda: informers_alive(observer))
            health.add_ready("informers", lambda: informers_fresh(observer))
            health.add_ready("temporal", temporal_reachable(client))
        await observer.run()
        return

    from worker.observer.leader import LeaderElector, lease_name
    from worker.observer.metrics import ORDER_STATUS, ORDERS_KNOWN

    elector = LeaderElector(api, settings.moduleNamespace, lease_name(settings.observer), election, identity)
    term: list[Observer] = []

    async def observe() -> None:
        observer = Observer(api, client, settings, fence=elector.leading)
        term.append(observer)
        try:
            await observer.run()
        finally:
            term.clear()
            # A standby reports no orders: the leader's figures are the only ones.
            ORDER_STATUS.watch(list)
            ORDERS_KNOWN.set(0)

    def standby() -> Verdict:
        holder = elector.holder
        return True, f"standby (lease {elector.name} held by {holder})" if holder else f"standby ({elector.name})"

    if health is not None:
        health.add_live("informers", lambda: informers_alive(term[0]) if term else standby())
        health.add_ready("informers", lambda: informers_fresh(term[0]) if term else standby())
        health.add_ready("temporal", temporal_reachable(client))
    await elector.run(observe)


async def until_terminated(main: Awaitable[None]) -> None:
    """Run ``main``; SIGTERM (the kubelet stopping the pod: a rollout, a drain) cancels it so it stops
    cleanly — an observer that leads stops signalling, then releases its Lease, and a standby takes
    over at its next read — and this returns."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(main)
    terminated = False

    def terminate() -> None:
        nonlocal terminated
        terminated = True
        log.info("SIGTERM: stopping")
        task.cancel()

    loop.add_signal_handler(signal.SIGTERM, terminate)
    try:
        await task
    except asyncio.CancelledError:
        if not terminated:
            raise
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


# ------------------------------------------------------------------------------ health


Verdict = tuple[bool, str]
Check = Callable[[], Verdict | Awaitable[Verdict]]

# How long a readiness check may take before it counts as failed (a stopped Temporal answers nothing).
CHECK_TIMEOUT_SECONDS = 2.0
# A watch that fails this long, or has heard nothing from the API server for its timeout and this
# much more, is stale (the API server sends bookmarks well within a watch's timeout).
WATCH_FAILURE_GRACE_SECONDS = 30.0
WATCH_SILENCE_GRACE_SECONDS = 120.0


class Health:
    """What ``/healthz`` and ``/readyz`` answer, with a short reason each.

    Live (``/healthz``): the process's event loop answers (else the probe gets no answer at all) and
    each liveness check holds (the worker is polling, the informer threads run). Ready (``/readyz``):
    live, and each readiness check holds (Temporal answers, informers listed and fresh). A check is a
    function giving ``(ok, reason)``, or a coroutine function; one that takes longer than
    ``CHECK_TIMEOUT_SECONDS`` fails.
    """

    def __init__(self, starting: bool = False) -> None:
        # starting: not ready until the process adds its readiness checks (it is still connecting).
        self.starting = starting
        self.live_checks: list[tuple[str, Check]] = []
        self.ready_checks: list[tuple[str, Check]] = []

    def add_live(self, name: str, check: Check) -> None:
        self.live_checks.append((name, check))

    def add_ready(self, name: str, check: Check) -> None:
        self.ready_checks.append((name, check))

    async def live(self) -> Verdict:
        return await _all([("event loop", lambda: (True, "running")), *self.live_checks])

    async def ready(self) -> Verdict:
        alive, why = await self.live()
        if not alive:
            return False, why
        if not self.ready_checks:
            return (False, "starting") if self.starting else (True, why)
        return await _all(self.ready_checks)


async def _run_check(check: Check) -> Verdict:
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_SECONDS):
            result = check()
            if inspect.isawaitable(result):
                result = await result
            return result
    except TimeoutError:
        return False, f"no answer within {CHECK_TIMEOUT_SECONDS:g}s"
    except Exception as err:  # a check that fails is a failed check, never a 500
        return False, f"{type(err).__name__}"


async def _all(checks: list[tuple[str, Check]]) -> Verdict:
    reasons: list[str] = []
    for name, check in checks:
        ok, why = await _run_check(check)
        if not ok:
            return False, f"{name}: {why}"
        reasons.append(f"{name}: {why}")
    return True, "; ".join(reasons)


def _legacy(ready: Callable[[], bool]) -> Health:
    """A ``Health`` for a plain ``ready()`` (one answer for both probes)."""
    health = Health()
    health.add_live("ready", lambda: (ready(), "ready" if ready() else "not ready"))
    return health


def temporal_reachable(client: Client) -> Check:
    """Ready while the Temporal frontend answers its gRPC health check."""

    async def check() -> Verdict:
        try:
            serving = await client.service_client.check_health(timeout=timedelta(seconds=CHECK_TIMEOUT_SECONDS))
        except Exception as err:
            return False, f"unreachable at {client.service_client.config.target_host} ({type(err).__name__})"
        return (True, "reachable") if serving else (False, "not serving")

    return check


def informers_alive(observer: Observer) -> Verdict:
    """Live while every list+watch thread runs (before they start: nothing to judge yet)."""
    dead = [w.resource.kind for w in observer.watches if not w.thread.is_alive()]
    if dead:
        return False, f"informer threads ended: {', '.join(sorted(dead))}"
    return True, f"{len(observer.watches)} running"


def informers_fresh(observer: Observer, now: float | None = None) -> Verdict:
    """Ready once every informer has listed, and no watch fails or has been silent too long."""
    if not observer.watches:
        return False, "not started"
    now = time.monotonic() if now is None else now
    silence = observer.watch_timeout_seconds + WATCH_SILENCE_GRACE_SECONDS
    for watch in observer.watches:
        kind = watch.resource.kind
        if not observer.informers[kind].synced or watch.last_contact is None:
            return False, f"{kind} not listed yet" + (f" ({watch.failure})" if watch.failure else "")
        if watch.failing_since is not None and now - watch.failing_since > WATCH_FAILURE_GRACE_SECONDS:
            return False, f"{kind} watch failing for {now - watch.failing_since:.0f}s ({watch.failure})"
        if now - watch.last_contact > silence:
            return False, f"{kind} watch silent for {now - watch.last_contact:.0f}s"
    return True, f"{len(observer.watches)} synced and fresh"


class _EmbeddedServer(uvicorn.Server):
    """uvicorn inside a process that owns its signals: the worker or the watcher decides how it stops."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def health_app(
    ready: Callable[[], bool] | None = None, registry: CollectorRegistry = REGISTRY, health: Health | None = None
) -> Starlette:
    """``GET /healthz`` (live) and ``GET /readyz`` (ready) of ``health`` for the probes: 200 ``ok: <why>``,
    else 503 ``not live: <why>`` / ``not ready: <why>``; ``GET /metrics``: prometheus_client's
    exposition of ``registry``. A plain ``ready()`` instead of ``health`` answers both probes alike."""
    checks = health if health is not None else _legacy(ready) if ready is not None else Health()

    async def healthz(request: Request) -> Response:
        ok, why = await checks.live()
        return PlainTextResponse(f"ok: {why}\n" if ok else f"not live: {why}\n", status_code=200 if ok else 503)

    async def readyz(request: Request) -> Response:
        ok, why = await checks.ready()
        return PlainTextResponse(f"ok: {why}\n" if ok else f"not ready: {why}\n", status_code=200 if ok else 503)

    return Starlette(
        routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
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
    ready: Callable[[], bool] | None = None,
    registry: CollectorRegistry = REGISTRY,
    host: str = "0.0.0.0",
    health: Health | None = None,
) -> HealthServer:
    """A small HTTP server for the chart, started on this event loop: ``GET /healthz`` and
    ``GET /readyz`` for the probes (``health``),
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
        health_app(ready, registry, health),
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


async def with_health(port: int | None, main: Awaitable[None], health: Health | None = None) -> None:
    """Run ``main`` with the health server on ``port`` (none when ``port`` is None or 0), answering
    for ``health``; the server stops when ``main`` ends, fails or is cancelled."""
    if not port:
        await main
        return
    async with await serve_health(port, health=health):
        await main
