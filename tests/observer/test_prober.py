"""The observer's health probes against a real HTTP server (an OpenAI-style ``GET /v1/models`` with a
Bearer token): flips reported once, a healthy order costs nothing, concurrency bounded, the token
never in a detail."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest_asyncio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from activities.builders.endpoint_front_app import ENGINE_KEEP_ALIVE_SECONDS
from inference_api.observation import HealthReport
from inference_api.payloads import OrderRef
from inference_api.settings import HealthSettings
from worker.observer.decisions import Serving
from worker.observer.prober import PROBE_IDLE_SECONDS, Prober, ProbeSpec

TOKEN = "tok-not-for-logs"


@dataclass
class Runtime:
    """What the fake runtime answers, and what it saw."""

    failing: bool = False
    delay: float = 0.0
    in_flight: int = 0
    most_in_flight: int = 0
    requests: int = 0
    client_ports: list[int] = field(default_factory=list)


def app(runtime: Runtime) -> Starlette:
    async def models(request: Request) -> Response:
        runtime.requests += 1
        runtime.client_ports.append(request.client.port if request.client else 0)
        runtime.in_flight += 1
        runtime.most_in_flight = max(runtime.most_in_flight, runtime.in_flight)
        try:
            if runtime.delay:
                await asyncio.sleep(runtime.delay)
            if request.headers.get("authorization") != f"Bearer {TOKEN}":
                return JSONResponse({"error": "unauthorized"}, status_code=401)
            if runtime.failing:
                return JSONResponse({"error": "down"}, status_code=503)
            return JSONResponse({"object": "list", "data": [{"id": "m", "object": "model"}]})
        finally:
            runtime.in_flight -= 1

    return Starlette(routes=[Route("/v1/models", models)])


@pytest_asyncio.fixture
async def served() -> AsyncIterator[tuple[str, Runtime]]:
    runtime = Runtime()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    server = uvicorn.Server(uvicorn.Config(app(runtime), log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", runtime
    finally:
        server.should_exit = True
        await asyncio.wait([task], timeout=5)
        sock.close()


async def eventually(check: Callable[[], bool], timeout: float = 20, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@contextlib.asynccontextmanager
async def running(prober: Prober) -> AsyncIterator[None]:
    task = asyncio.create_task(prober.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def ref(i: int = 0) -> OrderRef:
    return OrderRef(namespace="team", name=f"chat-{i}", uid=f"uid-{i}")


def prober(
    url: str,
    states: dict[str, Serving],
    reports: list[tuple[str, HealthReport]],
    concurrency: int = 8,
    token: str = TOKEN,
) -> Prober:
    refs = {ref(i).uid: ref(i) for i in range(len(states))}

    async def spec_of(r: OrderRef) -> ProbeSpec:
        return ProbeSpec(target=url, served_name="m", token=token)

    return Prober(
        HealthSettings(intervalSeconds=0.2, failureThreshold=2, probeTimeoutSeconds=2),
        concurrency,
        candidates=lambda: [(refs[uid], s) for uid, s in states.items() if s != Serving.NO],
        spec_of=spec_of,
        state_of=lambda uid: states[uid],
        report=lambda r, report: reports.append((r.uid, report)),
    )


async def test_flips_are_reported_once_and_a_healthy_order_costs_nothing(served: tuple[str, Runtime]) -> None:
    url, runtime = served
    states = {"uid-0": Serving.HEALTHY}
    reports: list[tuple[str, HealthReport]] = []
    probes = prober(url, states, reports)
    async with running(probes):
        await eventually(lambda: runtime.requests >= 4, what="a few healthy probes")
        assert reports == []

        runtime.failing = True
        await eventually(lambda: len(reports) == 1, what="the unhealthy flip")
        assert reports[0] == ("uid-0", HealthReport(healthy=False, detail="GET /v1/models: HTTP 503", failures=2))
        seen = runtime.requests
        await eventually(lambda: runtime.requests >= seen + 3, what="more failed probes")
        assert len(reports) == 1  # the status still says Ready: not told again

        # The workflow wrote Failed/ServiceUnhealthy; the API answers again: one success flips back.
        states["uid-0"] = Serving.UNHEALTHY
        runtime.failing = False
        await eventually(lambda: len(reports) == 2, what="the healthy flip")
        assert reports[1] == ("uid-0", HealthReport(healthy=True, detail="GET /v1/models lists m"))
        seen = runtime.requests
        await eventually(lambda: runtime.requests >= seen + 3, what="more probes")
        assert len(reports) == 2


async def test_a_wrong_token_fails_without_saying_it(served: tuple[str, Runtime]) -> None:
    url, _ = served
    states = {"uid-0": Serving.HEALTHY}
    reports: list[tuple[str, HealthReport]] = []
    async with running(prober(url, states, reports, token="wrong-token")):
        await eventually(lambda: len(reports) == 1, what="the unhealthy flip")
    # Named as a token the replicas do not hold (an edited Secret), never the token itself.
    assert reports[0][1].detail.startswith("GET /v1/models: HTTP 401 with the token of the order's auth Secret")
    assert "wrong-token" not in repr(reports)
    assert TOKEN not in repr(ProbeSpec(url, "m", TOKEN))


async def test_probes_in_flight_are_bounded(served: tuple[str, Runtime]) -> None:
    url, runtime = served
    runtime.delay = 0.3
    states = {f"uid-{i}": Serving.HEALTHY for i in range(24)}
    reports: list[tuple[str, HealthReport]] = []
    async with running(prober(url, states, reports, concurrency=4)):
        await eventually(lambda: runtime.requests >= 24, what="every order probed")
    assert 1 < runtime.most_in_flight <= 4
    assert reports == []


async def test_orders_that_stop_serving_are_not_probed(served: tuple[str, Runtime]) -> None:
    url, runtime = served
    states = {"uid-0": Serving.HEALTHY}
    reports: list[tuple[str, HealthReport]] = []
    probes = prober(url, states, reports)
    async with running(probes):
        await eventually(lambda: runtime.requests >= 2, what="probes")
        states["uid-0"] = Serving.NO
        await asyncio.sleep(0.5)  # a probe in flight may still finish
        seen = runtime.requests
        await asyncio.sleep(1.0)
        assert runtime.requests == seen
        assert probes.due == {}


async def test_an_idle_probe_connection_is_dropped_before_a_server_would_close_it(served: tuple[str, Runtime]) -> None:
    """A server closes an idle keep-alive connection after its own timeout (vLLM's uvicorn: 5 s, the
    same as httpx's default pool expiry): a probe sent on it as it closes fails. The prober lets an
    idle connection go first, so a probe after a quiet interval opens a new one."""
    assert PROBE_IDLE_SECONDS < ENGINE_KEEP_ALIVE_SECONDS / 2
    url, runtime = served
    states = {"uid-0": Serving.HEALTHY}
    reports: list[tuple[str, HealthReport]] = []
    probes = prober(url, states, reports)
    probes.health = HealthSettings(intervalSeconds=PROBE_IDLE_SECONDS + 1.5, failureThreshold=2, probeTimeoutSeconds=2)
    async with running(probes):
        await eventually(lambda: runtime.requests >= 3, timeout=30, what="three probes a quiet interval apart")
    ports = runtime.client_ports[:3]
    assert len(set(ports)) == 3, f"an idle connection was reused: client ports {ports}"
    assert reports == []


async def test_a_refused_token_is_read_again_before_the_replicas_are_blamed(served: tuple[str, Runtime]) -> None:
    """The token the observer holds may be older than a rotation (its Secret reads are spaced by the
    read budget): a probe answered 401 reads the token again and probes with it; only a token that
    is still refused after that counts as a failure."""
    url, runtime = served
    states = {"uid-0": Serving.HEALTHY}
    reports: list[tuple[str, HealthReport]] = []
    fresh_reads: list[str] = []
    current = {"token": TOKEN}

    async def spec_of(r: OrderRef) -> ProbeSpec:
        return ProbeSpec(target=url, served_name="m", token="rotated-away")  # what was read before

    async def fresh_spec_of(r: OrderRef) -> ProbeSpec:
        fresh_reads.append(r.uid)
        return ProbeSpec(target=url, served_name="m", token=current["token"])

    probes = Prober(
        HealthSettings(intervalSeconds=0.2, failureThreshold=2, probeTimeoutSeconds=2),
        8,
        candidates=lambda: [(ref(0), Serving.HEALTHY)],
        spec_of=spec_of,
        state_of=lambda uid: states[uid],
        report=lambda r, report: reports.append((r.uid, report)),
        fresh_spec_of=fresh_spec_of,
    )
    async with running(probes):
        await eventually(lambda: len(fresh_reads) >= 4, what="probes with a refused token")
        # Each refused probe read the token again and passed with it: no failure told.
        assert reports == []
        assert runtime.requests >= 2 * len(fresh_reads) - 1
        # The Secret's token itself refused (edited after the replicas started): a failure, as before.
        current["token"] = "also-wrong"
        await eventually(lambda: len(reports) == 1, what="the unhealthy flip")
    assert reports[0][1].healthy is False
    assert "401" in reports[0][1].detail
    assert TOKEN not in reports[0][1].detail
    assert "also-wrong" not in reports[0][1].detail
