"""The apply's ceiling reader (activities/preemption_ledger.py) on the real Temporal dev server.

A reader kept across applies reads only the events a run wrote since it last read, answers what a
fresh read of the whole history answers at every step, and starts over on a new run. The run here is
the benchmark's ``CeilingWriter`` (benchmarks/ceiling_read.py), which writes the events a preemption
run writes, told what to write by signals: the preemption workflow's own story is in
test_preemption_workflow.py.
"""

from __future__ import annotations

import asyncio
import uuid

from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from activities.preemption_ledger import CeilingReader, ceiling_told
from benchmarks.ceiling_read import CeilingWriter, Tell
from tests.polling import until
from workflows.preemption import PreemptionState

DONOR = "order/support/low/uid-1"
OTHER = "order/support/mid/uid-2"
NEVER = "order/support/high/uid-3"


async def told_all(handle: WorkflowHandle[CeilingWriter, None], count: int) -> None:
    async def done() -> bool:
        return (await handle.query(CeilingWriter.counts))[0] >= count

    await until(done, timeout=30, what=f"{count} ceilings sent")
    # The query answers once the commands are decided; the history holds them once the task completed.
    await asyncio.sleep(0.3)


async def test_a_kept_reader_reads_only_new_events_agrees_with_a_whole_read_and_starts_over_on_a_new_run(
    temporal_client: Client,
) -> None:
    queue = f"ceilings-{uuid.uuid4().hex[:8]}"
    workflow_id = f"preemption/{queue}/gpu"
    reader = CeilingReader()

    async def agree() -> dict[str, int | None]:
        answers = {}
        for order in (DONOR, OTHER, NEVER):
            whole = await ceiling_told(temporal_client, workflow_id, order)
            kept = await reader.ceiling(temporal_client, workflow_id, order)
            assert kept == whole, (order, kept, whole)
            answers[order] = kept
        return answers

    # No preemption workflow yet: nobody lowered anything.
    assert await reader.ceiling(temporal_client, workflow_id, DONOR) is None
    async with Worker(temporal_client, task_queue=queue, workflows=[CeilingWriter]):
        handle = await temporal_client.start_workflow(
            CeilingWriter.run,
            PreemptionState(deviceClass="gpu", ceilings={DONOR: 3}),
            id=workflow_id,
            task_queue=queue,
        )
        await asyncio.sleep(0.5)
        assert await agree() == {DONOR: 3, OTHER: None, NEVER: None}
        first_run = reader.ledgers[workflow_id].runId

        # Many tells: the first read took the whole history, the next ones take what is new.
        for i in range(40):
            await handle.signal(CeilingWriter.tell, Tell(OTHER, 1 + i % 3))
        await handle.signal(CeilingWriter.tell, Tell(DONOR, 2))
        await told_all(handle, 41)
        assert await agree() == {DONOR: 2, OTHER: 1 + 39 % 3, NEVER: None}
        length = reader.ledgers[workflow_id].upto
        assert length > 3 * 40  # each tell is a signal, a task and a command at least

        # Nothing new: a read costs one page (the server's newest batch of events), not the run's length.
        events, pages = reader.events_read, reader.pages_read
        for _ in range(10):
            assert await reader.ceiling(temporal_client, workflow_id, DONOR) == 2
        assert reader.pages_read - pages == 10
        assert reader.events_read - events < 10 * length / 2
        # A few new events: one page again, and answered (a whole read of NEVER's ceiling reads them all).
        await handle.signal(CeilingWriter.tell, Tell(DONOR, None))
        await told_all(handle, 42)
        pages = reader.pages_read
        assert await agree() == {DONOR: None, OTHER: 1 + 39 % 3, NEVER: None}
        assert reader.pages_read - pages == 3

        # A new run (continue-as-new) starts with what the last one carried; the reader reads it afresh.
        await handle.signal(CeilingWriter.tell, Tell(NEVER, 4))
        await handle.signal(CeilingWriter.carry_on)

        async def continued() -> bool:
            return (await temporal_client.get_workflow_handle(workflow_id).describe()).run_id != first_run

        await until(continued, timeout=30, what="continue-as-new")
        await asyncio.sleep(0.3)
        assert await agree() == {DONOR: None, OTHER: 1 + 39 % 3, NEVER: 4}
        assert reader.ledgers[workflow_id].runId != first_run
        assert reader.ledgers[workflow_id].told == {}  # all of it from the new run's start input
