"""What mutual TLS costs a workflow round trip: the same dev server reached plain (its loopback port,
which nothing but the terminator uses in the module) and through the chart's mTLS terminator (nginx,
``devstack.temporal_tls``), one worker each.

For each path: ``--workflows`` workflows one after another (start, run on the worker, complete:
``execute_workflow`` latency, median and p95), then the same number at once (wall time). Prints the
figures and the mTLS/plain ratio.

    .venv/bin/python -m benchmarks.temporal_tls --workflows 200
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker

from devstack.temporal_tls import local_temporal


@workflow.defn(name="TLSBenchRoundTrip", sandboxed=False)
class RoundTrip:
    @workflow.run
    async def run(self, name: str) -> str:
        return name


async def _measure(client: Client, count: int) -> tuple[list[float], float]:
    queue = f"tls-bench-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, workflows=[RoundTrip]):
        for i in range(5):  # warm: connections, the worker's pollers
            await client.execute_workflow(RoundTrip.run, "warm", id=f"warm-{queue}-{i}", task_queue=queue)
        latencies = []
        for i in range(count):
            started = time.perf_counter()
            await client.execute_workflow(RoundTrip.run, "x", id=f"seq-{queue}-{i}", task_queue=queue)
            latencies.append(time.perf_counter() - started)
        started = time.perf_counter()
        await asyncio.gather(
            *(
                client.execute_workflow(RoundTrip.run, "x", id=f"par-{queue}-{i}", task_queue=queue)
                for i in range(count)
            )
        )
        return latencies, time.perf_counter() - started


def _p95(values: list[float]) -> float:
    return sorted(values)[max(0, round(0.95 * len(values)) - 1)]


async def main(count: int) -> None:
    with tempfile.TemporaryDirectory(prefix="tls-bench-") as directory:
        async with local_temporal(Path(directory), ui=False) as server:
            plain = await Client.connect(server.upstream)
            mtls = await server.connect("admin")  # starts and runs workflows: every method
            results = {}
            for label, client in (("plain", plain), ("mTLS", mtls), ("plain again", plain), ("mTLS again", mtls)):
                results[label] = await _measure(client, count)
    print(f"workflow round trip (start + run + complete), {count} workflows, dev server on loopback")
    for label, (latencies, wall) in results.items():
        print(
            f"  {label:<12} one at a time: median {statistics.median(latencies) * 1000:.1f} ms, "
            f"p95 {_p95(latencies) * 1000:.1f} ms;  {count} at once: {wall:.2f} s ({count / wall:.0f}/s)"
        )
    plain_lat = statistics.median(results["plain"][0] + results["plain again"][0])
    mtls_lat = statistics.median(results["mTLS"][0] + results["mTLS again"][0])
    plain_wall = (results["plain"][1] + results["plain again"][1]) / 2
    mtls_wall = (results["mTLS"][1] + results["mTLS again"][1]) / 2
    print(
        f"  ratio mTLS/plain: median latency {mtls_lat / plain_lat:.2f}x, {count} at once {mtls_wall / plain_wall:.2f}x"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workflows", type=int, default=200)
    asyncio.run(main(parser.parse_args().workflows))
