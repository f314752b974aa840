"""One namespace's flood and another namespace's one order at the observer's start window.

    python -m benchmarks.start_fairness [--flood 499] [--window 500] [--repeats 3]

Starts the Temporal dev server behind the module's mTLS terminator (as ``benchmarks/scale.py`` does),
then, for each mode, puts ``--flood`` new orders of namespace ``tenant-a`` into the real outbox
(``worker/observer/outbox.py``, the module's 16 senders and start window) and then one of
``tenant-b``, and measures when b's signal-with-start was delivered: seconds after it was put, and
how many starts went before it. Modes: ``fair`` (as shipped: namespaces in turn) and ``fifo`` (every
start in one shared turn: first come first started, as before). Prints each run, the medians, and
the ratio of b's delay fifo/fair.

The default flood (499) fits the window with b, so the figure is the send queue alone; a flood of
500 or more fills the window and a first-come b also waits for a place (an order of a's to settle,
or ``startWindowSeconds``, 120 s).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import statistics
import time
import uuid
from dataclasses import dataclass

import structlog
from temporalio.client import Client

from benchmarks.scale import dev_server
from inference_api.observation import OrderSignal
from inference_api.payloads import OrderRef, order_workflow_id
from inference_api.settings import ObserverSettings
from worker.observer.outbox import Delivery, Outbox, signal_to


class FifoOutbox(Outbox):
    """The outbox with every waiting start in one turn: first come first started (before fairness)."""

    def turn_of(self, delivery: Delivery) -> str:
        return ""


@dataclass
class Run:
    mode: str
    delay: float
    before: int
    total: float


async def once(client: Client, mode: str, flood: int, window: int) -> Run:
    kind = Outbox if mode == "fair" else FifoOutbox
    outbox = kind(client, f"fairness-{uuid.uuid4().hex[:8]}", rpc_timeout_seconds=10, start_window=window)
    run = uuid.uuid4().hex[:6]
    refs = [OrderRef(namespace="tenant-a", name=f"a-{run}-{i}", uid=str(uuid.uuid4())) for i in range(flood)]
    lone = OrderRef(namespace="tenant-b", name=f"b-{run}", uid=str(uuid.uuid4()))
    lone_id = order_workflow_id(lone.namespace, lone.name, lone.uid)
    task = asyncio.create_task(outbox.run())
    try:
        began = time.monotonic()
        for r in refs:
            outbox.put(signal_to(r, OrderSignal.SPEC_CHANGED, [1], start=True, new_order=True))
        put_b = time.monotonic()
        outbox.put(signal_to(lone, OrderSignal.SPEC_CHANGED, [1], start=True, new_order=True))
        while lone_id not in outbox.started:
            await asyncio.sleep(0.005)
        delay = outbox.started[lone_id] - put_b
        before = sum(1 for t in outbox.started.values() if t < outbox.started[lone_id])
        while len(outbox.started) < min(flood + 1, window):
            await asyncio.sleep(0.05)
        total = time.monotonic() - began
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    # The workflows are left to the dev server (no worker polls their queue); it is thrown away.
    return Run(mode, delay, before, total)


async def main(flood: int, window: int, repeats: int) -> None:
    print(f"start window {window}, {flood} new orders of tenant-a then 1 of tenant-b; 16 senders; dev server")
    runs: list[Run] = []
    async with dev_server() as env:
        for n in range(repeats):
            # Alternated, so neither mode always meets the freshly started server.
            for mode in ("fair", "fifo") if n % 2 else ("fifo", "fair"):
                r = await once(env.client, mode, flood, window)
                runs.append(r)
                print(
                    f"  {mode:4}  b delivered {r.delay * 1000:8.1f} ms after it was put, "
                    f"{r.before:4} starts before it; all {min(flood + 1, window)} in {r.total:.2f} s"
                )
    fair = statistics.median(r.delay for r in runs if r.mode == "fair")
    fifo = statistics.median(r.delay for r in runs if r.mode == "fifo")
    fair_rank = statistics.median(r.before for r in runs if r.mode == "fair")
    fifo_rank = statistics.median(r.before for r in runs if r.mode == "fifo")
    print(f"median b delay: fair {fair * 1000:.1f} ms ({fair_rank:.0f} before it), fifo {fifo * 1000:.1f} ms")
    print(f"({fifo_rank:.0f} before it); fifo/fair = {fifo / fair:.1f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flood", type=int, default=499, help="new orders of tenant-a put first (default 499)")
    parser.add_argument(
        "--window", type=int, default=ObserverSettings().startWindow, help="the start window (default: the module's)"
    )
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    asyncio.run(main(args.flood, args.window, args.repeats))
