"""Fixtures of the fault suite: ``fault_stand`` (tests/faults/churn.py) on ``faults_cluster``, a local
control plane of the suite's own. Every test here is marked ``faults``.

Its own control plane, not the session's: the suite restarts its API server and puts a fault proxy in
front of it, which must not reach the other suites' tests, and its fleet is sized to the suite's
orders (``AI_INFERENCE_FAULT_ORDERS``), which the session's default fleet does not hold.
"""

from __future__ import annotations

import contextlib
import math
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from kubernetes.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from devstack.cluster.inventory import FleetSize, save_fleet
from devstack.cluster.launcher import LocalCluster
from devstack.standins.fleet import StandInFleet
from inference_api.types import CLASSES, GROUP, VERSION
from tests.e2e.stand import DEFAULT_LLM, Processes, Stand, e2e_settings, process_env
from tests.faults.churn import FAULTS_CLASS_NAME, ORDER_COUNT, FaultStand
from tests.faults.kube_proxy import KubeFaultProxy
from tests.faults.temporal_server import DevServer
from tests.fixtures.cluster import running_cluster

HERE = Path(__file__).parent
# The default e2e class on the MPS-shared H100s only: the T4 node's CPUs hold eight small orders, the
# H100 node's about thirty (the planner does not count CPUs: a full node leaves an order Pending).
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
            # A case makes, edits and deletes ORDER_COUNT orders around its fault: the suite's own
            # bound, past the 600 s every other test gets.
            item.add_marker(pytest.mark.timeout(max(600, 600 + 8 * (ORDER_COUNT - 10))))


# Small orders per simulated H100 node the suite plans for: room to spare for the edits' rebuilds
# (old and new replicas at once) under the thirty a node's CPUs hold.
ORDERS_PER_H100_NODE = 20


def faults_fleet(orders: int = ORDER_COUNT) -> FleetSize:
    """The fleet of the suite's control plane: H100 nodes enough for ``orders`` (two at least: a case
    loses one), one of each other shape."""
    return FleetSize(h100_nodes=max(2, math.ceil(orders / ORDERS_PER_H100_NODE)))


@pytest.fixture(scope="session")
def faults_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The fault suite's own control plane, its fleet sized to the suite's orders (a running one is
    reused as for the session's, ``AI_INFERENCE_TEST_KUBECONFIG_DIR``)."""
    state = tmp_path_factory.mktemp("faults-cluster")
    save_fleet(state, faults_fleet())
    with running_cluster(state, label="faults cluster: ") as cluster:
        yield cluster


@pytest.fixture(scope="session")
def faults_admin(faults_cluster: LocalCluster) -> Iterator[ApiClient]:
    with faults_cluster.api_client("admin") as api:
        yield api


@pytest_asyncio.fixture
async def fault_stand(
    faults_cluster: LocalCluster, faults_admin: ApiClient, tmp_path: Path
) -> AsyncIterator[FaultStand]:
    """A namespace, the default class and the stand-in fleet; a dev server of its own; the worker and
    the observer as ``ai-inference`` subprocesses against it (started here, killed by the test)."""
    server = DevServer(tmp_path)
    await server.start()
    client = await server.connect()
    task_queue = f"faults-{uuid.uuid4().hex[:6]}"
    env = {
        **process_env(server.address, task_queue, server.process_env()),
        "AI_INFERENCE_OBSERVER__RESYNCSECONDS": "5",
    }
    logs = tmp_path / "logs"
    logs.mkdir()
    processes = Processes(faults_cluster.kubeconfig("admin"), env, logs)
    namespace = faults_cluster.create_namespace(f"faults-{uuid.uuid4().hex[:6]}", users=())
    with contextlib.suppress(ApiException):  # 409: another test made it
        CustomObjectsApi(faults_admin).create_cluster_custom_object(GROUP, VERSION, CLASSES, FAULTS_CLASS)
    fleet = StandInFleet(faults_admin).start()
    stand = Stand(faults_admin, client, fleet, namespace, e2e_settings(task_queue))
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
                await stand.until(
                    lambda: not stand.order_names(), timeout=max(60, 2 * ORDER_COUNT), what="orders deleted"
                )
    finally:
        processes.stop_all()
        server.close()
        fleet.stop()
        with contextlib.suppress(ApiException):
            CoreV1Api(faults_admin).delete_namespace(namespace)


@pytest_asyncio.fixture
async def kube_proxy(faults_cluster: LocalCluster) -> AsyncIterator[KubeFaultProxy]:
    """A fault proxy in front of the suite's API server (tests/faults/kube_proxy.py). Request it before
    ``fault_stand``: set up before the stand, torn down after it (the stand's teardown deletes the
    orders through the worker, which may talk through the proxy)."""
    pki = faults_cluster.pki
    proxy = KubeFaultProxy(faults_cluster.server, pki.ca_cert, pki.serving_cert, pki.serving_key, hold_seconds=40)
    await proxy.open()
    try:
        yield proxy
    finally:
        await proxy.close()
