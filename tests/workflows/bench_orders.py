"""Benchmark: how many orders one worker takes from signal-with-start to Ready, on the real dev server.

Activities are the in-memory fakes of tests/workflows/world.py (no cluster): this measures the workflow
engine's side of an order — history, signals, timers, status publication — not Kubernetes.

    python -m tests.workflows.bench_orders [--orders 50]

Prints the latency of one order alone (the baseline, measured in the same run), the time for N
orders started at once, orders per second, the ratio of N-order time to N x the baseline (below 1
means the worker overlaps orders), and the history events per order.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from devstack.temporal_tls import local_temporal
from inference_api.types import Phase
from tests.factories import make_class, make_order
from tests.workflows.world import FAST, Harness, World
from workflows.order import OrderWorkflow
from workflows.search_attributes import ALL_KEYS


async def time_to_ready(harness: Harness, names: list[str]) -> float:
    started = time.perf_counter()
    for name in names:
        await harness.start(make_order(name), FAST)

    def all_ready() -> bool:
        ready = {s.ref.name for s in harness.world.statuses if s.phase == Phase.READY}
        return all(n in ready for n in names)

    await harness.until(all_ready, timeout=600)
    return time.perf_counter() - started


async def main(orders: int, repeats: int) -> None:
    # The dev server behind the chart's mTLS terminator, as the module reaches it.
    with tempfile.TemporaryDirectory(prefix="bench-orders-") as directory:
        async with local_temporal(
            Path(directory), data_converter=pydantic_data_converter, search_attributes=list(ALL_KEYS), ui=False
        ) as server:
            client = await server.connect("admin", data_converter=pydantic_data_converter)
            world = World()
            world.classes["default-llm"] = make_class()
            queue = f"bench-{uuid.uuid4()}"
            async with Worker(client, task_queue=queue, workflows=[OrderWorkflow], activities=world.activities()):
                harness = Harness(client, world, queue)
                singles = [await time_to_ready(harness, [f"single-{i}"]) for i in range(repeats)]
                baseline = statistics.median(singles)
                batch = await time_to_ready(harness, [f"batch-{i}" for i in range(orders)])
                ids = [h.id async for h in client.list_workflows("WorkflowType = 'OrderWorkflow'")]
                handle = client.get_workflow_handle(ids[0])
                events = len([e async for e in handle.fetch_history_events()])
    print(f"one order alone (median of {repeats}): {baseline * 1000:.0f} ms to Ready")
    print(f"{orders} orders at once: {batch:.2f} s to all Ready, {orders / batch:.1f} orders/s")
    print(f"ratio {orders}-order time / ({orders} x one order): {batch / (orders * baseline):.2f}")
    print(f"history events of one Ready order (incl. health watch start): {events}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--orders", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.orders, args.repeats))
