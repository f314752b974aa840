"""The API server unreachable from the worker at each step of an order, for OUTAGE_SECONDS (minutes with
AI_INFERENCE_FAULT_OUTAGE_SECONDS=180): every workflow stays Running, the orders that serve keep their
endpoint, and every order converges once the API server answers again.

Real: the suite's control plane, the worker and the observer subprocesses, the dev server, the
stand-in runtimes. The worker talks to kube-apiserver through the fault proxy (tests/faults/kube_proxy.py),
the observer directly (a partition between the worker and the API server: the observer still sees the
replicas get ready and tells the workflows). Each order meets the outage at one step — the proxy drops,
unanswered, the requests of that step of that order and relays everything else:

=========== =====================================================================================
order       requests dropped
=========== =====================================================================================
s-validate  the read of the order (the first step: read the order and its class, validate)
s-resolve   the read of its Hugging Face token Secret (resolve the model)
s-apply     every read and write of its workload (StatefulSet, Service, Secret, ...)
s-probe     the reads of its Service and auth Secret — after its workload was applied and its
            status written (the first probe)
s-delete    everything about it, from its deletion on (status, finalizer removal)
=========== =====================================================================================

The plan step's outage is the planner service's (tests/faults/test_planner_service_faults.py, down
OUTAGE_SECONDS at least); every step, the plan's included, is refused past every bounded retry
policy in tests/faults/test_outages.py.
"""

from __future__ import annotations

import asyncio
import base64
import time
from pathlib import Path

from kubernetes.client import CoreV1Api

from devstack.cluster.launcher import LocalCluster
from inference_api.types import GROUP, VERSION
from tests.faults.churn import FAULTS_CLASS_NAME, FaultStand, ServingWatch, converge, failed_workflows
from tests.faults.kube_proxy import Block, KubeFaultProxy
from tests.faults.outage import OUTAGE_SECONDS

STEPS = ("s-validate", "s-resolve", "s-apply", "s-probe")


def _blocks(namespace: str) -> dict[str, Block]:
    orders = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/inferenceservices"
    end = r"(\?|$)"
    return {
        "s-validate": Block(rf"^GET {orders}/s-validate{end}", OUTAGE_SECONDS),
        "s-resolve": Block(rf"^GET /api/v1/namespaces/{namespace}/secrets/s-resolve-hf{end}", OUTAGE_SECONDS),
        "s-apply": Block(
            rf"/namespaces/{namespace}/(?!inferenceservices/)[a-z]+/s-apply[-a-z0-9]*{end}", OUTAGE_SECONDS
        ),
        "s-probe": Block(
            rf"^GET /api/v1/namespaces/{namespace}/(services/s-probe|secrets/s-probe-auth){end}",
            OUTAGE_SECONDS,
            after=[
                rf"^PATCH /apis/apps/v1/namespaces/{namespace}/statefulsets/s-probe{end}",
                rf"^PATCH {orders}/s-probe/status{end}",
            ],
        ),
        "s-delete": Block(
            rf"/namespaces/{namespace}/[a-z]+/s-delete[-a-z0-9]*(/status)?{end}", OUTAGE_SECONDS, armed=False
        ),
    }


async def test_the_api_server_unreachable_from_the_worker_at_each_step(
    kube_proxy: KubeFaultProxy, fault_stand: FaultStand, faults_cluster: LocalCluster, tmp_path: Path
) -> None:
    fs = fault_stand
    stand = fs.stand
    namespace = stand.namespace
    direct = fs.processes.kubeconfig
    fs.kill_worker()
    fs.processes.kubeconfig = kube_proxy.kubeconfig(faults_cluster.kubeconfig("admin"), tmp_path / "proxied.yaml")
    fs.start_worker()
    fs.processes.kubeconfig = direct
    CoreV1Api(stand.api).create_namespaced_secret(
        namespace,
        {"metadata": {"name": "s-resolve-hf"}, "data": {"token": base64.b64encode(b"hf_not_a_real_token").decode()}},
    )
    # Serving before the outage: one that only keeps serving, one that is deleted during it.
    for name in ("serving", "s-delete"):
        await asyncio.to_thread(fs.create, name)
    await fs.all_ready(["serving", "s-delete"], timeout=180)
    watch = ServingWatch(fs)
    await asyncio.to_thread(watch.note, ["serving", "s-delete"])

    blocks = {name: kube_proxy.block(block) for name, block in _blocks(namespace).items()}
    for name in STEPS:
        model = dict(fs.model)
        if name == "s-resolve":
            model["authSecretRef"] = {"name": "s-resolve-hf"}
        await asyncio.to_thread(stand.create_order, name, model, FAULTS_CLASS_NAME)
        fs.live.add(name)
    await asyncio.to_thread(fs.delete, "s-delete")
    blocks["s-delete"].arm()

    async def outages() -> None:
        deadline = time.monotonic() + OUTAGE_SECONDS + 180
        while not all(block.over for block in blocks.values()):
            assert time.monotonic() < deadline, {n: (b.began, b.refused) for n, b in blocks.items()}
            failed = await failed_workflows(fs)
            assert not failed, f"order workflows Failed during the outage: {failed}"
            await asyncio.sleep(1)

    started = time.monotonic()
    await watch.during(outages())
    print(
        f"\nthe API server unreachable from the worker for {OUTAGE_SECONDS:.0f} s at each step; requests "
        f"dropped: {', '.join(f'{n} {b.refused}' for n, b in blocks.items())} "
        f"(over {time.monotonic() - started:.0f} s)"
    )
    for name, block in blocks.items():
        assert block.refused > 0, f"{name}: its step never met the outage"
    seconds = await converge(fs)
    print(f"converged {seconds:.1f} s after the last outage")
