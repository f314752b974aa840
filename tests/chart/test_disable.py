"""Disabling the module (Deckhouse deletes its release with Helm; plain Helm: ``helm uninstall``) as the
admin guide describes it, on the local control plane: Helm runs the pre-delete hook Job
``ai-inference-disable`` first, which scales the worker and the watcher to 0, deletes each order's
workload, marks each order ModuleDisabled and removes the module's finalizer; then every object of the
release goes — the processes, the planner, the embedded Temporal server — while the CRDs, the classes
and the orders stay, and an order deleted after that finishes at once.

kwok runs no containers, so the test plays the kubelet for the hook's pod as tests/chart/test_crd_upgrade.py
does: it runs the pod's own command (read from the pod spec) from this venv with a token of the pod's
ServiceAccount, so the chart's RBAC for the hook is what allows each call, then reports the pod Succeeded.
The same command against real orders served by the real worker and observer, and the enable after it:
tests/e2e/test_module_disabled.py."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient, ApiextensionsV1Api, AppsV1Api, CoreV1Api, CustomObjectsApi, V1Namespace
from kubernetes.client.rest import ApiException

from activities.order import FINALIZER
from devstack.cluster.launcher import LocalCluster
from tests.chart.helm import NAMESPACE, RELEASE, Helm, find
from tests.chart.test_crd_upgrade import VENV_BIN, _kubeconfig_for, _pod_token
from tests.examples import example
from tests.polling import wait_until
from worker.disable import MODULE_DISABLED

pytestmark = pytest.mark.cluster

GROUP, VERSION = "ai.deckhouse.io", "v1alpha1"
HOOK = "ai-inference-disable"


def _gone(read: object) -> bool:
    try:
        read()  # type: ignore[operator]
    except ApiException as error:
        if error.status == 404:
            return True
        raise
    return False


def test_the_hook_runs_the_disable_command_before_delete_only_with_rbac_made_first(helm: Helm) -> None:
    docs = helm.render()
    hooks = [d for d in docs if (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == "pre-delete"]
    weights = {
        (d["kind"], d["metadata"]["name"]): int(d["metadata"]["annotations"]["helm.sh/hook-weight"]) for d in hooks
    }
    job = find(docs, "Job", HOOK)
    assert weights[("Job", HOOK)] > max(w for (kind, _), w in weights.items() if kind != "Job")
    assert {kind for kind, _ in weights} == {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "NetworkPolicy",
        "Job",
    }
    for doc in hooks:
        assert doc["metadata"]["annotations"]["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert [*container["command"], *container["args"]] == [
        "ai-inference",
        "disable",
        "--module-namespace",
        NAMESPACE,
        "--wait-seconds",
        "180",
    ]
    # The Deployments it scales, and nothing else in the module's namespace.
    (rule,) = find(docs, "Role", HOOK)["rules"]
    assert rule == {
        "apiGroups": ["apps"],
        "resources": ["deployments"],
        "resourceNames": ["ai-inference-worker", "ai-inference-watcher"],
        "verbs": ["get", "patch"],
    }
    # Off with the value: nothing of it rendered.
    assert not [d for d in helm.render({"disableHook.enabled": False}) if "disable" in d["metadata"]["name"]]


def _wait_for_hook_pod(core: CoreV1Api, helm_run: subprocess.Popen[str], timeout: float = 150) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if helm_run.poll() is not None:
            _, err = helm_run.communicate()
            raise AssertionError(f"helm uninstall ended before the hook's pod ran:\n{err}")
        pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"app={HOOK}").items
        if pods:
            return pods[0]
        time.sleep(0.5)
    raise AssertionError(f"no pod of Job {HOOK} within {timeout}s")


def _succeeded(core: CoreV1Api, pod: Any) -> None:
    (container,) = pod.spec.containers
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    terminated = {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}
    status = {
        "name": container.name,
        "image": container.image,
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "state": {"terminated": terminated},
    }
    core.patch_namespaced_pod_status(
        pod.metadata.name, NAMESPACE, {"status": {"phase": "Succeeded", "containerStatuses": [status]}}
    )


def test_disabling_stops_the_workloads_and_keeps_the_orders(
    local_cluster: LocalCluster, kube_admin: ApiClient, helm: Helm, tmp_path: Path
) -> None:
    apps, core, custom = AppsV1Api(kube_admin), CoreV1Api(kube_admin), CustomObjectsApi(kube_admin)
    namespace = "disable-order-ns"
    order = example("order-minimal.yaml")
    order["metadata"] = {"name": "kept", "namespace": namespace, "finalizers": [FINALIZER]}
    helm.install(local_cluster, {"disableHook.enabled": True})
    uninstall: subprocess.Popen[str] | None = None
    try:
        core.create_namespace(V1Namespace(metadata={"name": namespace}))
        created = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "inferenceservices", order)
        owner = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "InferenceService",
            "name": "kept",
            "uid": created["metadata"]["uid"],
            "controller": True,
        }
        # The order's Service as the module names it, and a tenant's that claims the order under another name.
        for name in ("kept", "kept-mine"):
            meta = {"name": name, "ownerReferences": [owner]}
            core.create_namespaced_service(namespace, {"metadata": meta, "spec": {"ports": [{"port": 80}]}})
        apps.read_namespaced_stateful_set("ai-inference-temporal", NAMESPACE)

        uninstall = subprocess.Popen(
            [
                str(helm.binary), "uninstall", RELEASE, "--kubeconfig", str(local_cluster.kubeconfig("admin")),
                "--namespace", NAMESPACE, "--timeout", "4m",
            ],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        pod = _wait_for_hook_pod(core, uninstall)
        (container,) = pod.spec.containers
        command = [*(container.command or []), *(container.args or [])]
        assert command[:2] == ["ai-inference", "disable"]
        kubeconfig = _kubeconfig_for(local_cluster, _pod_token(core, pod), tmp_path / "hook-kubeconfig.yaml")
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        env["KUBECONFIG"] = str(kubeconfig)
        ran = subprocess.run(
            [str(VENV_BIN / command[0]), *command[1:]], capture_output=True, text=True, timeout=240, env=env
        )
        assert ran.returncode == 0, f"{' '.join(command)} exited {ran.returncode}:\n{ran.stdout}\n{ran.stderr}"
        assert "1 workload objects deleted, 1 statuses written, 1 finalizers removed" in ran.stdout, ran.stdout
        assert "ai-inference-worker, ai-inference-watcher" in ran.stdout
        # The reconcilers were stopped first.
        for name in ("ai-inference-worker", "ai-inference-watcher"):
            assert apps.read_namespaced_deployment(name, NAMESPACE).spec.replicas == 0
        _succeeded(core, pod)
        _, err = uninstall.communicate(timeout=240)
        assert uninstall.returncode == 0, err
    finally:
        if uninstall is not None and uninstall.poll() is None:
            uninstall.kill()
            uninstall.communicate()
        helm.uninstall(local_cluster)
    try:
        # The module is gone: its processes, its planner, its embedded Temporal server, the hook too.
        for name in ("ai-inference-worker", "ai-inference-watcher", "ai-inference-planner"):
            assert _gone(lambda n=name: apps.read_namespaced_deployment(n, NAMESPACE))
        assert _gone(lambda: apps.read_namespaced_stateful_set("ai-inference-temporal", NAMESPACE))
        assert _gone(lambda: core.read_namespaced_service("ai-inference-temporal", NAMESPACE))
        assert _gone(lambda: core.read_namespaced_service_account(HOOK, NAMESPACE))
        # The order's workload went; the tenant's Service stays.
        assert _gone(lambda: core.read_namespaced_service("kept", namespace))
        core.read_namespaced_service("kept-mine", namespace)
        # The CRDs and the order stay, saying the module is disabled, with no finalizer.
        for plural in ("inferenceservices", "inferenceserviceclasses"):
            ApiextensionsV1Api(kube_admin).read_custom_resource_definition(f"{plural}.{GROUP}")
        kept = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "inferenceservices", "kept")
        assert not kept["metadata"].get("finalizers")
        assert (kept["status"]["phase"], kept["status"]["reason"]) == ("Pending", MODULE_DISABLED)
        ready = next(c for c in kept["status"]["conditions"] if c["type"] == "Ready")
        assert (ready["status"], ready["reason"]) == ("False", MODULE_DISABLED)
        # A delete while the module is disabled finishes.
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "inferenceservices", "kept")
        wait_until(
            lambda: _gone(
                lambda: custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "inferenceservices", "kept")
            ),
            timeout=30,
            what="the order to go",
        )
    finally:
        core.delete_namespace(namespace)
