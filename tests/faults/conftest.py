"""Fixtures of the fault suite: ``fault_stand`` (tests/faults/churn.py). Every test here is marked ``faults``."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from kubernetes.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from devstack.cluster.launcher import LocalCluster
from devstack.standins.fleet import StandInFleet
from inference_api.types import CLASSES, GROUP, VERSION
from tests.e2e.stand import DEFAULT_LLM, Processes, Stand, e2e_settings, process_env
from tests.faults.churn import FAULTS_CLASS_NAME, FaultStand
from tests.faults.temporal_server import DevServer

HERE = Path(__file__).parent
# The default e2e class on the MPS-shared H100s only: the T4 node's CPUs hold eight small orders, the
# H100 node's about thirty.
FAULTS_CLASS = {
    **DEFAULT_LLM,
    "metadata": {"name": FAULTS_CLASS_NAME},
    "spec": {
        **DEFAULT_LLM["spec"],
        "acceleratorPolicy": {
            **DEFAULT_LLM["spec"]["acceleratorPolicy"],
            "allowedDeviceClasses": ["nvidia-hopper-s3-shared"],
        },
    },
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.faults)


@pytest_asyncio.fixture
async def fault_stand(local_cluster: LocalCluster, kube_admin: ApiClient, tmp_path: Path) -> AsyncIterator[FaultStand]:
    """A namespace, the default class and the stand-in fleet; a dev server of its own; the worker and
    the observer as ``ai-inference`` subprocesses against it (started here, killed by the test)."""
    server = DevServer(tmp_path)
    await server.start()
    client = await Client.connect(server.address, data_converter=pydantic_data_converter)
    task_queue = f"faults-{uuid.uuid4().hex[:6]}"
    env = {**process_env(server.address, task_queue), "AI_INFERENCE_OBSERVER__RESYNCSECONDS": "5"}
    logs = tmp_path / "logs"
    logs.mkdir()
    processes = Processes(local_cluster.kubeconfig("admin"), env, logs)
    namespace = local_cluster.create_namespace(f"faults-{uuid.uuid4().hex[:6]}", users=())
    with contextlib.suppress(ApiException):  # 409: another test made it
        CustomObjectsApi(kube_admin).create_cluster_custom_object(GROUP, VERSION, CLASSES, FAULTS_CLASS)
    fleet = StandInFleet(kube_admin).start()
    stand = Stand(kube_admin, client, fleet, namespace, e2e_settings(task_queue))
    fs = FaultStand(stand, server, processes)
    fs.start_worker()
    fs.start_observer()
    try:
        yield fs
        # Orders go while a worker and an observer run: their workflows remove the finalizers.
        if server.process is None or server.process.poll() is not None:
            await server.start()
        if not processes.worker_running():
            fs.start_worker()
        if fs.observer is None or fs.observer.poll() is not None:
            fs.start_observer()
        with contextlib.suppress(Exception):
            if stand.delete_orders():
                await stand.until(lambda: not stand.order_names(), timeout=60, what="orders deleted")
    finally:
        processes.stop_all()
        server.kill()
        fleet.stop()
        with contextlib.suppress(ApiException):
            CoreV1Api(kube_admin).delete_namespace(namespace)
