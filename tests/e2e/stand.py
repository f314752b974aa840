"""The end-to-end stand: real cluster, real Temporal, the real watcher and worker in-process.

The fixtures (tests/e2e/conftest.py): ``stand`` is one stand with the default e2e settings;
``make_stand(overrides)`` opens more (or differently configured) stands for one test, e.g. with
the catalog pointed at a stand-in. Each stand has its own namespace and task queue; on teardown
its orders are deleted while its worker still runs (so their finalizers go and their devices are
released for the next test), then the namespace goes.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kubernetes.client import ApiClient, AppsV1Api, AutoscalingV2Api, CoreV1Api, CustomObjectsApi, NetworkingV1Api
from kubernetes.client.exceptions import ApiException
from temporalio.client import Client, WorkflowHandle, WorkflowHistory, WorkflowUpdateFailedError

from activities.builders.auth import TOKEN_KEY
from activities.builders.common import LABEL_ORDER
from devstack.cluster.launcher import LocalCluster
from devstack.standins.fleet import PROBE_URL_ANNOTATION, StandInFleet
from inference_api.payloads import order_workflow_id
from inference_api.settings import ModuleSettings
from inference_api.types import CLASSES, GROUP, VERSION
from tests.polling import until
from worker.order_cache import OrderCache
from worker.processes import order_worker, run_watcher
from workflows.order import ReplanOutcome

ORDERS = "inferenceservices"
DEFAULT_CLASS = "e2e-default-llm"

DEFAULT_LLM: dict[str, Any] = {
    "apiVersion": "ai.deckhouse.io/v1alpha1",
    "kind": "InferenceServiceClass",
    "metadata": {"name": DEFAULT_CLASS},
    "spec": {
        "modelPolicy": {"allowedEndpointTypes": ["Chat", "Embeddings", "Rerank"]},
        "acceleratorPolicy": {
            "allowedSharingModes": ["Shared", "Dedicated"],
            "allowedPlacementTypes": ["WholeDevice", "Partition"],
            "maxAcceleratorCount": 1,
        },
        "scalingPolicy": {"minReplicas": 1, "maxReplicas": 2},
        "exposurePolicy": {
            "type": "External",
            "authentication": "Token",
            "https": {"mode": "CertManager", "certManager": {"clusterIssuerName": "selfsigned"}},
        },
        "updatePolicy": {"strategy": "RollingUpdate"},
    },
}


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def e2e_settings(task_queue: str, overrides: dict[str, Any] | None = None) -> ModuleSettings:
    """Fast health timings and the stand-ins' probe target; ``overrides`` merge in deeply."""
    base: dict[str, Any] = {
        "temporal": {"taskQueue": task_queue},
        "health": {
            "intervalSeconds": 0.5,
            "failureThreshold": 2,
            "serveRetrySeconds": 0.3,
            "serveWaitSeconds": 120,
            "probeTargetAnnotation": PROBE_URL_ANNOTATION,
        },
    }
    return ModuleSettings.model_validate(_merge(base, overrides or {}))


@dataclass
class ActivityRun:
    """One scheduling of an activity: the attempt that ended it, and its result (JSON text)."""

    attempt: int = 0
    completed: bool = False
    result: str = ""


class Stand:
    def __init__(
        self, api: ApiClient, client: Client, fleet: StandInFleet, namespace: str, settings: ModuleSettings
    ) -> None:
        self.api = api
        self.client = client
        self.fleet = fleet
        self.namespace = namespace
        self.settings = settings
        self.custom = CustomObjectsApi(api)
        self.core = CoreV1Api(api)
        self.apps = AppsV1Api(api)

    def create_order(self, name: str, model: dict[str, Any], class_name: str = DEFAULT_CLASS) -> dict[str, Any]:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "InferenceService",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"inferenceServiceClassName": class_name, "model": model},
        }
        created: dict[str, Any] = self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, ORDERS, body
        )
        return created

    def order(self, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, ORDERS, name
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return found

    def status(self, name: str) -> dict[str, Any]:
        status: dict[str, Any] = (self.order(name) or {}).get("status") or {}
        return status

    def condition(self, name: str, type_: str) -> dict[str, Any] | None:
        return next((c for c in self.status(name).get("conditions") or [] if c["type"] == type_), None)

    def workflow(self, name: str) -> WorkflowHandle[Any, Any]:
        obj = self.order(name)
        assert obj is not None, f"order {name} does not exist"
        return self.client.get_workflow_handle(order_workflow_id(self.namespace, name, obj["metadata"]["uid"]))

    async def history_text(self, name: str) -> str:
        """The order workflow's whole history as text, every payload decoded (for leak checks)."""
        histories = await chained_runs(self.client, self.workflow(name).id)
        raw = "\n".join(history.to_json() for history in histories)
        decoded: list[str] = [raw]

        def walk(node: Any) -> None:
            if isinstance(node, dict):
                for key, value in node.items():
                    if key == "data" and isinstance(value, str):
                        with contextlib.suppress(ValueError):
                            decoded.append(base64.b64decode(value, validate=True).decode(errors="replace"))
                    walk(value)
            elif isinstance(node, list):
                for item in node:
                    walk(item)

        for history in histories:
            walk(json.loads(history.to_json()))
        return "\n".join(decoded)

    async def activity_runs(self, name: str, activity_name: str) -> list[ActivityRun]:
        """Each scheduling of ``activity_name`` in the order's history (every run of it), in order."""
        found: list[ActivityRun] = []
        for history in await chained_runs(self.client, self.workflow(name).id):
            runs: dict[int, ActivityRun] = {}
            for event in history.events:
                if event.HasField("activity_task_scheduled_event_attributes"):
                    if event.activity_task_scheduled_event_attributes.activity_type.name == activity_name:
                        runs[event.event_id] = ActivityRun()
                elif event.HasField("activity_task_started_event_attributes"):
                    started = event.activity_task_started_event_attributes
                    if started.scheduled_event_id in runs:
                        runs[started.scheduled_event_id].attempt = started.attempt
                elif event.HasField("activity_task_completed_event_attributes"):
                    completed = event.activity_task_completed_event_attributes
                    if completed.scheduled_event_id in runs:
                        run = runs[completed.scheduled_event_id]
                        run.completed = True
                        run.result = b"".join(p.data for p in completed.result.payloads).decode(errors="replace")
            found += runs.values()
        return found

    async def until(self, check: Callable[[], bool], timeout: float = 90, what: str | Callable[[], str] = "") -> None:
        """Poll ``check`` (blocking API reads: run in a thread) until it holds."""
        await until(check, timeout=timeout, what=what, interval=0.3, in_thread=True)

    def phase(self, name: str) -> tuple[str | None, str | None]:
        status = self.status(name)
        return status.get("phase"), status.get("reason")

    def describe(self, name: str) -> str:
        """Phase, reason and conditions now: what a timeout reports."""
        status = self.status(name)
        conditions = "; ".join(
            f"{c['type']}={c['status']} {c.get('reason')}: {c.get('message', '')[:160]}"
            for c in status.get("conditions") or []
        )
        return f"phase={status.get('phase')} reason={status.get('reason')} [{conditions}]"

    def workload_report(self) -> str:
        """Pods, claims and volumes of the namespace: where a workload that never got ready stands."""
        lines = []
        try:
            for pod in self.core.list_namespaced_pod(self.namespace).items:
                conditions = ",".join(f"{c.type}={c.status}" for c in pod.status.conditions or [])
                lines.append(
                    f"pod {pod.metadata.name}: {pod.status.phase} node={pod.spec.node_name} "
                    f"deleting={bool(pod.metadata.deletion_timestamp)} [{conditions}]"
                )
            for pvc in self.core.list_namespaced_persistent_volume_claim(self.namespace).items:
                lines.append(f"pvc {pvc.metadata.name}: {pvc.status.phase} volume={pvc.spec.volume_name}")
            for sts in self.apps.list_namespaced_stateful_set(self.namespace).items:
                lines.append(
                    f"sts {sts.metadata.name}: replicas={sts.status.replicas} ready={sts.status.ready_replicas}"
                )
            for event in self.core.list_namespaced_event(self.namespace).items[-15:]:
                lines.append(
                    f"event {event.involved_object.kind}/{event.involved_object.name}: {event.reason} "
                    f"{(event.message or '')[:200]}"
                )
        except ApiException as err:
            lines.append(f"(report failed: HTTP {err.status})")
        return "\n  ".join(lines)

    async def until_phase(self, name: str, phase: str, reason: str | None = "any", timeout: float = 90) -> None:
        def check() -> bool:
            got_phase, got_reason = self.phase(name)
            return got_phase == phase and (reason == "any" or got_reason == reason)

        await self.until(
            check,
            timeout,
            lambda: f"{name} {phase}/{reason} (now {self.describe(name)})\n  {self.workload_report()}",
        )

    def order_names(self) -> list[str]:
        items = self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, ORDERS)["items"]
        return [item["metadata"]["name"] for item in items]

    def delete_orders(self) -> list[str]:
        names = self.order_names()
        for name in names:
            with contextlib.suppress(ApiException):
                self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, ORDERS, name)
        return names


class MakeStand(Protocol):
    def __call__(self, overrides: dict[str, Any] | None = None) -> Awaitable[Stand]: ...


@contextlib.asynccontextmanager
async def open_stand(
    local_cluster: LocalCluster, api: ApiClient, client: Client, overrides: dict[str, Any] | None = None
) -> AsyncIterator[Stand]:
    settings = e2e_settings(f"e2e-{uuid.uuid4().hex[:6]}", overrides)
    namespace = local_cluster.create_namespace(f"e2e-{uuid.uuid4().hex[:6]}", users=())
    custom = CustomObjectsApi(api)
    try:
        custom.create_cluster_custom_object(GROUP, VERSION, "inferenceserviceclasses", DEFAULT_LLM)
    except ApiException as err:
        if err.status != 409:
            raise
    fleet = StandInFleet(api).start()
    # As run_worker: the activities read orders and classes from the worker's informer cache.
    cache = OrderCache(api)
    cache.start()
    worker = order_worker(client, api, settings, cache=cache, max_cached_workflows=100)
    watcher = asyncio.create_task(run_watcher(client, api, settings))
    stand = Stand(api, client, fleet, namespace, settings)
    try:
        async with worker:
            try:
                yield stand
            finally:
                # Orders go while the worker runs: their workflows remove the finalizers.
                with contextlib.suppress(Exception):
                    if await asyncio.to_thread(stand.delete_orders):
                        await stand.until(lambda: not stand.order_names(), timeout=30, what="orders deleted")
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await watcher
    finally:
        cache.stop()
        fleet.stop()
        with contextlib.suppress(ApiException):
            CoreV1Api(api).delete_namespace(namespace)


@contextlib.asynccontextmanager
async def bare_stand(local_cluster: LocalCluster, api: ApiClient, client: Client) -> AsyncIterator[Stand]:
    """A namespace, the default class and the stand-in fleet, with no worker or observer: the test
    runs those itself with ``processes`` (and restarts them with other settings)."""
    task_queue = f"e2e-{uuid.uuid4().hex[:6]}"
    namespace = local_cluster.create_namespace(f"e2e-{uuid.uuid4().hex[:6]}", users=())
    with contextlib.suppress(ApiException):  # 409: another test made it
        CustomObjectsApi(api).create_cluster_custom_object(GROUP, VERSION, CLASSES, DEFAULT_LLM)
    fleet = StandInFleet(api).start()
    stand = Stand(api, client, fleet, namespace, e2e_settings(task_queue))
    try:
        yield stand
    finally:
        fleet.stop()
        with contextlib.suppress(ApiException):
            stand.core.delete_namespace(namespace)


@contextlib.asynccontextmanager
async def worker_and_observer(
    client: Client, api: ApiClient, overrides: dict[str, Any], task_queue: str
) -> AsyncIterator[None]:
    """The module's worker and observer, in this process, with these settings, for as long as the
    block runs (tests that restart the module under other settings over one stand)."""
    settings = e2e_settings(task_queue, overrides)
    cache = OrderCache(api)
    cache.start()
    worker = order_worker(client, api, settings, cache=cache, max_cached_workflows=100)
    observer = asyncio.create_task(run_watcher(client, api, settings))
    try:
        async with worker:
            yield
    finally:
        cache.stop()
        observer.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await observer


# ---------------------------------------------------------------------- processes of their own
# For tests that run ``ai-inference worker`` / ``ai-inference watch`` as subprocesses (and kill them).

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


def process_env(address: str, task_queue: str, tls: Mapping[str, str]) -> dict[str, str]:
    """An ``ai-inference`` process's environment: Temporal at ``address`` with the ``tls`` settings
    (``TemporalCredentials.module_env()``: every test reaches Temporal over mTLS)."""
    return {
        **os.environ,
        **tls,
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


async def chained_runs(client: Client, workflow_id: str) -> list[WorkflowHistory]:
    """The histories of a workflow's latest run and of each run it continued as new from, oldest
    first: a serving order continues as new before it sleeps once its run is long
    (``serving-run-starts-fresh``), so "the order's history" is that chain. A run started anew (not
    continued) begins it."""
    histories: list[WorkflowHistory] = []
    run_id: str | None = None
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        histories.append(history)
        previous = history.events[0].workflow_execution_started_event_attributes.continued_execution_run_id
        if not previous:
            return histories[::-1]
        run_id = previous


async def activities_completed(client: Client, workflow_id: str, activity: str) -> int:
    """How many ``activity`` activities completed in the workflow's runs (a serving run continues as
    new, so every run of the chain counts)."""
    completed = 0
    for history in await chained_runs(client, workflow_id):
        scheduled = {
            e.event_id
            for e in history.events
            if e.HasField("activity_task_scheduled_event_attributes")
            and e.activity_task_scheduled_event_attributes.activity_type.name == activity
        }
        completed += sum(
            1
            for e in history.events
            if e.HasField("activity_task_completed_event_attributes")
            and e.activity_task_completed_event_attributes.scheduled_event_id in scheduled
        )
    return completed


async def replan_once_settled(handle: WorkflowHandle[Any, Any]) -> ReplanOutcome:
    """Ask for a manual replan as a user would: the validator refuses while a reconcile is pending
    (a pod's status change after the apply makes one), so ask again once it has run."""
    deadline = time.monotonic() + 60
    while True:
        try:
            outcome: ReplanOutcome = await handle.execute_update("replan", result_type=ReplanOutcome)
            return outcome
        except WorkflowUpdateFailedError as refused:
            if "already pending" not in str(refused.cause) or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)
