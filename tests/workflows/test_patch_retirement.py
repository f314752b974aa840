"""A run says which code generation started it, and a release that retires a patch does not start its
worker while older runs are running (worker/patch_retirement.py), on the real Temporal dev server."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from inference_api.observation import ORDER_WORKFLOW_TYPE
from tests.factories import make_order
from tests.workflows.world import Harness
from worker.patch_retirement import PatchRetirementError, check_patch_retirement
from workflows.patches import ORDER_PATCHES, RUN_GENERATION, Patch, Step
from workflows.search_attributes import ORDER_RUN_GENERATION

pytestmark = pytest.mark.temporal


@workflow.defn(name=ORDER_WORKFLOW_TYPE)
class RecordedBeforeGenerations:
    """An order workflow run as the code before generations wrote it: no OrderRunGeneration."""

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)


def retiring(added: int) -> tuple[Patch, ...]:
    """The table as a later release that deprecates the first patch (added at ``added``) has it."""
    first, *rest = ORDER_PATCHES
    return (Patch(first.id, added=added, step=Step.DEPRECATED), *rest)


async def test_a_run_records_its_generation_and_only_older_runs_hold_back_a_retiring_release(
    harness: Harness, temporal_client: Client
) -> None:
    handle = await harness.start(make_order(f"gen-{uuid.uuid4().hex[:6]}"))

    async def recorded() -> bool:
        described = await handle.describe()
        return described.typed_search_attributes.get(ORDER_RUN_GENERATION) == RUN_GENERATION

    await harness.until(recorded, what="OrderRunGeneration on the run")
    # This release retires nothing: it starts whatever runs.
    assert await check_patch_retirement(temporal_client, harness.task_queue) == 0
    # A release whose retired patch needs this run's generation starts too ...
    assert (
        await check_patch_retirement(temporal_client, harness.task_queue, retiring(added=RUN_GENERATION))
        == RUN_GENERATION
    )

    # ... but not one that needs a later generation while this run is running.
    async def refused(table: tuple[Patch, ...]) -> str:
        with pytest.raises(PatchRetirementError) as caught:
            await check_patch_retirement(temporal_client, harness.task_queue, table)
        return str(caught.value)

    ahead = retiring(added=RUN_GENERATION + 1)
    message = await harness_until_refused(harness, refused, ahead)
    assert f"older than {RUN_GENERATION + 1}" in message
    assert ORDER_PATCHES[0].id in message
    await handle.terminate(reason="test over")


async def harness_until_refused(harness: Harness, refused: object, table: tuple[Patch, ...]) -> str:
    """Visibility lags the run's upsert a moment: ask until the count sees it."""
    out: list[str] = []

    async def check() -> bool:
        try:
            out.append(await refused(table))  # type: ignore[operator]
        except pytest.fail.Exception:
            return False
        return True

    await harness.until(check, what="the running run counted")
    return out[-1]


async def test_a_run_recorded_before_generations_holds_back_any_retirement(temporal_client: Client) -> None:
    queue = f"old-{uuid.uuid4().hex[:6]}"
    async with Worker(
        temporal_client,
        task_queue=queue,
        workflows=[RecordedBeforeGenerations],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        handle = await temporal_client.start_workflow(
            RecordedBeforeGenerations.run, id=f"old-{uuid.uuid4().hex[:6]}", task_queue=queue
        )
        try:
            told: list[str] = []
            for _ in range(100):
                try:
                    await check_patch_retirement(temporal_client, queue, retiring(added=0))
                except PatchRetirementError as err:
                    told.append(str(err))
                    break
                await asyncio.sleep(0.1)
            assert told, "a run without OrderRunGeneration was never counted"
            assert "older than 1" in told[0]
        finally:
            await handle.terminate(reason="test over")
