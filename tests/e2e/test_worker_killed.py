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
import contextlib
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from kubernetes.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException
from temporalio.testing import WorkflowEnvironment

from devstack.cluster.launcher import LocalCluster
from devstack.standins.fleet import StandInFleet
from devstack.temporal_tls import TemporalCredentials
from inference_api.types import GROUP, VERSION
from tests.e2e.stand import (
    DEFAULT_LLM,
    Processes,
    Stand,
    auth_token,
    e2e_settings,
    free_port,
    owned,
    process_env,
    scrape,
)
from tests.polling import until
from worker.processes import run_watcher

pytestmark = [pytest.mark.cluster, pytest.mark.temporal]


@pytest.fixture
def processes(
    local_cluster: LocalCluster,
    temporal_env: WorkflowEnvironment,
    temporal_credentials: TemporalCredentials,
    tmp_path: Path,
) -> Iterator[Processes]:
    address = temporal_env.client.service_client.config.target_host
    env = process_env(address, f"e2e-kill-{uuid.uuid4().hex[:6]}", temporal_credentials.module_env())
    procs = Processes(local_cluster.kubeconfig("admin"), env, tmp_path)
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
    # /healthz answers "ok" and why: the event loop and every informer thread running.
    health = (await asyncio.to_thread(scrape, health_port, "/healthz")).strip()
    assert health.startswith("ok: event loop: running; informers: "), health
    sdk = await asyncio.to_thread(scrape, metrics_port)
    assert "temporal_request" in sdk, sdk[:2000]
