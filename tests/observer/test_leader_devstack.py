"""The local stack with two of each (``ai-inference dev up --replicas 2``, its step 4: ``DevStack.start_module``).

On the local control plane and the stack's own Temporal (its dev server behind the mTLS terminator):
two workers and two observers start, each with its own health port and its name as ``POD_NAME``.
Both workers poll; one observer holds the Lease in the module's namespace (named by its process
name) and the other stands by and says so on ``/readyz``. SIGTERM to the leader hands the Lease to
the standby at once (released, not left to expire), and the stopped leader exits 0.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from kubernetes.client import CoordinationV1Api
from kubernetes.client.exceptions import ApiException

from devstack.cluster.launcher import LocalCluster
from devstack.stack import MODULE_NAMESPACE, DevStack, free_port, wait_port
from tests.polling import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.temporal]

LEASE = "ai-inference-observer"


def _get(port: int, path: str) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return str(response.read().decode())
    except urllib.error.HTTPError as err:
        return str(err.read().decode())


def _holder(cluster: LocalCluster) -> str:
    with cluster.api_client("admin") as api:
        try:
            spec = CoordinationV1Api(api).read_namespaced_lease(LEASE, MODULE_NAMESPACE).spec
        except ApiException as err:
            if err.status == 404:
                return ""
            raise
    return str(spec.holder_identity or "")


def _stop(pid: int, sig: int) -> int | None:
    """Signal the process group; reap the process (this test started it): its exit status."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)
    with contextlib.suppress(ChildProcessError):
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status)
    return None


def test_the_local_stack_starts_two_workers_and_two_observers_one_leading(
    local_cluster: LocalCluster, tmp_path: Path
) -> None:
    stack = DevStack(tmp_path / "dev")
    stack.state.mkdir(parents=True)
    try:
        ports = stack.ports()
        stack.start_temporal(stack.running(), ports)
        ports |= {"planner": free_port(), "catalog": free_port()}  # not started: no order is made here
        wait_port(ports["temporal"], timeout=120)
        names = stack.start_module(local_cluster, stack.running(), ports, stack.module_env(ports), replicas=2)
        assert names == ["worker", "watcher", "worker-1", "watcher-1"]
        running = stack.running()
        assert set(names) <= set(running)
        assert len({ports[f"{n}-health"] for n in names}) == 4

        # Both workers poll their task queue.
        for worker in ("worker", "worker-1"):

            def polling(port: int = ports[f"{worker}-health"]) -> bool:
                return "worker: polling" in _get(port, "/healthz")

            wait_until(polling, timeout=120, what=f"{worker} polling")
        # One observer leads, named by its process; the other stands by, and says so.
        holder = wait_until(lambda: _holder(local_cluster), timeout=120, what="an observer holding the Lease")
        leader = holder.split("_", 1)[0]
        assert leader in ("watcher", "watcher-1")
        standby = "watcher-1" if leader == "watcher" else "watcher"
        wait_until(
            lambda: f"standby (lease {LEASE} held by {holder})" in _get(ports[f"{standby}-health"], "/readyz"),
            timeout=60,
            what=f"{standby} standing by",
        )

        # SIGTERM: the leader stops, releases the Lease, exits 0; the standby takes it at its next read.
        stopped = time.monotonic()
        assert _stop(running[leader], signal.SIGTERM) == 0
        taken = wait_until(
            lambda: _holder(local_cluster).startswith(f"{standby}_"), timeout=30, interval=0.1, what="handover"
        )
        assert taken
        handover = time.monotonic() - stopped
        print(f"\nSIGTERM handover between the stack's observers: {handover:.1f}s (lease duration 15s)")
        assert handover < 15, "the Lease was left to expire rather than released"
    finally:
        for pid in stack.running().values():
            _stop(pid, signal.SIGTERM)
    assert not stack.running()
    log = (stack.logs / "watcher.log").read_text(errors="replace") + (stack.logs / "watcher-1.log").read_text(
        errors="replace"
    )
    assert "observer lease released" in log
