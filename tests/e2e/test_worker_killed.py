"""The worker process SIGKILLed in the middle of an apply, and the processes' metrics.

The worker runs as a real ``ai-inference worker`` subprocess (its own process group, so a
SIGKILL takes it whole, threads and all, with no chance to finish the activity); the watcher runs
in-process; the stand-in fleet plays the runtimes. A second worker process picks the order up:
the apply activity is retried (after its start-to-close timeout: a killed worker never reports)
and the order becomes Ready with exactly one of each object it owns and the auth token it got
before the kill. Neither the workflow history nor the workers' logs carry that token.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import socket
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import pytest_asyncio
from kubernetes.client import ApiClient, AutoscalingV2Api, CoreV1Api, CustomObjectsApi, NetworkingV1Api
from kubernetes.client.exceptions import ApiException
from temporalio.testing import WorkflowEnvironment

from activities.builders.auth import TOKEN_KEY
from activities.builders.common import LABEL_ORDER
from devstack.cluster.launcher import LocalCluster
from devstack.standins.fleet import PROBE_URL_ANNOTATION, StandInFleet
from inference_api.types import GROUP, VERSION
from tests.e2e.stand import DEFAULT_LLM, Stand, e2e_settings
from tests.polling import until
from worker.processes import run_watcher

pytestmark = [pytest.mark.cluster, pytest.mark.temporal]

REPO_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def scrape(port: int, path: str = "/metrics") -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        text: str = response.read().decode()
        return text


def process_env(address: str, task_queue: str) -> dict[str, str]:
    return {
        **os.environ,
        "AI_INFERENCE_TEMPORAL__ADDRESS": address,
        "AI_INFERENCE_TEMPORAL__TASKQUEUE": task_queue,
        "AI_INFERENCE_HEALTH__PROBETARGETANNOTATION": PROBE_URL_ANNOTATION,
        "AI_INFERENCE_HEALTH__INTERVALSECONDS": "0.5",
        "AI_INFERENCE_HEALTH__FAILURETHRESHOLD": "2",
        "AI_INFERENCE_HEALTH__SERVERETRYSECONDS": "0.3",
        "AI_INFERENCE_HEALTH__SERVEWAITSECONDS": "120",
    }


@dataclass
class Processes:
    """``ai-inference`` subprocesses of one test, each logging to its own file."""

    kubeconfig: Path
    env: dict[str, str]
    logs: Path
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)

    def start(self, command: str, *args: str) -> subprocess.Popen[bytes]:
        log = (self.logs / f"{command}-{len(self.started)}.log").open("wb")
        process = subprocess.Popen(
            [sys.executable, "-m", "worker.cli", command, "--kubeconfig", str(self.kubeconfig), *args],
            cwd=REPO_ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: killpg takes it whole
        )
        log.close()
        self.started.append(process)
        self.commands.append(command)
        return process

    def worker_running(self) -> bool:
        return any(c == "worker" and p.poll() is None for c, p in zip(self.commands, self.started, strict=True))

    @staticmethod
    def kill(process: subprocess.Popen[bytes]) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)

    def log_text(self) -> str:
        return "\n".join(path.read_text(errors="replace") for path in sorted(self.logs.glob("*.log")))

    def stop_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                self.kill(process)


@pytest.fixture
def processes(local_cluster: LocalCluster, temporal_env: WorkflowEnvironment, tmp_path: Path) -> Iterator[Processes]:
    address = temporal_env.client.service_client.config.target_host
    procs = Processes(
        local_cluster.kubeconfig("admin"), process_env(address, f"e2e-kill-{uuid.uuid4().hex[:6]}"), tmp_path
    )
    try:
        yield procs
    finally:
        procs.stop_all()


@pytest_asyncio.fixture
async def sub_stand(
    local_cluster: LocalCluster, kube_admin: ApiClient, temporal_env: WorkflowEnvironment, processes: Processes
) -> AsyncIterator[Stand]:
    """A stand whose worker is not in-process: the test starts (and kills) worker processes."""
    settings = e2e_settings(processes.env["AI_INFERENCE_TEMPORAL__TASKQUEUE"])
    namespace = local_cluster.create_namespace(f"e2e-{uuid.uuid4().hex[:6]}", users=())
    with contextlib.suppress(ApiException):
        CustomObjectsApi(kube_admin).create_cluster_custom_object(
            GROUP, VERSION, "inferenceserviceclasses", DEFAULT_LLM
        )
    fleet = StandInFleet(kube_admin).start()
    watcher = asyncio.create_task(run_watcher(temporal_env.client, kube_admin, settings))
    stand = Stand(kube_admin, temporal_env.client, fleet, namespace, settings)
    try:
        yield stand
        # Orders go while a worker runs: their workflows remove the finalizers.
        if not processes.worker_running():
            processes.start("worker")
        with contextlib.suppress(Exception):
            if await asyncio.to_thread(stand.delete_orders):
                await stand.until(lambda: not stand.order_names(), timeout=60, what="orders deleted")
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await watcher
        processes.stop_all()
        fleet.stop()
        with contextlib.suppress(ApiException):
            CoreV1Api(kube_admin).delete_namespace(namespace)


def owned(stand: Stand, name: str) -> dict[str, list[str]]:
    """Names of the objects carrying the order's label, by kind."""
    selector = f"{LABEL_ORDER}={name}"
    ns = stand.namespace

    def names(items: list[object]) -> list[str]:
        return sorted(item.metadata.name for item in items)  # type: ignore[attr-defined]

    claim_templates = stand.custom.list_namespaced_custom_object(
        "resource.k8s.io", "v1", ns, "resourceclaimtemplates", label_selector=selector
    )["items"]
    return {
        "StatefulSet": names(stand.apps.list_namespaced_stateful_set(ns, label_selector=selector).items),
        "ResourceClaimTemplate": sorted(item["metadata"]["name"] for item in claim_templates),
        "Service": names(stand.core.list_namespaced_service(ns, label_selector=selector).items),
        "Secret": names(stand.core.list_namespaced_secret(ns, label_selector=selector).items),
        "Ingress": names(NetworkingV1Api(stand.api).list_namespaced_ingress(ns, label_selector=selector).items),
        "HorizontalPodAutoscaler": names(
            AutoscalingV2Api(stand.api).list_namespaced_horizontal_pod_autoscaler(ns, label_selector=selector).items
        ),
    }


def auth_token(stand: Stand, secret_name: str) -> tuple[str, str]:
    secret = stand.core.read_namespaced_secret(secret_name, stand.namespace)
    return secret.metadata.uid, base64.b64decode(secret.data[TOKEN_KEY]).decode()


async def test_worker_sigkilled_mid_apply_leaves_one_of_each_object_and_the_same_token(
    sub_stand: Stand, processes: Processes
) -> None:
    stand, name = sub_stand, "killed-mid-apply"
    metrics_port = free_port()
    first = processes.start("worker", "--metrics-port", str(metrics_port))
    stand.create_order(name, {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}})

    # The apply has begun: its claim template or StatefulSet exists (the Secret comes first).
    def apply_begun() -> dict[str, list[str]] | None:
        found = owned(stand, name)
        if found["StatefulSet"] or found["ResourceClaimTemplate"]:
            return found
        assert first.poll() is None, f"the worker exited early:\n{processes.log_text()[-3000:]}"
        return None

    objects = await until(
        apply_begun, timeout=120, interval=0.02, in_thread=True, what=lambda: f"an apply ({stand.describe(name)})"
    )
    processes.kill(first)
    assert stand.phase(name)[0] != "Ready", "the order was Ready before the kill"
    assert first.returncode == -signal.SIGKILL
    secret_name = f"{name}-auth"
    assert objects["Secret"] == [secret_name], objects
    before = await asyncio.to_thread(auth_token, stand, secret_name)

    second_metrics = free_port()
    processes.start("worker", "--metrics-port", str(second_metrics))
    # A killed worker never reports: the apply is retried once its start-to-close timeout passes.
    await stand.until_phase(name, "Ready", timeout=300)

    objects = await asyncio.to_thread(owned, stand, name)
    assert objects == {
        "StatefulSet": [name],
        "ResourceClaimTemplate": objects["ResourceClaimTemplate"][:1],
        "Service": [name],
        "Secret": [secret_name],
        "Ingress": [name],
        "HorizontalPodAutoscaler": [name],
    }, objects
    assert len(objects["ResourceClaimTemplate"]) == 1, objects
    assert stand.status(name)["authSecretName"] == secret_name
    after = await asyncio.to_thread(auth_token, stand, secret_name)
    assert after == before, "the auth Secret was replaced or its token rotated across the kill"
    runtime = stand.fleet.runtime(stand.namespace, name)
    assert runtime is not None
    assert runtime.config.token == before[1]

    # No secret in histories: the token is nowhere in the workflow's history (payloads decoded)
    # nor in either worker's log.
    token = before[1]
    history = await stand.history_text(name)
    assert "apply" in history.lower()
    assert token not in history
    logs = processes.log_text()
    assert "workload applied" in logs
    assert token not in logs

    # The SDK runtime of the new worker serves its Prometheus metrics.
    sdk = await asyncio.to_thread(scrape, second_metrics)
    assert "temporal_" in sdk, sdk[:2000]
    assert "temporal_workflow_task" in sdk, sdk[:2000]


async def test_watch_process_serves_its_counters_and_the_sdk_metrics(sub_stand: Stand, processes: Processes) -> None:
    stand = sub_stand
    health_port, metrics_port = free_port(), free_port()
    watch = processes.start("watch", "--health-port", str(health_port), "--metrics-port", str(metrics_port))
    stand.create_order("watched", {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}})

    def counted() -> bool:
        assert watch.poll() is None, f"the watcher exited:\n{processes.log_text()[-3000:]}"
        try:
            text = scrape(health_port)
        except OSError:
            return False
        return any(
            line.startswith('ai_inference_watcher_signals_total{outcome="sent",signal="spec_changed"}')
            for line in text.splitlines()
        )

    await stand.until(counted, timeout=60, what="the watcher's spec_changed signal counted on /metrics")
    text = await asyncio.to_thread(scrape, health_port)
    assert 'ai_inference_watcher_events_total{kind="order"' in text
    assert 'ai_inference_watcher_events_total{kind="class"' in text
    assert (await asyncio.to_thread(scrape, health_port, "/healthz")).strip() == "ok"
    sdk = await asyncio.to_thread(scrape, metrics_port)
    assert "temporal_request" in sdk, sdk[:2000]
