"""The observer's leader election: one ``coordination.k8s.io/v1`` Lease per shard, in the module's namespace.

Several observer replicas run; the one holding the Lease observes (informers, probes, resync, signals),
the others stand by, reading the Lease every ``retryPeriodSeconds``. The rules (client-go's, with the
decisions as pure functions below):

- **Taking over.** A standby remembers when it last saw the Lease change (its resourceVersion, by its
  own monotonic clock, so no two machines' clocks are compared). Once it has seen it unchanged for
  the Lease's ``leaseDurationSeconds`` (or the holder released it), it writes itself in as holder, with
  ``leaseTransitions`` one higher, guarded by the resourceVersion it read: of two standbys writing at
  once, the API server takes one and answers the other 409.
- **Stopping.** The leader renews every ``retryPeriodSeconds``. It counts a renewal from the instant it
  *sent* the request. When ``renewDeadlineSeconds`` pass without one (API server unreachable, a
  partition, a paused process), or a read shows another holder, it stops observing: its outbox
  refuses to send from that instant (``LeaderElector.leading`` is the outbox's fence, checked before
  every send) and its tasks are cancelled. A standby saw that last renewal no earlier than it was sent,
  and waits ``leaseDurationSeconds`` from then: so the deposed leader has stopped
  ``leaseDuration - renewDeadline`` before anyone else may start. Nothing is signalled twice by two
  leaders at once. A renewal sent in time and answered late still counts from when it was sent (the
  standby saw it too): the replica that gave up then leads again, in a new term, with no transition.
- **Handing over.** On a clean stop (SIGTERM: a rollout, a drain) the leader stops observing, then
  releases the Lease (no holder): a standby takes over at its next read rather than after a lease
  duration.

A new leader builds a fresh observer: its first listing tells every order its generation (the
workflows ignore a generation they already have), and the resync compares the listing with
Temporal's running workflows, so whatever the old leader had queued and not sent is re-derived, not
lost. The observer keeps no state a standby would need.

Why this library and not ``kubernetes.leaderelection``: that module (in the ``kubernetes`` client
this project uses) compares wall-clock times, sends requests without a timeout (a partitioned leader
blocks in a read and never learns it lost), runs the leader's work in a thread it cannot stop,
ignores ``leaseTransitions``, elects once per process, and talks through the global default client.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import structlog
from kubernetes.client import ApiClient, CoordinationV1Api
from kubernetes.client.exceptions import ApiException
from prometheus_client import Gauge

from inference_api.settings import LeaderElectionSettings, ObserverSettings

log = structlog.get_logger(__name__)

LEADING = Gauge(
    "ai_inference_watcher_leading",
    "1 while this observer replica holds its shard's Lease and observes, 0 while it stands by.",
    ["lease"],
)

# A renewal or a read that takes longer than this (or the renew deadline) fails; one try at a time.
MAX_REQUEST_SECONDS = 5.0


class Step(StrEnum):
    CREATE = "create"  # no Lease: make it, holding it
    TAKE = "take"  # another's Lease that expired (or was released): write this replica in
    RENEW = "renew"  # this replica's Lease: write a new renewTime
    WAIT = "wait"  # another's Lease that holds: stand by


@dataclass(frozen=True)
class LeaseRecord:
    """What the election reads of a Lease."""

    holder: str  # "" when nobody holds it (released)
    duration_seconds: int
    acquire_time: str | None
    renew_time: str | None
    transitions: int
    resource_version: str


# ------------------------------------------------------------------------------ decisions (pure)


def next_step(record: LeaseRecord | None, me: str, seen_since: float | None, now: float) -> Step:
    """What this replica does with the Lease as read: ``seen_since`` is when (this replica's monotonic
    clock) it first saw the Lease in this version; ``now`` is that clock now."""
    if record is None:
        return Step.CREATE
    if record.holder == me:
        return Step.RENEW
    if not record.holder:
        return Step.TAKE
    if seen_since is None or now - seen_since < record.duration_seconds:
        return Step.WAIT
    return Step.TAKE


def seen_since(
    previous: LeaseRecord | None, previous_seen: float | None, record: LeaseRecord | None, now: float
) -> float | None:
    """When this replica first saw ``record`` as it is: ``now`` when it changed since ``previous``
    (any write changes the resourceVersion), else when it saw ``previous``."""
    if record is None:
        return None
    if previous is None or previous_seen is None or previous.resource_version != record.resource_version:
        return now
    return previous_seen


def still_leading(renewed_at: float | None, now: float, renew_deadline: float) -> bool:
    """A leader leads while its last successful renewal was *sent* less than ``renew_deadline`` ago."""
    return renewed_at is not None and now - renewed_at < renew_deadline


def micro_time(at: datetime) -> str:
    """A Kubernetes MicroTime: RFC 3339 in UTC with six fractional digits."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_spec(step: Step, record: LeaseRecord | None, me: str, duration_seconds: int, at: datetime) -> dict[str, Any]:
    """The Lease's spec this replica writes for ``step`` (CREATE, TAKE or RENEW) at ``at``.

    ``leaseTransitions`` counts holders: 0 for the first, one more at every take-over, kept on a
    renewal. ``acquireTime`` is when this holder took it, kept on a renewal."""
    stamp = micro_time(at)
    if step == Step.RENEW and record is not None:
        return {
            "holderIdentity": me,
            "leaseDurationSeconds": duration_seconds,
            "acquireTime": record.acquire_time or stamp,
            "renewTime": stamp,
            "leaseTransitions": record.transitions,
        }
    if step not in (Step.CREATE, Step.TAKE):
        raise ValueError(f"nothing to write for {step}")
    return {
        "holderIdentity": me,
        "leaseDurationSeconds": duration_seconds,
        "acquireTime": stamp,
        "renewTime": stamp,
        "leaseTransitions": 0 if record is None else record.transitions + 1,
    }


def released_spec(record: LeaseRecord, at: datetime) -> dict[str, Any]:
    """The spec a leader writes on a clean stop: no holder (a standby takes it at its next read)."""
    stamp = micro_time(at)
    return {
        "holderIdentity": None,
        "leaseDurationSeconds": 1,
        "acquireTime": stamp,
        "renewTime": stamp,
        "leaseTransitions": record.transitions,
    }


def lease_name(observer: ObserverSettings) -> str:
    """One Lease per shard: the name, with ``-<shard>`` when there are several."""
    base = observer.leaderElection.leaseName
    return base if observer.shards == 1 else f"{base}-{observer.shard}"


def default_identity() -> str:
    """This replica's name in the Lease: the pod's (its hostname) and a random suffix, unique per
    process, so a restarted replica is a new candidate and never takes its old self's Lease for its own."""
    host = os.environ.get("POD_NAME") or socket.gethostname()
    return f"{host}_{uuid.uuid4().hex[:8]}"


def record_of(lease: Any) -> LeaseRecord:
    """A ``V1Lease`` as the election reads it."""
    spec = lease.spec
    meta = lease.metadata

    def stamp(value: Any) -> str | None:
        if value is None:
            return None
        return micro_time(value) if isinstance(value, datetime) else str(value)

    return LeaseRecord(
        holder=(spec.holder_identity or "") if spec else "",
        duration_seconds=int((spec.lease_duration_seconds if spec else None) or 1),
        acquire_time=stamp(spec.acquire_time) if spec else None,
        renew_time=stamp(spec.renew_time) if spec else None,
        transitions=int((spec.lease_transitions if spec else None) or 0),
        resource_version=str(meta.resource_version or ""),
    )


# ------------------------------------------------------------------------------------ the elector


class LeaderElector:
    """Stands by, leads while it holds the Lease, stops leading at the renew deadline (``run``).

    ``leading()`` is the fence: true only while this replica holds the Lease and renewed it within the
    renew deadline, by its own clock, at the instant it is asked."""

    def __init__(
        self,
        api: ApiClient,
        namespace: str,
        name: str,
        config: LeaderElectionSettings,
        identity: str | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.leases = CoordinationV1Api(api)
        self.namespace = namespace
        self.name = name
        self.config = config
        self.identity = identity or default_identity()
        self.clock = clock
        self.wall = wall
        self.record: LeaseRecord | None = None
        self.seen: float | None = None
        self.renewed: float | None = None
        self.holds = False  # this replica's last write (or read) says it holds the Lease
        self.terms = 0  # times this replica took the Lease
        self._pending: asyncio.Future[bool] | None = None  # the try running in its thread
        self._rng = random.Random()

    # -------------------------------------------------------------------------- state

    def leading(self) -> bool:
        return self.holds and still_leading(self.renewed, self.clock(), self.config.renewDeadlineSeconds)

    @property
    def holder(self) -> str:
        """Who holds the Lease as this replica last read it ("" when nobody, or not read yet)."""
        return self.record.holder if self.record is not None else ""

    @property
    def transitions(self) -> int:
        return self.record.transitions if self.record is not None else 0

    def _request_timeout(self) -> float:
        # As long as a renewal may usefully take: a busy API server that answers within the renew
        # deadline keeps its leader (the wait for it is bounded by the deadline anyway).
        return min(MAX_REQUEST_SECONDS, self.config.renewDeadlineSeconds)

    # ---------------------------------------------------------------------------- I/O

    def _read(self) -> LeaseRecord | None:
        try:
            lease = self.leases.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=self._request_timeout()
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return record_of(lease)

    def _write(self, step: Step, spec: dict[str, Any]) -> LeaseRecord:
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": spec,
        }
        if step == Step.CREATE:
            created = self.leases.create_namespaced_lease(
                self.namespace, body, _request_timeout=self._request_timeout()
            )
            return record_of(created)
        assert self.record is not None
        # The resourceVersion read: a Lease written by anyone since is a 409, never overwritten.
        body["metadata"]["resourceVersion"] = self.record.resource_version
        replaced = self.leases.replace_namespaced_lease(
            self.name, self.namespace, body, _request_timeout=self._request_timeout()
        )
        return record_of(replaced)

    def _observe(self, record: LeaseRecord | None) -> None:
        now = self.clock()
        self.seen = seen_since(self.record, self.seen, record, now)
        if record is not None and self.record is not None and record.holder != self.record.holder:
            log.info(
                "observer lease changed hands",
                lease=self.name,
                holder=record.holder or None,
                transitions=record.transitions,
            )
        self.record = record
        if record is None or record.holder != self.identity:
            self.holds = False

    def try_acquire_or_renew(self) -> bool:
        """One try (blocking: run it in a thread): True when this replica holds the Lease after it.

        A standby reads the Lease first; a leader writes its renewal straight on the version it last
        wrote (a 409 means someone else wrote since: read again next time)."""
        sent = self.clock()
        if not self.holds or self.record is None:
            self._observe(self._read())
        step = next_step(self.record, self.identity, self.seen, self.clock())
        if step == Step.WAIT:
            return False
        spec = lease_spec(step, self.record, self.identity, self.config.leaseDurationSeconds, self.wall())
        try:
            written = self._write(step, spec)
        except ApiException as err:
            if err.status in (409, 404):
                # Someone else wrote it (or deleted it) since this replica read it: read it again.
                self.record, self.seen, self.holds = None, None, False
                return False
            raise
        if step != Step.RENEW:
            self.terms += 1
            log.info(
                "observer lease taken",
                lease=self.name,
                identity=self.identity,
                transitions=written.transitions,
                previous=self.record.holder if self.record is not None else None,
            )
        self.record, self.seen, self.renewed, self.holds = written, sent, sent, True
        return True

    def release(self) -> None:
        """Write the Lease as held by nobody, if this replica still holds it (blocking)."""
        if not self.holds or self.record is None:
            return
        self.holds = False
        try:
            self._write(Step.RENEW, released_spec(self.record, self.wall()))
        except Exception as err:  # it expires on its own
            log.warning("observer lease not released", lease=self.name, error=type(err).__name__)
            return
        log.info("observer lease released", lease=self.name, identity=self.identity)

    # ----------------------------------------------------------------------------- run

    async def _try(self, limit: float | None = None) -> bool:
        """One try in a thread, waited for at most ``limit`` seconds. A try not answered in time is
        not waited for (a leader that did not hear back has not renewed) but not started again
        either while it runs: one try at a time. Should its write land later, it counts from when
        it was sent, which is safe; a Lease someone else wrote since refuses it (409)."""
        if self._pending is None or self._pending.done():
            self._pending = asyncio.ensure_future(asyncio.to_thread(self.try_acquire_or_renew))
            # An abandoned try's error is logged by the try that waits for it, or dropped here.
            self._pending.add_done_callback(lambda f: f.cancelled() or f.exception())
        try:
            async with asyncio.timeout(limit if limit is not None else self._request_timeout() * 2 + 1):
                return await asyncio.shield(self._pending)
        except TimeoutError:
            log.warning("observer lease not read or written in time", lease=self.name, leading=self.leading())
            return False
        except Exception as err:  # the API server unreachable: the next period tries again
            log.warning(
                "observer lease not read or written",
                lease=self.name,
                error=type(err).__name__,
                status=getattr(err, "status", None),
            )
            return False

    def _period(self) -> float:
        return self.config.retryPeriodSeconds * self._rng.uniform(1.0, 1.2)

    async def acquire(self) -> None:
        """Until this replica holds the Lease."""
        log.info("observer standing by", lease=self.name, namespace=self.namespace, identity=self.identity)
        while not await self._try():
            await asyncio.sleep(self._period())

    async def lead(self, work: Callable[[], Awaitable[None]], stop_grace_seconds: float | None = None) -> None:
        """Run ``work()`` while this replica leads; return once it no longer does and ``work`` has
        stopped. ``work`` ending by itself ends the term (its error raised here) after the release."""
        grace = stop_grace_seconds
        if grace is None:
            grace = max(1.0, self.config.leaseDurationSeconds - self.config.renewDeadlineSeconds)
        task: asyncio.Task[None] = asyncio.ensure_future(work())
        log.info("observer leading", lease=self.name, identity=self.identity, transitions=self.transitions)
        LEADING.labels(self.name).set(1)
        clean = False
        lost = False
        try:
            while self.leading():
                assert self.renewed is not None
                deadline = self.renewed + self.config.renewDeadlineSeconds
                wait = max(0.0, min(self._period(), deadline - self.clock()))
                await asyncio.wait([task], timeout=wait)
                if task.done():
                    break
                remaining = deadline - self.clock()
                if remaining > 0:
                    await self._try(limit=remaining)
            clean = task.done()
            lost = not clean
        finally:
            LEADING.labels(self.name).set(0)
            stopped_at = self.clock()
            if not task.done():
                task.cancel()
            done, _ = await asyncio.wait([task], timeout=grace)
            if not done:
                log.error("observer did not stop within the grace", lease=self.name, seconds=grace)
            log.info(
                "observer stopped leading",
                lease=self.name,
                identity=self.identity,
                reason="lease lost (not renewed within the renew deadline, or taken)" if lost else "stopping",
                stop_seconds=round(self.clock() - stopped_at, 3),
            )
            # Released when the work ended or the process stops while it still leads; a lost Lease
            # is left to expire (it may be someone else's already).
            if not lost and self.leading():
                await asyncio.shield(asyncio.to_thread(self.release))
            self.holds = False
        if clean and task.done() and not task.cancelled():
            task.result()

    async def run(self, work: Callable[[], Awaitable[None]]) -> None:
        """Stand by, lead, stand by again, for as long as it runs; cancelling it stops ``work`` and
        releases the Lease."""
        while True:
            await self.acquire()
            await self.lead(work)
