"""What the endpoint front costs a request: the same requests straight to the runtime and through the front.

    .venv/bin/python -m benchmarks.endpoint_front [--requests 300] [--concurrency 16]

The runtime is the stand-in (``devstack.standins.runtime``: it answers in well under a millisecond
of its own, so what is measured is the hop); the front is the built ``endpoint-front`` container's
own command (``activities.builders.endpoint_front.front_command``) run with this interpreter, as the
local stack runs it. Printed, each with its ratio to the direct figure: the median and 99th
percentile latency of a chat completion one at a time, the time to the first event and to the end of
a streamed one, and the completions per second with ``--concurrency`` in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

import devstack.standins.engine as eng
from activities.builders.endpoint_front import front_command
from devstack.standins.runtime import StandInRuntime

MODEL = "Qwen/Qwen2.5-7B-Instruct"
TOKEN = "benchmark-token"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "Say this is a test"}], "max_tokens": 16}


@contextmanager
def front(upstream_port: int) -> Iterator[str]:
    port = eng.free_port()
    argv, env = eng.front_launch(
        front_command(), TOKEN, python=Path(sys.executable), port=port, engine_port=upstream_port
    )
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{url}/health", timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("the endpoint front did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(10)


def sequential(client: httpx.Client, url: str, requests: int) -> list[float]:
    seconds = []
    for _ in range(requests):
        started = time.perf_counter()
        client.post(f"{url}/v1/chat/completions", json=CHAT).raise_for_status()
        seconds.append(time.perf_counter() - started)
    return seconds


def streamed(client: httpx.Client, url: str, requests: int) -> tuple[list[float], list[float]]:
    first, whole = [], []
    for _ in range(requests):
        started = time.perf_counter()
        with client.stream("POST", f"{url}/v1/chat/completions", json={**CHAT, "stream": True}) as answer:
            answer.raise_for_status()
            lines = answer.iter_lines()
            next(line for line in lines if line.startswith("data: "))
            first.append(time.perf_counter() - started)
            for _line in lines:
                pass
        whole.append(time.perf_counter() - started)
    return first, whole


async def throughput(url: str, requests: int, concurrency: int) -> float:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(headers=headers, timeout=30) as client:
        left = requests

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                (await client.post(f"{url}/v1/chat/completions", json=CHAT)).raise_for_status()

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return requests / (time.perf_counter() - started)


def figures(url: str, requests: int, concurrency: int) -> dict[str, float]:
    with httpx.Client(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as client:
        sequential(client, url, 20)  # warm both ends
        one = sorted(sequential(client, url, requests))
        first, whole = streamed(client, url, max(requests // 3, 10))
    return {
        "chat p50 ms": 1000 * statistics.median(one),
        "chat p99 ms": 1000 * one[min(len(one) - 1, int(0.99 * len(one)))],
        "stream first event p50 ms": 1000 * statistics.median(first),
        "stream whole p50 ms": 1000 * statistics.median(whole),
        f"completions/s at {concurrency} in flight": asyncio.run(throughput(url, requests, concurrency)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=16)
    args: Any = parser.parse_args(argv)
    with StandInRuntime(MODEL, token=TOKEN) as runtime, front(int(runtime.url.rsplit(":", 1)[1])) as url:
        direct = figures(runtime.url, args.requests, args.concurrency)
        fronted = figures(url, args.requests, args.concurrency)
    print(f"{'':<34} {'direct':>9} {'front':>9} {'ratio':>7}")
    for name, value in direct.items():
        print(f"{name:<34} {value:9.2f} {fronted[name]:9.2f} {fronted[name] / value:6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
