"""A production Temporal's namespace that comes back without the module's search attributes (made
again, restored from an older backup) is mended by the running worker within one check, and a
workflow task that updates them, failing meanwhile, then completes: no restart needed."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import timedelta

from temporalio import workflow
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest, RemoveSearchAttributesRequest
from temporalio.client import Client
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from devstack.temporal_server import ProductionTemporal
from worker.search_attribute_registration import ensure_search_attributes, keep_search_attributes
from workflows.search_attributes import ALL_KEYS, ORDER_PHASE


@workflow.defn(name="UpsertsOrderPhase")
class UpsertsOrderPhase:
    @workflow.run
    async def run(self) -> str:
        workflow.upsert_search_attributes([ORDER_PHASE.value_set("Ready")])
        return "upserted"


async def _registered(client: Client, namespace: str) -> set[str]:
    listed = await client.operator_service.list_search_attributes(ListSearchAttributesRequest(namespace=namespace))
    return set(listed.custom_attributes)


async def test_search_attributes_removed_under_a_running_worker_come_back_and_its_tasks_complete(
    production_temporal: ProductionTemporal,
) -> None:
    namespace = f"sa-kept-{uuid.uuid4().hex[:6]}"
    await production_temporal.register_namespace(await production_temporal.connect("cli"), namespace)
    client = await production_temporal.connect("worker", namespace=namespace)
    names = {key.name for key in ALL_KEYS}
    await ensure_search_attributes(client, namespace)
    keeper = asyncio.create_task(keep_search_attributes(client, namespace, every_seconds=1.0))
    try:
        # The namespace loses them (what a namespace made again looks like to the worker).
        admin = await production_temporal.connect("admin", namespace=namespace)
        await admin.operator_service.remove_search_attributes(
            RemoveSearchAttributesRequest(namespace=namespace, search_attributes=sorted(names))
        )
        removed_at = asyncio.get_running_loop().time()
        assert not names & await _registered(client, namespace)  # gone (the next check is a second away)
        # Back within a check or two, with no restart.
        while not names <= await _registered(client, namespace):
            assert asyncio.get_running_loop().time() - removed_at < 30, "the worker never registered them again"
            await asyncio.sleep(0.2)
        queue = f"q-{uuid.uuid4().hex[:6]}"
        async with Worker(
            client, task_queue=queue, workflows=[UpsertsOrderPhase], workflow_runner=UnsandboxedWorkflowRunner()
        ):
            result = await client.execute_workflow(
                UpsertsOrderPhase.run,
                id=f"wf-{uuid.uuid4().hex[:6]}",
                task_queue=queue,
                execution_timeout=timedelta(seconds=60),
                search_attributes=TypedSearchAttributes([SearchAttributePair(ORDER_PHASE, "Pending")]),
            )
        assert result == "upserted"
    finally:
        keeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeper
    assert keeper.cancelled()
