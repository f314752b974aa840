"""The observer's leader election against the real API server of the local control plane.

Two electors, each with its own client, compete for one Lease in a namespace of the test's own, with
short timings (lease 3 s, renew deadline 2 s, retry 0.25 s). Their "work" records when it starts and
stops, so the tests can say that two terms never overlapped:

- one leads, the other stands by, the Lease names the leader;
- a clean stop (cancel: SIGTERM) hands over at once: the Lease is released, the standby takes it at
  its next read, ``leaseTransitions`` counts one;
- a partition (the leader's connection to the API server goes silent, requests hang): the leader
  stops at its renew deadline, the standby starts no earlier than a lease duration after the last
  renewal, so at least ``leaseDuration - renewDeadline`` after the old leader stopped; healed, the old
  leader stands by and does not take the Lease back.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field

import pytest
from kubernetes.client import ApiClient, CoordinationV1Api

from devstack.cluster.launcher import LocalCluster
from inference_api.settings import LeaderElectionSettings
from tests.polling import until
from tests.tcp_proxy import SilentProxy
from worker.observer.leader import LeaderElector

pytestmark = [pytest.mark.cluster]

TIMINGS = LeaderElectionSettings(enabled=True, leaseDurationSeconds=3, renewDeadlineSeconds=2, retryPeriodSeconds=0.25)
LEASE = "observer-test"


@dataclass
class Terms:
    """When each replica's work started and stopped (monotonic seconds)."""

    events: list[tuple[str, str, float]] = field(default_factory=list)

    def work(self, who: str) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            self.events.append((who, "start", time.monotonic()))
            try:
                await asyncio.Event().wait()
            finally:
                self.events.append((who, "stop", time.monotonic()))

        return run

    def running(self) -> set[str]:
        now: set[str] = set()
        for who, what, _ in self.events:
            (now.add if what == "start" else now.discard)(who)
        return now

    def at(self, who: str, what: str, nth: int = 0) -> float:
        return [t for w, x, t in self.events if w == who and x == what][nth]

    def never_overlapped(self) -> None:
        running: set[str] = set()
        for who, what, at in self.events:
            if what == "start":
                assert not running, f"{who} started at {at:.3f} while {running} still ran: {self.events}"
                running.add(who)
            else:
                running.discard(who)


async def stays(check: Callable[[], bool], seconds: float, what: str = "") -> None:
    """``check`` holds for the whole period (polled while the event loop runs the electors)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert check(), what or "the condition stopped holding"
        await asyncio.sleep(0.05)


@pytest.fixture
def namespace(make_namespace: Callable[..., str]) -> str:
    return make_namespace("leader", users=())


@contextlib.contextmanager
def client(local_cluster: LocalCluster, host: str | None = None) -> Iterator[ApiClient]:
    with local_cluster.api_client("admin") as api:
        if host is not None:
            api.configuration.host = host
            # The kubeconfig loader's token hook would write the kubeconfig's server back before
            # every request; the token itself stays.
            api.configuration.refresh_api_key_hook = None
        yield api


@contextlib.asynccontextmanager
async def running(elector: LeaderElector, terms: Terms, who: str) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(elector.run(terms.work(who)))
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def lease(api: ApiClient, namespace: str) -> tuple[str | None, int]:
    spec = CoordinationV1Api(api).read_namespaced_lease(LEASE, namespace).spec
    return spec.holder_identity, int(spec.lease_transitions or 0)


async def test_one_leads_and_a_clean_stop_hands_over_at_once(local_cluster: LocalCluster, namespace: str) -> None:
    terms = Terms()
    with client(local_cluster) as api_a, client(local_cluster) as api_b:
        a = LeaderElector(api_a, namespace, LEASE, TIMINGS, "replica-a")
        b = LeaderElector(api_b, namespace, LEASE, TIMINGS, "replica-b")
        async with contextlib.AsyncExitStack() as stack, running(a, terms, "a") as task_a:
            await until(lambda: terms.running() == {"a"}, timeout=20, what="a leading")
            assert await asyncio.to_thread(lease, api_a, namespace) == ("replica-a", 0)
            await stack.enter_async_context(running(b, terms, "b"))
            # b stands by for longer than a lease duration: a renews, b never starts.
            await stays(lambda: terms.running() == {"a"} and a.leading() and not b.leading(), seconds=4)
            assert b.holder == "replica-a"

            stopped = time.monotonic()
            task_a.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task_a
            await until(lambda: terms.running() == {"b"}, timeout=10, what="b leading")
            handover = terms.at("b", "start") - stopped
            print(
                f"\nclean handover (released Lease): {handover:.2f}s (lease duration {TIMINGS.leaseDurationSeconds}s)"
            )
            # Released: taken at b's next read, well within a lease duration.
            assert handover < TIMINGS.leaseDurationSeconds
            assert await asyncio.to_thread(lease, api_b, namespace) == ("replica-b", 1)
    terms.never_overlapped()


async def test_a_partitioned_leader_stops_before_the_standby_starts(
    local_cluster: LocalCluster, namespace: str
) -> None:
    terms = Terms()
    proxy = SilentProxy(local_cluster.server.removeprefix("https://"))
    await proxy.open()
    try:
        with client(local_cluster, f"https://{proxy.address}") as api_a, client(local_cluster) as api_b:
            a = LeaderElector(api_a, namespace, LEASE, TIMINGS, "replica-a")
            b = LeaderElector(api_b, namespace, LEASE, TIMINGS, "replica-b")
            async with running(a, terms, "a"):
                await until(lambda: terms.running() == {"a"}, timeout=20, what="a leading")
                assert proxy.connections > 0, "a does not reach the API server through the relay"
                async with running(b, terms, "b"):
                    await stays(lambda: terms.running() == {"a"}, seconds=1)

                    cut = time.monotonic()
                    proxy.silent = True
                    last_renewal = a.renewed
                    assert last_renewal is not None
                    await until(lambda: "b" in terms.running(), timeout=20, what="b leading")
                    a_stop, b_start = terms.at("a", "stop"), terms.at("b", "start")
                    print(
                        f"\npartitioned leader: stopped {a_stop - cut:.2f}s after the cut, standby started "
                        f"{b_start - cut:.2f}s after it; gap {b_start - a_stop:.2f}s "
                        f"(lease {TIMINGS.leaseDurationSeconds}s, renew deadline {TIMINGS.renewDeadlineSeconds:g}s)"
                    )
                    # a stopped at its renew deadline (counted from its last renewal sent), and its
                    # fence was shut from then on.
                    assert a.renewed is not None
                    assert a_stop >= a.renewed + TIMINGS.renewDeadlineSeconds - 0.05
                    assert a_stop <= a.renewed + TIMINGS.renewDeadlineSeconds + 2.0  # a busy machine wakes it late
                    assert not a.leading()
                    # b started a lease duration after it saw the last renewal: after a had stopped,
                    # with (about) leaseDuration - renewDeadline to spare.
                    gap = TIMINGS.leaseDurationSeconds - TIMINGS.renewDeadlineSeconds
                    assert b_start - a_stop >= gap - 0.3
                    assert await asyncio.to_thread(lease, api_b, namespace) == ("replica-b", 1)

                    # Healed: a reads the Lease again (on a new connection: the silent ones are
                    # cut), sees b renewing, and stands by.
                    await proxy.close()
                    proxy.silent = False
                    await proxy.open()
                    await stays(
                        lambda: terms.running() == {"b"} and not a.leading(), seconds=TIMINGS.leaseDurationSeconds + 1
                    )
                    assert a.holder == "replica-b"
    finally:
        await proxy.close()
    terms.never_overlapped()
