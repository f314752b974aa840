"""The chart installed with helm into the local control plane, its own pods running (issue 34, item 1).

Every pod the chart makes carries the stand-in kubelet's annotation (``podAnnotations``), so
``devstack.standins.pod_kubelet`` runs it as a kubelet would: the worker, the watcher and the planner
from this checkout's ``ai-inference`` command, the embedded Temporal server with the venv's ``temporal``
and its TLS proxy with this machine's nginx, each pod in a network namespace of its own with the
chart's command, environment, Secrets, ConfigMaps and projected ServiceAccount tokens mounted where the
chart says, as the chart's user. Their Ready is their own probes' verdict. An order is then planned,
applied, probed and made Ready by that installation alone (no module process runs on the host): the
order's replicas are kwok's pods served by the stand-in fleet, on the pods' gateway address.

Then the administrator's lifecycle on it: an upgrade of the module (a setting changed) replaces the
module's pods and restarts no serving replica; the uninstall (Deckhouse's disable) runs the chart's
pre-delete hook Job as a pod — the chart's ``ai-inference disable`` under its own ServiceAccount —
which stops the order's workload and leaves the order saying ``ModuleDisabled``; installing again
brings it back to Ready on its own.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient, AppsV1Api, CoordinationV1Api, CoreV1Api, CustomObjectsApi
from kubernetes.client.rest import ApiException

from activities.builders.auth import TOKEN_KEY
from devstack.cluster.launcher import LocalCluster
from devstack.standins.fleet import PROBE_URL_ANNOTATION, StandInFleet
from devstack.standins.pod_kubelet import GATEWAY, RUN_ANNOTATION, PodKubelet, apiserver_address
from devstack.standins.runtime import MultiplexedRuntime
from tests.chart.helm import (
    CHART_DIR,
    NAMESPACE,
    RELEASE,
    Helm,
    create_default_llm_order,
    forget_chart_pods_leases,
    set_args,
)
from tests.polling import wait_until
from worker.disable import MODULE_DISABLED

pytestmark = pytest.mark.cluster

GROUP, VERSION, ORDERS = "ai.deckhouse.io", "v1alpha1", "inferenceservices"
ORDER_NAMESPACE = "chart-pods-orders"
ORDER = "chat"
MODULE_USER = 64535  # the chart's runAsUser
DEPLOYMENTS = ("ai-inference-planner", "ai-inference-watcher", "ai-inference-worker")
PROBE_ENV = [{"name": "AI_INFERENCE_HEALTH__PROBETARGETANNOTATION", "value": PROBE_URL_ANNOTATION}]


def chart_values(**extra: Any) -> dict[str, Any]:
    """The chart as an administrator installs it, one replica of each process (two CPU cores here), the
    hooks on (their Jobs' pods run too), and the stand-ins' probe target for the order's replicas."""
    return {
        "podAnnotations": {RUN_ANNOTATION: "run"},
        "watcher.replicas": 1,
        "worker.replicas": 1,
        "crdUpgrade.enabled": True,
        "disableHook.enabled": True,
        "aiInference.catalog.mode": "None",
        "worker.extraEnv": PROBE_ENV,
        "watcher.extraEnv": PROBE_ENV,
        **extra,
    }


def helm_run(helm: Helm, cluster: LocalCluster, *args: str, timeout: float = 300) -> None:
    """``helm`` with hooks (``Helm.install``/``uninstall`` turn them off: kwok alone runs no Job)."""
    common = ["--kubeconfig", str(cluster.kubeconfig("admin")), "--namespace", NAMESPACE]
    helm(*args, *common, "--timeout", "4m", timeout=timeout)


def install(helm: Helm, cluster: LocalCluster, **extra: Any) -> None:
    helm_run(
        helm, cluster, "upgrade", "--install", RELEASE, str(CHART_DIR), "--create-namespace",
        "--take-ownership", "--reset-values", "--wait", *set_args(chart_values(**extra)),
    )  # fmt: skip


def ready_deployments(apps: AppsV1Api) -> dict[str, int]:
    return {name: apps.read_namespaced_deployment(name, NAMESPACE).status.ready_replicas or 0 for name in DEPLOYMENTS}


def module_pods(core: CoreV1Api) -> dict[str, Any]:
    return {
        p.metadata.name: p
        for p in core.list_namespaced_pod(NAMESPACE).items
        if RUN_ANNOTATION in (p.metadata.annotations or {}) and not p.metadata.deletion_timestamp
    }


def order(custom: CustomObjectsApi) -> dict[str, Any]:
    found: dict[str, Any] = custom.get_namespaced_custom_object(GROUP, VERSION, ORDER_NAMESPACE, ORDERS, ORDER)
    return found


def phase(custom: CustomObjectsApi) -> tuple[str | None, str | None]:
    status = order(custom).get("status") or {}
    return status.get("phase"), status.get("reason")


def replicas(core: CoreV1Api) -> dict[str, tuple[str, int]]:
    """The order's serving pods: name → (uid, restarts)."""
    pods = core.list_namespaced_pod(ORDER_NAMESPACE).items
    return {
        p.metadata.name: (p.metadata.uid, sum(s.restart_count for s in p.status.container_statuses or []))
        for p in pods
        if not p.metadata.deletion_timestamp
    }


def chat(core: CoreV1Api) -> int:
    """A chat completion through the order's Service (the stand-in URL on the pods' gateway), with its token."""
    service = core.read_namespaced_service(ORDER, ORDER_NAMESPACE)
    url = service.metadata.annotations[PROBE_URL_ANNOTATION]
    secrets = core.list_namespaced_secret(ORDER_NAMESPACE).items
    token = next(base64.b64decode(s.data[TOKEN_KEY]).decode() for s in secrets if TOKEN_KEY in (s.data or {}))
    body = json.dumps({"model": "Qwen/Qwen2.5-0.5B-Instruct", "messages": [{"role": "user", "content": "hi"}]})
    request = urllib.request.Request(
        f"{url}/v1/chat/completions",
        data=body.encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return int(response.status)


@pytest.fixture(scope="module")
def running(
    local_cluster: LocalCluster, kube_admin: ApiClient, helm: Helm, tmp_path_factory: Any
) -> Iterator[PodKubelet]:
    kubelet = PodKubelet(
        kube_admin, NAMESPACE, apiserver_address(local_cluster.server), tmp_path_factory.mktemp("pod-kubelet")
    ).start()
    fleet = StandInFleet(kube_admin, server=MultiplexedRuntime(host=GATEWAY)).start()
    try:
        install(helm, local_cluster)
        local_cluster.create_namespace(ORDER_NAMESPACE)
        yield kubelet
    finally:
        try:
            _tear_down(local_cluster, kube_admin, helm)
        finally:
            fleet.stop()
            kubelet.stop()


def _tear_down(cluster: LocalCluster, api: ApiClient, helm: Helm) -> None:
    """The order deleted while the module runs (its finalizer goes), then the release, its pods stopped by
    the kubelet (a pod it runs is not removed by kwok), then the orders' namespace."""
    custom, core = CustomObjectsApi(api), CoreV1Api(api)
    if _exists(lambda: order(custom)):
        custom.delete_namespaced_custom_object(GROUP, VERSION, ORDER_NAMESPACE, ORDERS, ORDER)
        wait_until(lambda: not _exists(lambda: order(custom)), timeout=60, what="the order's delete finishes")
    subprocess.run(
        [str(helm.binary), "uninstall", RELEASE, "--kubeconfig", str(cluster.kubeconfig("admin")),
         "--namespace", NAMESPACE, "--ignore-not-found", "--no-hooks", "--wait", "--timeout", "2m"],
        capture_output=True, check=False, timeout=180,
    )  # fmt: skip
    wait_until(lambda: not module_pods(core), timeout=60, what="the module's pods are gone", ignore=())
    forget_chart_pods_leases(api)
    if _exists(lambda: core.read_namespace(ORDER_NAMESPACE)):
        core.delete_namespace(ORDER_NAMESPACE)


def _exists(read: Any) -> bool:
    try:
        read()
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


def test_the_module_pods_run_from_the_chart_ready_by_their_own_probes(
    running: PodKubelet, kube_admin: ApiClient
) -> None:
    apps, core = AppsV1Api(kube_admin), CoreV1Api(kube_admin)
    # helm --wait returned: every Deployment and the StatefulSet counted their pods Ready, which only
    # the stand-in kubelet's probes write for these pods.
    assert ready_deployments(apps) == dict.fromkeys(DEPLOYMENTS, 1)
    assert apps.read_namespaced_stateful_set("ai-inference-temporal", NAMESPACE).status.ready_replicas == 1
    pods = module_pods(core)
    assert {p.metadata.labels.get("app") for p in pods.values()} >= {*DEPLOYMENTS, "ai-inference-temporal"}
    for pod in pods.values():
        for status in pod.status.container_statuses:
            assert status.ready, (pod.metadata.name, status)
            assert status.state.running, (pod.metadata.name, status)
    # The watcher leads through the chart's RBAC for Leases, under its pod's name (the downward API).
    leases = CoordinationV1Api(kube_admin).list_namespaced_lease(NAMESPACE).items
    watcher = next(name for name in pods if name.startswith("ai-inference-watcher-"))
    holders = [lease.spec.holder_identity or "" for lease in leases]
    assert any(holder.split("_", 1)[0] == watcher for holder in holders), holders


def test_the_processes_run_as_the_charts_user(running: PodKubelet) -> None:
    """Each container's process (the pid the kubelet started: ``ip netns exec`` and ``setpriv`` exec into it)
    runs as the pod's ``runAsUser``, with the pod's ``fsGroup``."""
    pids = {
        (run.name, container.name): container.process.pid
        for run in running.running.values()
        for container in run.containers
        if container.process is not None
    }
    # planner, watcher, worker, temporal and its TLS proxy (nginx's master)
    assert sorted(container for _, container in pids) == sorted(
        ["planner", "watcher", "worker", "temporal", "tls-proxy"]
    ), {
        (run.name, c.name): (c.waiting, c.terminated, c.restarts)
        for run in running.running.values()
        for c in run.containers
    }
    for where, pid in pids.items():
        status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        assert status["Uid"].split()[0] == str(MODULE_USER), where
        assert str(MODULE_USER) in status["Groups"].split(), where


def test_an_order_is_served_end_to_end_by_the_installation(running: PodKubelet, kube_admin: ApiClient) -> None:
    core, custom = CoreV1Api(kube_admin), CustomObjectsApi(kube_admin)
    create_default_llm_order(kube_admin, ORDER_NAMESPACE, ORDER)
    wait_until(lambda: phase(custom) == ("Ready", None), timeout=120, what="the order is Ready")
    status = order(custom)["status"]
    # Planned by the planner pod: with planner.baseURL set (the chart does) the worker has no other planner.
    assert status["resolved"]["deviceClass"], status
    assert chat(core) == 200


def test_an_upgrade_of_the_module_restarts_no_serving_replica(
    running: PodKubelet, local_cluster: LocalCluster, kube_admin: ApiClient, helm: Helm
) -> None:
    core, custom = CoreV1Api(kube_admin), CustomObjectsApi(kube_admin)
    before_pods = {
        p.metadata.uid for p in module_pods(core).values() if p.metadata.name.startswith("ai-inference-worker-")
    }
    serving = replicas(core)
    assert serving
    # A setting of the module changed: the worker's and the watcher's pod templates change.
    install(helm, local_cluster, **{"worker.extraEnv": [*PROBE_ENV, {"name": "UPGRADED", "value": "1"}]})
    after_pods = {
        p.metadata.uid for p in module_pods(core).values() if p.metadata.name.startswith("ai-inference-worker-")
    }
    assert after_pods
    assert not after_pods & before_pods, "the worker's pod was not replaced"
    wait_until(lambda: ready_deployments(AppsV1Api(kube_admin)) == dict.fromkeys(DEPLOYMENTS, 1), timeout=120)
    assert replicas(core) == serving, "a serving replica was restarted or replaced by the module's upgrade"
    assert phase(custom) == ("Ready", None)
    assert chat(core) == 200


def test_disable_stops_the_workload_and_install_brings_the_order_back(
    running: PodKubelet, local_cluster: LocalCluster, kube_admin: ApiClient, helm: Helm
) -> None:
    core, custom, apps = CoreV1Api(kube_admin), CustomObjectsApi(kube_admin), AppsV1Api(kube_admin)
    # The chart's pre-delete hook runs as a pod of its own (its Job's), the disable command in it.
    began = time.monotonic()
    helm_run(helm, local_cluster, "uninstall", RELEASE, "--wait")
    disabled = time.monotonic() - began
    assert phase(custom) == ("Pending", MODULE_DISABLED)
    assert not _exists(lambda: apps.read_namespaced_stateful_set(ORDER, ORDER_NAMESPACE))
    assert not _exists(lambda: core.read_namespaced_service(ORDER, ORDER_NAMESPACE))
    # Enabled again: the module comes back and so does the order, on its own.
    began = time.monotonic()
    install(helm, local_cluster)
    wait_until(lambda: phase(custom) == ("Ready", None), timeout=180, what="the order is Ready again")
    enabled = time.monotonic() - began
    print(f"\ndisable (helm uninstall, its hook's pod included) {disabled:.0f} s; enable to Ready {enabled:.0f} s")
    assert chat(core) == 200
