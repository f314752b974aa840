"""Disabling the module and enabling it again, with real orders (docs/admin-guide.md, "Disable the module").

Ready orders served by the real worker and observer → the reconcilers stop (in the cluster the hook
scales their Deployments to 0; here they run in this process, so they are stopped here, and two stand-in
Deployments of those names in the module namespace are scaled down by the command) → the chart's
pre-delete hook command runs, exactly as the rendered Job says → every order's workload is gone, the
orders, the class and the token Secrets stay, each order says ModuleDisabled and carries no finalizer,
a tenant's object that claims the order is kept, an order deleted now finishes → the worker and the
observer start again (enable) → every order is Ready again on its own, finalizer back, same token.
The disable and the re-enable are timed (printed: ``-s`` shows them).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException
from temporalio.testing import WorkflowEnvironment

from activities.kube import Applier
from activities.order import FINALIZER
from devstack.cluster.launcher import LocalCluster
from devstack.standins.fleet import StandInFleet
from inference_api.observation import OrderSignal
from inference_api.preemption import ScalingObservation
from inference_api.types import GROUP, VERSION
from tests.chart.helm import NAMESPACE, Helm, find
from tests.e2e.stand import (
    DEFAULT_LLM,
    ORDERS,
    Stand,
    activities_completed,
    auth_token,
    e2e_settings,
    worker_and_observer,
)
from tests.polling import until
from worker.disable import MODULE_DISABLED
from worker.processes import order_worker
from workflows import activity_names as act

pytestmark = [pytest.mark.cluster, pytest.mark.temporal]

VENV_BIN = Path(sys.executable).parent
MODELS = {
    "chat": {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}},
    "chat-two": {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}},
}
DELETED_WHILE_DISABLED = "chat-two"
WORKLOAD = [
    ("networking.k8s.io/v1", "Ingress", ""),
    ("autoscaling/v2", "HorizontalPodAutoscaler", ""),
    ("apps/v1", "StatefulSet", ""),
    ("v1", "Service", ""),
    ("resource.k8s.io/v1", "ResourceClaimTemplate", "-claim"),
    ("networking.k8s.io/v1", "NetworkPolicy", ""),
]


def _hook_command(helm: Helm) -> list[str]:
    (container,) = find(helm.render(), "Job", "ai-inference-disable")["spec"]["template"]["spec"]["containers"]
    return [*container["command"], *container["args"]]


def _reconciler_stand_ins(api: ApiClient) -> None:
    """Deployments named as the release's worker and watcher, one replica each (kwok runs their pods)."""
    core, apps = CoreV1Api(api), AppsV1Api(api)
    with contextlib.suppress(ApiException):
        core.create_namespace({"metadata": {"name": NAMESPACE}})
    for name in ("ai-inference-worker", "ai-inference-watcher"):
        labels = {"app": f"{name}-disable-test"}
        body = {
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "stand-in", "image": "registry.invalid/ai-inference:test"}]},
                },
            },
        }
        with contextlib.suppress(ApiException):
            apps.delete_namespaced_deployment(name, NAMESPACE)
        for _ in range(50):
            try:
                apps.create_namespaced_deployment(NAMESPACE, body)
                break
            except ApiException as err:
                if err.status != 409:
                    raise
                time.sleep(0.2)


def _ready(stand: Stand, name: str) -> bool:
    ready = stand.condition(name, "Ready")
    return stand.phase(name)[0] == "Ready" and ready is not None and ready["status"] == "True"


async def test_disable_stops_the_workloads_keeps_the_orders_and_enable_brings_them_back(
    local_cluster: LocalCluster, kube_admin: ApiClient, temporal_env: WorkflowEnvironment, helm: Helm
) -> None:
    api, client = kube_admin, temporal_env.client
    task_queue = f"e2e-{uuid.uuid4().hex[:6]}"
    namespace = local_cluster.create_namespace(f"e2e-disable-{uuid.uuid4().hex[:6]}", users=())
    custom, apps = CustomObjectsApi(api), AppsV1Api(api)
    with contextlib.suppress(ApiException):
        custom.create_cluster_custom_object(GROUP, VERSION, "inferenceserviceclasses", DEFAULT_LLM)
    fleet = StandInFleet(api).start()
    stand = Stand(api, client, fleet, namespace, e2e_settings(task_queue))
    applier = Applier(api)
    command = _hook_command(helm)
    assert command == ["ai-inference", "disable", "--module-namespace", NAMESPACE, "--wait-seconds", "180"]
    try:
        # -- the module runs: Ready orders.
        async with worker_and_observer(client, api, {}, task_queue):
            for name, model in MODELS.items():
                stand.create_order(name, model)
            for name in MODELS:
                await stand.until_phase(name, "Ready", timeout=120)
            tokens = {name: auth_token(stand, f"{name}-auth") for name in MODELS}
            uids = {name: (stand.order(name) or {})["metadata"]["uid"] for name in MODELS}
            for name in MODELS:
                for api_version, kind, suffix in WORKLOAD:
                    assert applier.get(api_version, kind, name + suffix, namespace) is not None, (kind, name)
        # -- the reconcilers stopped (here: this process's worker and observer, just now).
        _reconciler_stand_ins(api)
        # A tenant's Service that claims the order (its labels, a controller ownerReference) under
        # another name: not the module's, kept.
        decoy_owner = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "InferenceService",
            "name": "chat",
            "uid": uids["chat"],
            "controller": True,
        }
        stand.core.create_namespaced_service(
            namespace,
            {
                "metadata": {
                    "name": "chat-mine",
                    "labels": {
                        "app.kubernetes.io/managed-by": "ai-inference",
                        "ai.deckhouse.io/inference-service": "chat",
                    },
                    "ownerReferences": [decoy_owner],
                },
                "spec": {"ports": [{"port": 80}]},
            },
        )

        # -- disable: the hook's own command.
        started = time.monotonic()
        ran = subprocess.run(
            [str(VENV_BIN / command[0]), *command[1:], "--kubeconfig", str(local_cluster.kubeconfig("admin"))],
            capture_output=True,
            text=True,
            timeout=240,
        )
        disable_seconds = time.monotonic() - started
        assert ran.returncode == 0, f"{command} exited {ran.returncode}:\n{ran.stdout}\n{ran.stderr}"
        assert "12 workload objects deleted" in ran.stdout, ran.stdout
        for name in MODELS:
            assert tokens[name][1] not in ran.stdout + ran.stderr  # no secret in its output

        for deployment in ("ai-inference-worker", "ai-inference-watcher"):
            assert apps.read_namespaced_deployment(deployment, NAMESPACE).spec.replicas == 0
        for name in MODELS:
            for api_version, kind, suffix in WORKLOAD:
                assert applier.get(api_version, kind, name + suffix, namespace) is None, (kind, name)
            order = stand.order(name)
            assert order is not None
            assert order["metadata"]["uid"] == uids[name]
            assert FINALIZER not in (order["metadata"].get("finalizers") or [])
            assert stand.phase(name) == ("Pending", MODULE_DISABLED)
            for type_ in ("Ready", "WorkloadReady"):
                condition = stand.condition(name, type_)
                assert condition is not None
                assert (condition["status"], condition["reason"]) == ("False", MODULE_DISABLED)
                assert "disabled" in condition["message"]
            assert auth_token(stand, f"{name}-auth") == tokens[name]
        assert not [p for p in stand.core.list_namespaced_pod(namespace).items if p.metadata.name.startswith("chat")]
        assert stand.core.read_namespaced_service("chat-mine", namespace).metadata.uid
        custom.get_cluster_custom_object(GROUP, VERSION, "inferenceserviceclasses", DEFAULT_LLM["metadata"]["name"])

        # A second run changes nothing.
        again = subprocess.run(
            [str(VENV_BIN / command[0]), *command[1:], "--kubeconfig", str(local_cluster.kubeconfig("admin"))],
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert again.returncode == 0, again.stderr
        assert "0 workload objects deleted, 0 statuses written, 0 finalizers removed" in again.stdout, again.stdout

        # An order deleted while the module is disabled goes at once (no finalizer holds it).
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, ORDERS, DELETED_WHILE_DISABLED)
        await stand.until(lambda: stand.order(DELETED_WHILE_DISABLED) is None, timeout=30, what="the order deleted")

        # A signal on its way when the reconcilers stopped (the observer saw the HPA go): a worker that
        # starts before the observer answers it from what the run knew before the disable. That status
        # write must not say Ready of the stopped workload (it once did, and the Ingress was not there).
        handle = stand.workflow("chat")
        published = await activities_completed(client, handle.id, act.PUBLISH_STATUS)

        async def answered() -> bool:  # its status write finished (or was dropped)
            return await activities_completed(client, handle.id, act.PUBLISH_STATUS) > published

        async with order_worker(client, api, e2e_settings(task_queue), max_cached_workflows=100):
            await handle.signal(OrderSignal.SCALING_CHANGED, ScalingObservation(autoscalerFound=False))
            await until(answered, timeout=60, interval=0.3, what="the signal answered by a status write")
        assert stand.phase("chat") == ("Pending", MODULE_DISABLED)

        # -- enable: the worker and the observer start again; every order comes back on its own.
        async with worker_and_observer(client, api, {}, task_queue):
            started = time.monotonic()
            seen: list[tuple[str | None, str | None]] = []

            def ready_with_its_workload() -> bool:
                # The phase first: a legitimate Ready comes after the apply, so its Ingress is there.
                phase = stand.phase("chat")[0]
                ingress = applier.get("networking.k8s.io/v1", "Ingress", "chat", namespace)
                seen.append((phase, "Ingress" if ingress is not None else None))
                return _ready(stand, "chat")

            await stand.until(ready_with_its_workload, timeout=120, what=lambda: stand.describe("chat"))
            # Until the reconcile applied it again, the order said ModuleDisabled, never Ready.
            assert all(ingress is not None for phase, ingress in seen if phase == "Ready"), seen
            enable_seconds = time.monotonic() - started
            order = stand.order("chat") or {}
            assert FINALIZER in (order["metadata"].get("finalizers") or [])
            assert all(c["reason"] != MODULE_DISABLED for c in order["status"]["conditions"])
            for api_version, kind, suffix in WORKLOAD:
                assert applier.get(api_version, kind, "chat" + suffix, namespace) is not None, kind
            assert auth_token(stand, "chat-auth") == tokens["chat"]
            print(
                f"\nmodule disable: {disable_seconds:.1f}s for {len(MODELS)} Ready orders "
                f"(the hook's command: reconcilers scaled to 0, workloads deleted, replicas gone, statuses written); "
                f"re-enable: {enable_seconds:.1f}s from the worker and observer starting to the order Ready again"
            )
            # Orders go while the worker runs: their workflows remove the finalizers.
            stand.delete_orders()
            await stand.until(lambda: not stand.order_names(), timeout=60, what="orders deleted")
    finally:
        fleet.stop()
        with contextlib.suppress(ApiException):
            stand.core.delete_namespace(namespace)
        for deployment in ("ai-inference-worker", "ai-inference-watcher"):
            with contextlib.suppress(ApiException):
                apps.delete_namespaced_deployment(deployment, NAMESPACE)
