"""Health probes of serving orders, in the observer: no worker slot, no workflow history per probe.

Every order whose status says it serves (``decisions.serving``) is probed every
``health.intervalSeconds`` (jittered ±10 %, the first probe spread over one interval), at most
``observer.probeConcurrency`` at once over one shared HTTP client. A flip is reported once
(``HealthTrack``): ``failureThreshold`` failures in a row of an order whose status says healthy, or
one success of an order whose status says ServiceUnhealthy. A healthy order costs no signal.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import httpx
import structlog

from activities.health import probe_models
from inference_api.observation import HealthReport
from inference_api.payloads import OrderRef
from inference_api.reasons import Reason
from inference_api.settings import HealthSettings
from worker.observer.decisions import HealthTrack, Serving
from worker.observer.metrics import PROBES

log = structlog.get_logger(__name__)


# An idle probe connection is dropped by the prober well before a server closes it: a server that
# closes after httpx's default (5 s, vLLM's and every uvicorn's keep-alive too) races the next probe
# on that connection (a RemoteProtocolError counted as a failed probe, seen against a stand-in).
PROBE_IDLE_SECONDS = 2.0


@dataclass(frozen=True)
class ProbeSpec:
    """Where and how to probe one order. ``token`` is used for the request only (``repr`` hides it)."""

    target: str
    served_name: str | None
    token: str | None = None
    # The class asks for a token: without a usable one the probe fails closed (AuthTokenInvalid).
    token_required: bool = False

    def __repr__(self) -> str:
        token = "'***'" if self.token else "None"
        return f"ProbeSpec(target={self.target!r}, served_name={self.served_name!r}, token={token})"


class Prober:
    def __init__(
        self,
        health: HealthSettings,
        concurrency: int,
        candidates: Callable[[], Iterable[tuple[OrderRef, Serving]]],
        spec_of: Callable[[OrderRef], Awaitable[ProbeSpec]],
        state_of: Callable[[str], Serving],
        report: Callable[[OrderRef, HealthReport], None],
        *,
        fresh_spec_of: Callable[[OrderRef], Awaitable[ProbeSpec]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        """``fresh_spec_of``: the spec with the token read again, for a probe whose token was refused."""
        self.health = health
        self.fresh_spec_of = fresh_spec_of
        self.semaphore = asyncio.Semaphore(concurrency)
        self.concurrency = concurrency
        self.candidates = candidates
        self.spec_of = spec_of
        self.state_of = state_of
        self.report = report
        self.clock = clock
        self.rng = rng or random.Random()
        self.due: dict[str, float] = {}
        self.tracks: dict[str, HealthTrack] = {}
        self.in_flight: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def tick_seconds(self) -> float:
        return max(0.2, min(5.0, self.health.intervalSeconds / 10))

    def forget_reports(self) -> None:
        """Each resync: a flip reported but never acted on is reported again."""
        for track in self.tracks.values():
            track.forget()

    async def run(self) -> None:
        limits = httpx.Limits(
            max_connections=self.concurrency,
            max_keepalive_connections=self.concurrency,
            keepalive_expiry=PROBE_IDLE_SECONDS,
        )
        # verify=False as the worker's probe: in-cluster endpoints may carry the module's own certificates.
        async with httpx.AsyncClient(verify=False, limits=limits) as http:
            try:
                while True:
                    self.tick(http)
                    await asyncio.sleep(self.tick_seconds)
            finally:
                for task in list(self._tasks):
                    task.cancel()

    def tick(self, http: httpx.AsyncClient) -> None:
        now = self.clock()
        interval = self.health.intervalSeconds
        live: set[str] = set()
        for ref, _state in self.candidates():
            live.add(ref.uid)
            due = self.due.get(ref.uid)
            if due is None:
                self.due[ref.uid] = now + self.rng.uniform(0, interval)
            elif due <= now and ref.uid not in self.in_flight:
                self.in_flight.add(ref.uid)
                task = asyncio.create_task(self.probe(http, ref), name=f"probe-{ref.key}")
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        for uid in [u for u in self.due if u not in live]:
            self.due.pop(uid, None)
            self.tracks.pop(uid, None)

    async def probe(self, http: httpx.AsyncClient, ref: OrderRef) -> None:
        try:
            async with self.semaphore:
                spec = await self.spec_of(ref)
                result = await probe_models(
                    http,
                    spec.target,
                    spec.served_name,
                    spec.token,
                    self.health.probeTimeoutSeconds,
                    token_required=spec.token_required,
                )
                if result.reason == Reason.AUTH_TOKEN_INVALID.value and spec.token and self.fresh_spec_of:
                    # The token held may be older than a rotation: the probe again with the Secret's
                    # token as it is now, before the replicas are blamed.
                    fresh = await self.fresh_spec_of(ref)
                    if fresh.token != spec.token:
                        result = await probe_models(
                            http,
                            fresh.target,
                            fresh.served_name,
                            fresh.token,
                            self.health.probeTimeoutSeconds,
                            token_required=fresh.token_required,
                        )
            PROBES.labels("ok" if result.ok else "failed").inc()
            state = self.state_of(ref.uid)
            if state == Serving.NO:
                return
            track = self.tracks.setdefault(ref.uid, HealthTrack())
            report = track.observe(state, result.ok, result.detail, self.health.failureThreshold)
            if not result.ok:
                log.debug("probe failed", order=ref.key, detail=result.detail, failures=track.failures)
            if report is not None:
                log.info("health flipped", order=ref.key, healthy=report.healthy, detail=report.detail)
                self.report(ref, report)
        except Exception as err:  # one probe must not stop the others
            log.warning("probe not run", order=ref.key, error=type(err).__name__)
        finally:
            self.in_flight.discard(ref.uid)
            if ref.uid in self.due:
                self.due[ref.uid] = self.clock() + self.health.intervalSeconds * self.rng.uniform(0.9, 1.1)
