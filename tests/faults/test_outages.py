"""Transient outages never fail a workflow: every step of an order (and preemption's Event) refused for
longer than any bounded retry policy allows, the workflows stay Running and the orders converge after.

The workflows run on the real dev server over the fake activity world (tests/workflows/world.py), with
``Outages`` (tests/faults/outage.py) in front of its activities: the calls of one step of one order are
refused (``ConnectionRefusedError``, what an unreachable API server or planner gives a client) for
OUTAGE_SECONDS from the first of them, each order a different step, all at once. The same outages
with the real activities, the real API server and the real planner service are
tests/faults/test_step_outages.py.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from temporalio import workflow
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.worker import Worker

from activities.metrics import PreemptionMetricsCollector
from inference_api.reasons import EventReason, Reason
from inference_api.types import Phase
from tests.factories import make_class, make_order
from tests.faults.outage import OUTAGE_SECONDS, Outage, Outages
from tests.polling import until
from tests.preemption.test_preemption_workflow import fill, replay_settled
from tests.workflows.test_replay import record
from tests.workflows.world import FAST, Stand, World, new_world, observing, running_worker, start_order
from workflows import activity_names as act
from workflows.order import OrderWorkflow
from workflows.preemption import PreemptionWorkflow

# The most attempts any bounded policy of the workflows ever allowed (the first probe's, preemption's
# Event had 5): an outage that refuses as many outlasted it.
BOUNDED_ATTEMPTS = 3

# One order per step, refused from its first call of that step on.
STEPS = {
    "validate": act.READ_ORDER,
    "finalizer": act.ENSURE_FINALIZER,
    "resolve": act.RESOLVE_MODEL,
    "plan": act.PLAN_LAUNCH,
    "apply": act.APPLY_WORKLOAD,
    "status": act.PUBLISH_STATUS,
}


@asynccontextmanager
async def outage_harness(client: Client, outages: Outages) -> AsyncIterator[tuple[World, str]]:
    """A worker of the order workflow over a new world whose activities pass through ``outages``;
    every task replays the history from the start (no cache), so nondeterminism fails the test."""
    world = World()
    world.classes["default-llm"] = make_class()
    task_queue = f"outages-{uuid.uuid4().hex[:8]}"
    async with (
        Worker(
            client,
            task_queue=task_queue,
            workflows=[OrderWorkflow],
            activities=outages.wrap(world.activities()),
            max_cached_workflows=0,
            workflow_failure_exception_types=[workflow.NondeterminismError],
        ),
        observing(world),
    ):
        yield world, task_queue


async def statuses(handles: dict[str, WorkflowHandle[Any, Any]]) -> dict[str, WorkflowExecutionStatus | None]:
    return {name: (await handle.describe()).status for name, handle in handles.items()}


async def hold_running_through(
    handles: dict[str, WorkflowHandle[Any, Any]], outages: list[Outage], ended_ok: Callable[[str], bool] = bool
) -> None:
    """Until every outage began and is over: every workflow Running (or, for ``ended_ok`` names,
    Completed), looked at twice a second."""
    deadline = time.monotonic() + 3 * OUTAGE_SECONDS + 60
    while not all(o.over for o in outages):
        assert time.monotonic() < deadline, f"outages never began or ended: {outages}"
        for name, status in (await statuses(handles)).items():
            allowed = {WorkflowExecutionStatus.RUNNING}
            if ended_ok(name):
                allowed.add(WorkflowExecutionStatus.COMPLETED)
            assert status in allowed, f"the workflow of {name} is {status} during the outage"
        await asyncio.sleep(0.5)


async def test_every_step_outlasts_an_outage_of_its_calls(temporal_client: Client) -> None:
    outages = Outages()
    down = {name: outages.add(f"support/{name}", Outage(frozenset([step]))) for name, step in STEPS.items()}
    # A serving order deleted while its reads, status writes and finalizer removal are refused.
    deleted = outages.add(
        "support/delete", Outage(frozenset([act.READ_ORDER, act.PUBLISH_STATUS, act.FINALIZE_ORDER]), armed=False)
    )
    async with outage_harness(temporal_client, outages) as (world, queue):
        handles = {"delete": await start_order(temporal_client, queue, world, make_order("delete"), FAST)}
        await until(lambda: world.phase("delete")[0] == Phase.READY, timeout=30, what="delete Ready")
        for name in STEPS:
            handles[name] = await start_order(temporal_client, queue, world, make_order(name), FAST)
        world.delete_order("delete")
        deleted.arm()
        await handles["delete"].signal(OrderWorkflow.delete)
        said: dict[str, set[str | None]] = {name: set() for name in STEPS}

        async def watch_what_they_say() -> None:
            while True:
                for name in STEPS:
                    said[name].add(world.phase(name)[1])
                await asyncio.sleep(0.2)

        watcher = asyncio.create_task(watch_what_they_say())
        try:
            await hold_running_through(handles, [*down.values(), deleted], ended_ok=lambda name: name == "delete")
        finally:
            watcher.cancel()
        print(
            f"\n{OUTAGE_SECONDS:.0f} s outages; calls refused: "
            + ", ".join(f"{name} {o.refused}" for name, o in [*down.items(), ("delete", deleted)])
        )
        for name, outage in [*down.items(), ("delete", deleted)]:
            assert outage.refused >= BOUNDED_ATTEMPTS, f"{name}: the outage refused only {outage.refused} calls"
        # The order without a plan said why it waits (visible, not a silent retry).
        assert Reason.PLANNER_UNAVAILABLE in said["plan"]

        def all_ready() -> bool:
            return all(world.phase(name)[0] == Phase.READY for name in STEPS)

        await until(all_ready, timeout=90, what="every order Ready after its outage")
        assert await handles["delete"].result() == "deleted"
        assert "support/delete" not in world.finalizers
        for name, status in (await statuses({n: handles[n] for n in STEPS})).items():
            assert status == WorkflowExecutionStatus.RUNNING, f"{name}: {status}"


async def test_the_first_probe_outlasts_an_outage_of_its_calls(temporal_client: Client) -> None:
    outages = Outages()
    probe = outages.add("support/probe", Outage(frozenset([act.PROBE_SERVING])))
    async with outage_harness(temporal_client, outages) as (world, queue):
        world.loading.add("support/probe")
        handles = {"probe": await start_order(temporal_client, queue, world, make_order("probe"), FAST)}
        await until(lambda: world.applies_of("probe"), timeout=30, what="probe applied")
        # The observer sees the replica ready (it reaches the API server; the worker does not).
        await world.let_load("probe")
        await hold_running_through(handles, [probe])
        assert probe.refused >= BOUNDED_ATTEMPTS
        await until(lambda: world.phase("probe")[0] == Phase.READY, timeout=90, what="probe Ready after its outage")


async def test_preemption_outlasts_an_outage_of_its_event(temporal_client: Client) -> None:
    """The recipient's CapacityPreempted Event refused past five attempts: the preemption workflow runs
    on, its hold stands, and the Event is written once the API server answers."""
    outages = Outages()
    # Past 5 attempts (their backoff sums to 15 s).
    seconds = max(OUTAGE_SECONDS, 20)
    refused = outages.add("support/high", Outage(frozenset([act.RECORD_EVENT]), seconds=seconds, armed=False))
    world = new_world(capacity=400)
    metrics = PreemptionMetricsCollector()
    task_queue = f"outages-preemption-{uuid.uuid4().hex[:8]}"
    record_event = [
        fn for fn in world.activities() if getattr(fn, "__temporal_activity_definition").name == act.RECORD_EVENT
    ]
    async with running_worker(temporal_client, task_queue, world, metrics, extra=outages.wrap(record_event)):
        stand = Stand(temporal_client, world, task_queue, metrics)
        await fill(stand)
        refused.arm()
        stand.sim("high").load = 2
        await stand.until(lambda: stand.sim("high").placed == 2, what="high grows to 2")
        preemption = stand.preemption()
        await hold_running_through({"preemption": preemption, **stand.handles}, [refused])
        print(f"\nthe recipient's Event refused {refused.refused} times over {seconds:.0f} s")
        assert refused.refused >= 5  # as many as the old policy's five attempts: they failed the run
        await stand.until(
            lambda: any(e.reason == EventReason.CAPACITY_PREEMPTED and e.ref.name == "high" for e in world.events),
            timeout=60,
            what="the recipient's CapacityPreempted Event written after the outage",
        )
        assert (await preemption.describe()).status == WorkflowExecutionStatus.RUNNING
        state = await preemption.query(PreemptionWorkflow.query_state)
        assert state.ledger.holds, "the hold was lost"
        # Its history (the retries outlasted) replays on this code; frozen once
        # (AI_INFERENCE_RECORD_HISTORIES=1) as histories/preemption-event-outlasts-outages.json.
        await replay_settled(preemption, temporal_client)
        await record(preemption, "preemption-event-outlasts-outages")
