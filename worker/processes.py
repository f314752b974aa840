"""The module's long-running processes as coroutines: the CLI runs them, tests run them in-process."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from kubernetes.client import ApiClient
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from temporalio.client import Client
from temporalio.worker import Worker

from activities.order import OrderActivities
from activities.preemption import PreemptionActivities
from inference_api.payloads import PlanInput
from inference_api.plan import PlanOutcome
from inference_api.settings import ModuleSettings
from worker.watcher import Watcher
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
    await Watcher(api, client, settings).run()


async def serve_health(
    port: int,
    ready: Callable[[], bool] = lambda: True,
    registry: CollectorRegistry = REGISTRY,
    host: str = "0.0.0.0",
) -> asyncio.Server:
    """A tiny HTTP server for the chart: ``GET /healthz`` for the probes, ``GET /metrics`` for the
    PodMonitor (prometheus_client's exposition of ``registry``; the worker's preemption metrics)."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = (await reader.readline()).decode("latin-1").split()
            path = request[1].split("?", 1)[0] if len(request) >= 2 else "/"
            if path == "/metrics":
                body = await asyncio.to_thread(generate_latest, registry)
                status, content_type = b"200 OK", CONTENT_TYPE_LATEST.encode()
            else:
                ok = ready()
                body = b"ok\n" if ok else b"not ready\n"
                status = b"200 OK" if ok else b"503 Service Unavailable"
                content_type = b"text/plain; charset=utf-8"
            writer.write(
                b"HTTP/1.1 "
                + status
                + b"\r\nContent-Type: "
                + content_type
                + b"\r\nContent-Length: "
                + str(len(body)).encode()
                + b"\r\nConnection: close\r\n\r\n"
                + body
            )
            await writer.drain()
        finally:
            writer.close()

    return await asyncio.start_server(answer, host, port)


async def with_health(port: int | None, main: Awaitable[None]) -> None:
    server = await serve_health(port) if port else None
    try:
        await main
    finally:
        if server is not None:
            server.close()
