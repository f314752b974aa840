"""The API server behind a fault proxy (tests/faults/kube_proxy.py): the worker and the observer talk to
kube-apiserver through it while orders are made, edited and deleted.

Real: the local control plane, the worker and observer subprocesses (their kubeconfig points at the
proxy: same CA, same token; the proxy terminates TLS with the cluster's own serving certificate), the
dev server of the fault stand. The proxy answers 409 on writes, 429, 500 and 503, holds requests
without answering, and cuts watch streams; the case ends with the shared convergence check.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from kubernetes.client import CoreV1Api

from activities.kube import load_api_client
from devstack.cluster.launcher import LocalCluster
from tests.faults.churn import FaultStand, churn
from tests.faults.kube_proxy import KubeFaultProxy, Rates

FAULTY = Rates(conflict=0.08, throttle=0.05, error=0.08, timeout=0.02, cut_watch=0.3)


async def test_an_api_call_never_answered_gives_up_instead_of_holding_its_thread(
    kube_proxy: KubeFaultProxy, faults_cluster: LocalCluster, tmp_path: Path
) -> None:
    """The module's API client (activities.kube.load_api_client, the worker's and the observer's)
    bounds every request: a request the API server never answers fails in seconds. Without a bound
    the activity's thread waits forever, and 16 such requests stop the worker's every activity."""
    kubeconfig = kube_proxy.kubeconfig(faults_cluster.kubeconfig("admin"), tmp_path / "proxied.yaml")
    api = load_api_client(str(kubeconfig))
    kube_proxy.set_rates(Rates(timeout=1.0))
    started = time.monotonic()
    with pytest.raises(Exception) as failed:  # noqa: PT011 - urllib3's read timeout, whatever its class
        await asyncio.wait_for(asyncio.to_thread(CoreV1Api(api).list_namespace), timeout=35)
    elapsed = time.monotonic() - started
    print(f"\nan unanswered API request gave up after {elapsed:.1f} s ({type(failed.value).__name__})")
    assert not isinstance(failed.value, TimeoutError), "the request was still waiting after 35 s"
    assert kube_proxy.counts["timeout"] == 1
    kube_proxy.off()
    # The proxy runs on this event loop: the call goes to a thread.
    assert (await asyncio.to_thread(CoreV1Api(api).list_namespace)).items


async def test_api_errors_timeouts_and_cut_watches(
    kube_proxy: KubeFaultProxy, fault_stand: FaultStand, faults_cluster: LocalCluster, tmp_path: Path
) -> None:
    # kube_proxy first: set up before the stand, torn down after it (the stand's teardown deletes the
    # orders through the worker, which talks through the proxy).
    fs = fault_stand
    proxied = kube_proxy.kubeconfig(faults_cluster.kubeconfig("admin"), tmp_path / "proxied.yaml")
    fs.kill_worker()
    fs.kill_observer()
    fs.processes.kubeconfig = proxied
    fs.start_worker()
    fs.start_observer()

    async def faulty_api() -> None:
        kube_proxy.set_rates(FAULTY)
        await asyncio.sleep(25)
        kube_proxy.off()

    await churn(fs, faulty_api)
    print(f"faults injected: {dict(kube_proxy.counts)}")
    assert kube_proxy.counts["cut_watch"] > 0
    assert sum(kube_proxy.counts.values()) > kube_proxy.counts["cut_watch"]
