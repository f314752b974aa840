"""kube-apiserver restarted (same etcd, same ports, same certificates) while orders are made, edited and
deleted: the worker's calls fail meanwhile and are retried, the observer's watches break and relist.
Ends with the shared convergence check (tests/faults/churn.py).

kwok is no kubelet: when the controller-manager marks a node's pods not ready around the restart, kwok
never reports them ready again. ``kubelet_reports_readiness`` plays that part of a kubelet (a Running
pod on a Ready node whose containers are ready is Ready), so the module sees what a real cluster shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections import Counter

from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException
from temporalio.client import WorkflowExecutionStatus

from devstack.cluster.inventory import fleet_inventory
from devstack.cluster.kube import dynamic_client
from devstack.cluster.launcher import LocalCluster, apply_inventory
from inference_api.payloads import order_workflow_id
from inference_api.types import GROUP, VERSION
from tests.faults.churn import (
    FAULTS_CLASS_NAME,
    SMALL_ORDER_COUNT,
    FaultStand,
    ServingWatch,
    churn,
    converge,
    order_in,
)
from tests.faults.outage import OUTAGE_SECONDS

# Short in CI; minutes with AI_INFERENCE_FAULT_OUTAGE_SECONDS.
FREEZE_SECONDS = max(20.0, OUTAGE_SECONDS)
QUOTA_SECONDS = max(20.0, OUTAGE_SECONDS)
NODE_LOST_SECONDS = max(45.0, OUTAGE_SECONDS)
PULL_SECONDS = max(20.0, OUTAGE_SECONDS)
# The namespace whose pods' images the local stack's kwok cannot pull (deploy/controlplane/kwok-stages.yaml).
UNPULLABLE = "faults-unpullable"


def _reready(api: ApiClient, namespace: str) -> int:
    core = CoreV1Api(api)
    ready_nodes = {
        n.metadata.name
        for n in core.list_node().items
        if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
    }
    fixed = 0
    for pod in core.list_namespaced_pod(namespace).items:
        conditions = {c.type: c.status for c in pod.status.conditions or []}
        if (
            pod.status.phase == "Running"
            and pod.spec.node_name in ready_nodes
            and not pod.metadata.deletion_timestamp
            and conditions.get("ContainersReady") == "True"
            and conditions.get("Ready") == "False"
        ):
            body = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
            core.patch_namespaced_pod_status(pod.metadata.name, namespace, body)
            fixed += 1
    return fixed


async def kubelet_reports_readiness(api: ApiClient, namespace: str, counted: list[int]) -> None:
    while True:
        with contextlib.suppress(Exception):  # the API server is away: the next pass
            counted.append(await asyncio.to_thread(_reready, api, namespace))
        await asyncio.sleep(1)


async def test_kube_apiserver_restarted(fault_stand: FaultStand, faults_cluster: LocalCluster) -> None:
    fs = fault_stand
    restarts: list[float] = []
    reready: list[int] = []
    kubelet = asyncio.create_task(kubelet_reports_readiness(fs.stand.api, fs.stand.namespace, reready))

    async def restart_the_apiserver() -> None:
        await asyncio.sleep(3)
        restarts.append(await asyncio.to_thread(faults_cluster.restart, "kube-apiserver"))
        await asyncio.sleep(4)
        restarts.append(await asyncio.to_thread(faults_cluster.restart, "kube-apiserver", kill=True))

    try:
        await churn(fs, restart_the_apiserver)
    finally:
        kubelet.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await kubelet
    print(
        f"kube-apiserver down and back in {', '.join(f'{s:.1f} s' for s in restarts)}; "
        f"pods reported ready again by the kubelet stand-in: {sum(reready)}"
    )
    assert len(restarts) == 2


def _apiserver_pid(cluster: LocalCluster) -> int:
    state = cluster.state()
    assert state is not None
    return next(p.pid for p in state.processes if p.name == "kube-apiserver")


async def test_kube_apiserver_frozen_during_first_loads(fault_stand: FaultStand, faults_cluster: LocalCluster) -> None:
    """kube-apiserver SIGSTOPped (a frozen process: connections open, nothing answered — not a restart)
    for FREEZE_SECONDS while the orders made during the fault load their first replica, then SIGCONT."""
    fs = fault_stand
    pid = _apiserver_pid(faults_cluster)
    reready: list[int] = []
    kubelet = asyncio.create_task(kubelet_reports_readiness(fs.stand.api, fs.stand.namespace, reready))

    async def freeze() -> None:
        # The first orders of the fault are made (one every 1.5 s): their workloads are loading.
        await asyncio.sleep(4)
        os.kill(pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(FREEZE_SECONDS)
        finally:
            os.kill(pid, signal.SIGCONT)

    try:
        await churn(fs, freeze, count=SMALL_ORDER_COUNT)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        kubelet.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await kubelet
    print(f"kube-apiserver frozen {FREEZE_SECONDS:.0f} s; pods reported ready again: {sum(reready)}")


async def test_a_resource_quota_refuses_the_pods(fault_stand: FaultStand) -> None:
    """A ResourceQuota that admits no new pod (``pods: 0``; a quota is checked at admission only, so the
    pods running now stay): the orders made meanwhile get no pod (the StatefulSet controller's
    FailedCreate) until the quota goes; the serving keep serving. (A quota at "the pods running now"
    tested nothing when the churn deleted an order first: its freed place went to the next order.)"""
    fs = fault_stand
    core = CoreV1Api(fs.stand.api)
    namespace = fs.stand.namespace
    refused: list[str] = []

    def quota_refusals() -> list[str]:
        events = core.list_namespaced_event(namespace).items
        return [e.message for e in events if e.reason == "FailedCreate" and "exceeded quota" in (e.message or "")]

    async def quota() -> None:
        await asyncio.sleep(1)
        body = {"metadata": {"name": "faults-quota"}, "spec": {"hard": {"pods": "0"}}}
        await asyncio.to_thread(core.create_namespaced_resource_quota, namespace, body)
        try:
            await asyncio.sleep(QUOTA_SECONDS)
            refused.extend(await asyncio.to_thread(quota_refusals))
        finally:
            await asyncio.to_thread(core.delete_namespaced_resource_quota, "faults-quota", namespace)

    await churn(fs, quota, count=SMALL_ORDER_COUNT)
    print(f"pods refused by the quota: {len(refused)} (e.g. {refused[:1]})")
    assert refused, "the quota refused no pod: the case tested nothing"


async def test_a_node_lost_with_serving_pods(fault_stand: FaultStand, faults_cluster: LocalCluster) -> None:
    """The node that runs the most serving replicas is deleted (its pods go with it, as the pod GC
    removes pods bound to a node that no longer exists) and comes back NODE_LOST_SECONDS later, as a
    replaced machine of the same name and GPUs does. Meanwhile no workflow fails and no serving order
    loses its endpoint; after, every order converges. (Moving an order off a node that never comes
    back is a replan: issue 23, item 5.)"""
    fs = fault_stand
    core = CoreV1Api(fs.stand.api)
    lost: list[str] = []

    def busiest_node() -> tuple[str, int]:
        pods = core.list_namespaced_pod(fs.stand.namespace).items
        counts = Counter(p.spec.node_name for p in pods if p.spec.node_name and p.status.phase == "Running")
        return counts.most_common(1)[0]

    def pods_on(node: str) -> list[str]:
        pods = core.list_namespaced_pod(fs.stand.namespace).items
        return [p.metadata.name for p in pods if p.spec.node_name == node]

    async def lose_a_node() -> None:
        await asyncio.sleep(2)
        node, serving = await asyncio.to_thread(busiest_node)
        await asyncio.to_thread(core.delete_node, node)
        deleted = time.monotonic()
        # The pod GC removes the pods of a node that is gone (after its quarantine, about 40 s).
        await fs.stand.until(
            lambda: not pods_on(node), timeout=180, what=f"the pods bound to the lost node {node} removed"
        )
        gone = time.monotonic() - deleted
        lost.append(f"{node} ({serving} serving pods; gone {gone:.0f} s after the node)")
        await asyncio.sleep(max(0.0, NODE_LOST_SECONDS - gone))
        with faults_cluster.api_client("admin") as api:
            dyn = dynamic_client(api, faults_cluster.state_dir / "discovery-faults.json")
            await asyncio.to_thread(apply_inventory, dyn, fleet_inventory(faults_cluster.state_dir))

    await churn(fs, lose_a_node, count=SMALL_ORDER_COUNT)
    print(f"lost for {NODE_LOST_SECONDS:.0f} s: {lost}")


async def test_images_that_cannot_be_pulled(fault_stand: FaultStand, faults_cluster: LocalCluster) -> None:
    """Orders whose pods' images cannot be pulled (namespace faults-unpullable, where the local
    stack's kwok reports ErrImagePull: deploy/controlplane/kwok-stages.yaml) next to orders that serve:
    for PULL_SECONDS after every such pod reports it, no workflow fails and the serving keep their
    endpoint; the failing orders are then deleted, and their deletes finish. (What their status says
    about the pull is issue 23, item 5.)"""
    fs = fault_stand
    core = CoreV1Api(fs.stand.api)
    serving = [f"early-{i}" for i in range(max(2, SMALL_ORDER_COUNT // 2))]
    for name in serving:
        await asyncio.to_thread(fs.create, name)
    await fs.all_ready(serving, timeout=240)
    watch = ServingWatch(fs)
    await asyncio.to_thread(watch.note, serving)
    with contextlib.suppress(ApiException):  # 404: no namespace left by an earlier run
        await asyncio.to_thread(core.delete_namespace, UNPULLABLE)
    await fs.stand.until(lambda: not _namespace_exists(core), timeout=120, what=f"{UNPULLABLE} gone")
    await asyncio.to_thread(faults_cluster.create_namespace, UNPULLABLE, ())
    pulling = [f"pull-{i}" for i in range(max(2, SMALL_ORDER_COUNT // 2))]
    for name in pulling:
        await asyncio.to_thread(_create_unpullable, fs, name)

    def pull_failures() -> list[str]:
        pods = core.list_namespaced_pod(UNPULLABLE).items
        return [
            p.metadata.name
            for p in pods
            if any(
                (s.state.waiting and s.state.waiting.reason == "ErrImagePull")
                for s in [*(p.status.init_container_statuses or []), *(p.status.container_statuses or [])]
            )
        ]

    async def images_refused() -> None:
        await fs.stand.until(
            lambda: len(pull_failures()) >= len(pulling), timeout=240, what="every pulling order's pod: ErrImagePull"
        )
        await asyncio.sleep(PULL_SECONDS)
        for name in pulling:
            obj = await asyncio.to_thread(order_in, fs.stand, UNPULLABLE, name)
            assert obj is not None
            handle = fs.client.get_workflow_handle(order_workflow_id(UNPULLABLE, name, obj["metadata"]["uid"]))
            status = (await handle.describe()).status
            assert status == WorkflowExecutionStatus.RUNNING, f"{name}: its workflow is {status}"
            phase = (obj.get("status") or {}).get("phase")
            assert phase != "Failed", f"{name} says Failed: {obj.get('status')}"

    await watch.during(images_refused())
    print(f"\n{len(pulling)} orders with unpullable images for {PULL_SECONDS:.0f} s; pods: {pull_failures()}")
    deleting = time.monotonic()
    for name in pulling:
        await asyncio.to_thread(
            fs.stand.custom.delete_namespaced_custom_object, GROUP, VERSION, UNPULLABLE, "inferenceservices", name
        )

    def gone() -> bool:
        left = fs.stand.custom.list_namespaced_custom_object(GROUP, VERSION, UNPULLABLE, "inferenceservices")
        return not left["items"]

    await fs.stand.until(gone, timeout=120, what="the deletes of the orders whose images cannot be pulled finished")
    print(f"their deletes finished in {time.monotonic() - deleting:.1f} s")
    await asyncio.to_thread(core.delete_namespace, UNPULLABLE)
    seconds = await converge(fs)
    print(f"the serving orders settled {seconds:.1f} s after")


def _namespace_exists(core: CoreV1Api) -> bool:
    try:
        core.read_namespace(UNPULLABLE)
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


def _create_unpullable(fs: FaultStand, name: str) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": UNPULLABLE},
        "spec": {"inferenceServiceClassName": FAULTS_CLASS_NAME, "model": fs.model},
    }
    fs.stand.custom.create_namespaced_custom_object(GROUP, VERSION, UNPULLABLE, "inferenceservices", body)
