"""The worker's and the watcher's health server (``worker.processes``), over real HTTP on a free port."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.parser import text_string_to_metric_families

from worker.processes import Health, serve_health, with_health


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_healthz_readyz_and_metrics() -> None:
    registry = CollectorRegistry()
    Counter("ai_inference_test_things", "Things counted.", ["kind"], registry=registry).labels(kind="a").inc(3)
    Gauge("ai_inference_test_level", "A level.", registry=registry).set(0.5)
    ready = True
    server = await serve_health(free_port(), ready=lambda: ready, registry=registry, host="127.0.0.1")
    url = f"http://127.0.0.1:{server.port}"
    try:
        async with httpx.AsyncClient(timeout=5) as http:
            for path in ("/healthz", "/readyz"):
                answer = await http.get(url + path)
                assert answer.status_code == 200
                assert answer.text.startswith("ok: ")
                assert answer.headers["content-type"] == "text/plain; charset=utf-8"
            ready = False
            # A plain ready() answers both probes alike.
            assert (await http.get(url + "/healthz")).status_code == 503
            answer = await http.get(url + "/readyz")
            assert (answer.status_code, answer.text) == (503, "not ready: ready: not ready\n")

            metrics = await http.get(url + "/metrics")
            assert metrics.status_code == 200
            assert metrics.headers["content-type"].startswith("text/plain; version=")
            samples = {
                (s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(metrics.text)
                for s in family.samples
            }
            assert samples[("ai_inference_test_things_total", (("kind", "a"),))] == 3
            assert samples[("ai_inference_test_level", ())] == 0.5

            assert (await http.get(url + "/nothing-here")).status_code == 404
    finally:
        server.close()
        await server.wait_closed()
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/healthz", timeout=2)


async def test_port_zero_takes_a_free_port_and_a_taken_port_fails() -> None:
    async with await serve_health(0, host="127.0.0.1") as server:
        assert server.port > 0
        with pytest.raises(OSError, match="in use"):
            await serve_health(server.port, host="127.0.0.1")
        async with httpx.AsyncClient(timeout=5) as http:
            assert (await http.get(f"http://127.0.0.1:{server.port}/healthz")).text == "ok: event loop: running\n"


async def test_with_health_serves_while_main_runs_and_stops_with_it() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/healthz"
    started = asyncio.Event()
    answers: list[str] = []

    async def main() -> None:
        async with httpx.AsyncClient(timeout=5) as http:
            answers.append((await http.get(url)).text)
        started.set()
        await asyncio.Event().wait()  # until cancelled, like the worker

    task = asyncio.create_task(with_health(port, main()))
    await asyncio.wait_for(started.wait(), timeout=10)
    assert answers == ["ok: event loop: running\n"]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(httpx.ConnectError):
        httpx.get(url, timeout=2)

    # A main that ends on its own stops the server too: the port is free again at once.
    await with_health(port, asyncio.sleep(0))
    with pytest.raises(httpx.ConnectError):
        httpx.get(url, timeout=2)


async def test_without_a_port_only_main_runs() -> None:
    ran: list[bool] = []

    async def main() -> None:
        ran.append(True)

    await with_health(None, main())
    assert ran == [True]


async def test_live_and_ready_answer_apart_with_their_reasons() -> None:
    """Checks of a Health: a failing readiness check is 503 on /readyz only; a failing liveness check
    fails both; a check that hangs fails after its timeout; a starting process is not ready."""
    temporal_up = True
    worker_running = True

    async def temporal() -> tuple[bool, str]:
        return (True, "reachable") if temporal_up else (False, "unreachable at 127.0.0.1:7233 (RPCError)")

    async def hangs() -> tuple[bool, str]:
        await asyncio.Event().wait()
        return True, "never"

    health = Health(starting=True)
    async with await serve_health(0, host="127.0.0.1", health=health) as server:
        url = f"http://127.0.0.1:{server.port}"
        async with httpx.AsyncClient(timeout=10) as http:
            assert (await http.get(url + "/readyz")).text == "not ready: starting\n"
            health.add_live("worker", lambda: (worker_running, "polling" if worker_running else "not running"))
            health.add_ready("temporal", temporal)
            live, ready = await http.get(url + "/healthz"), await http.get(url + "/readyz")
            assert (live.status_code, live.text) == (200, "ok: event loop: running; worker: polling\n")
            assert (ready.status_code, ready.text) == (200, "ok: temporal: reachable\n")

            temporal_up = False
            live, ready = await http.get(url + "/healthz"), await http.get(url + "/readyz")
            assert live.status_code == 200
            assert (ready.status_code, ready.text) == (
                503,
                "not ready: temporal: unreachable at 127.0.0.1:7233 (RPCError)\n",
            )

            worker_running = False
            live, ready = await http.get(url + "/healthz"), await http.get(url + "/readyz")
            assert (live.status_code, live.text) == (503, "not live: worker: not running\n")
            assert (ready.status_code, ready.text) == (503, "not ready: worker: not running\n")

            worker_running, temporal_up = True, True
            health.add_ready("slow", hangs)
            ready = await http.get(url + "/readyz")
            assert (ready.status_code, ready.text) == (503, "not ready: slow: no answer within 2s\n")
