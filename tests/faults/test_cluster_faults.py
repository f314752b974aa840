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

from kubernetes.client import ApiClient, CoreV1Api

from devstack.cluster.launcher import LocalCluster
from tests.faults.churn import FaultStand, churn


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
