"""The module against the production Temporal: the Temporal server built from its Go module, its
default and visibility stores in PostgreSQL, its frontend behind Temporal's own mutual TLS.

The worker and the observer run as the real ``ai-inference worker`` / ``ai-inference watch``
processes, configured like any deployment pointed at an existing Temporal (address, namespace, a
client certificate each). The worker registers the module's search attributes in the namespace by
itself (on SQL visibility they are created per namespace through the operator service); orders go
through create, edit and delete on the local control plane; the search attributes are queryable in
the SQL visibility store.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from kubernetes.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from devstack.cluster.launcher import LocalCluster
from devstack.standins.fleet import StandInFleet
from devstack.temporal_server import ProductionTemporal
from inference_api.types import GROUP, VERSION
from tests.e2e.stand import DEFAULT_LLM, Processes, Stand, e2e_settings, process_env
from tests.polling import until
from workflows.search_attributes import ALL_KEYS

pytestmark = [pytest.mark.cluster, pytest.mark.prodtemporal]

SMALL = {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}}
LARGER = {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-7B-Instruct"}}


@pytest.fixture
def task_queue() -> str:
    return f"prod-{uuid.uuid4().hex[:6]}"


@pytest_asyncio.fixture
async def temporal_namespace(production_temporal: ProductionTemporal) -> str:
    """A Temporal namespace of this test's own, registered as an administrator would (the module
    does not create namespaces): none of the module's search attributes in it yet."""
    name = f"orders-{uuid.uuid4().hex[:6]}"
    await production_temporal.register_namespace(await production_temporal.connect("cli"), name)
    return name


@pytest.fixture
def module_processes(
    local_cluster: LocalCluster,
    production_temporal: ProductionTemporal,
    task_queue: str,
    temporal_namespace: str,
    tmp_path: Path,
) -> Iterator[dict[str, Processes]]:
    """``ai-inference worker`` and ``ai-inference watch`` in the namespace, each with its own client certificate."""
    kubeconfig = local_cluster.kubeconfig("admin")
    credentials = production_temporal.credentials
    out = {}
    for role in ("worker", "watcher"):
        env = process_env(production_temporal.address, task_queue, credentials.module_env(role))
        out[role] = Processes(kubeconfig, {**env, "AI_INFERENCE_TEMPORAL__NAMESPACE": temporal_namespace}, tmp_path)
    try:
        yield out
    finally:
        for processes in out.values():
            processes.stop_all()


@pytest_asyncio.fixture
async def prod_stand(
    local_cluster: LocalCluster,
    kube_admin: ApiClient,
    production_temporal: ProductionTemporal,
    module_processes: dict[str, Processes],
    task_queue: str,
    temporal_namespace: str,
) -> AsyncIterator[Stand]:
    client = await production_temporal.connect(
        "cli", namespace=temporal_namespace, data_converter=pydantic_data_converter
    )
    namespace = local_cluster.create_namespace(f"prod-{uuid.uuid4().hex[:6]}", users=())
    with contextlib.suppress(ApiException):
        CustomObjectsApi(kube_admin).create_cluster_custom_object(
            GROUP, VERSION, "inferenceserviceclasses", DEFAULT_LLM
        )
    fleet = StandInFleet(kube_admin).start()
    settings = e2e_settings(task_queue, {"temporal": {"namespace": temporal_namespace}})
    stand = Stand(kube_admin, client, fleet, namespace, settings)
    try:
        yield stand
        # Orders go while the worker runs: their workflows remove the finalizers.
        with contextlib.suppress(Exception):
            if await asyncio.to_thread(stand.delete_orders):
                await stand.until(lambda: not stand.order_names(), timeout=60, what="orders deleted")
    finally:
        for processes in module_processes.values():
            processes.stop_all()
        fleet.stop()
        with contextlib.suppress(ApiException):
            CoreV1Api(kube_admin).delete_namespace(namespace)


async def module_attributes(client: Client, namespace: str) -> dict[str, int]:
    listed = await client.operator_service.list_search_attributes(ListSearchAttributesRequest(namespace=namespace))
    wanted = {key.name for key in ALL_KEYS}
    return {name: kind for name, kind in listed.custom_attributes.items() if name in wanted}


async def workflow_ids(client: Client, query: str) -> set[str]:
    return {execution.id async for execution in client.list_workflows(query)}


async def test_orders_are_created_edited_and_deleted_on_the_production_temporal(
    prod_stand: Stand, temporal_namespace: str, module_processes: dict[str, Processes]
) -> None:
    stand, client, namespace = prod_stand, prod_stand.client, temporal_namespace
    processes = module_processes["worker"]

    # A fresh namespace on SQL visibility: none of the module's attributes until the worker starts.
    assert await module_attributes(client, namespace) == {}
    worker = processes.start("worker")

    async def registered() -> bool:
        assert worker.poll() is None, f"the worker exited:\n{processes.log_text()[-3000:]}"
        return len(await module_attributes(client, namespace)) == len(ALL_KEYS)

    await until(registered, timeout=90, interval=0.5, what="the worker registered the module's search attributes")
    assert await module_attributes(client, namespace) == {key.name: key.indexed_value_type for key in ALL_KEYS}
    module_processes["watcher"].start("watch")

    names = ("prod-a", "prod-b", "prod-c")
    for name in names:
        stand.create_order(name, SMALL)
    for name in names:
        await stand.until_phase(name, "Ready", timeout=240)
    uids = {name: (stand.order(name) or {})["metadata"]["uid"] for name in names}
    handles = {name: stand.workflow(name) for name in names}

    # The custom search attributes are set and queryable in PostgreSQL's visibility store.
    ready_query = f"OrderNamespace = '{stand.namespace}' AND OrderPhase = 'Ready'"

    async def all_ready_listed() -> bool:
        return await workflow_ids(client, ready_query) == {h.id for h in handles.values()}

    await until(all_ready_listed, timeout=60, interval=0.5, what=f"visibility lists the Ready orders ({ready_query})")

    # An edit: a larger model replans the order, which serves again at generation 2.
    stand.custom.patch_namespaced_custom_object(
        GROUP, VERSION, stand.namespace, "inferenceservices", "prod-b", {"spec": {"model": LARGER}}
    )

    def edited() -> bool:
        status = stand.status("prod-b")
        return status.get("observedGeneration") == 2 and status.get("phase") == "Ready"

    await stand.until(edited, timeout=240, what=lambda: f"prod-b edited and Ready ({stand.describe('prod-b')})")
    assert (
        stand.apps.read_namespaced_stateful_set("prod-b", stand.namespace).metadata.owner_references[0].uid
        == (uids["prod-b"])
    )

    # Deletes: every workflow tears its order down and ends "deleted"; the orders go.
    for name in names:
        stand.custom.delete_namespaced_custom_object(GROUP, VERSION, stand.namespace, "inferenceservices", name)
    results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles.values())), 180)
    assert results == ["deleted"] * len(names)
    await stand.until(lambda: not stand.order_names(), timeout=60, what="orders gone")

    # Their histories are in PostgreSQL, each with the whole life of its order.
    for name, handle in handles.items():
        history = await handle.fetch_history()
        kinds = {event.WhichOneof("attributes") for event in history.events}
        assert "workflow_execution_completed_event_attributes" in kinds, name
    closed_query = f"OrderNamespace = '{stand.namespace}' AND ExecutionStatus = 'Completed'"

    async def all_closed() -> bool:
        return await workflow_ids(client, closed_query) == {h.id for h in handles.values()}

    await until(all_closed, timeout=60, interval=0.5, what=f"visibility lists the three Completed ({closed_query})")
