"""`ai-inference cluster up|status|env|down` on a second, throwaway cluster: down leaves nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from devstack.cluster.build import CONTROL_PLANE_TOOLS, ensure_binaries
from devstack.cluster.launcher import LocalCluster, _pid_alive, listening_ports

pytestmark = pytest.mark.cluster


def _cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker.cli", "cluster", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def test_cli_up_is_idempotent_and_down_leaves_no_process_or_port(tmp_path: Path) -> None:
    ensure_binaries(CONTROL_PLANE_TOOLS)  # built by the session hook already; cheap here
    state = tmp_path / "cli-cluster"
    up = _cli("up", "--state-dir", str(state), "--no-inventory")
    assert up.returncode == 0, up.stderr
    try:
        cluster = LocalCluster(state)
        st = cluster.state()
        assert st is not None
        assert cluster.is_up()
        pids = [p.pid for p in st.processes]
        ports = {port for p in st.processes for port in p.ports.values()}
        assert {p.name for p in st.processes} == {
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kwok",
        }
        assert ports <= listening_ports()
        # Every process and log is recorded in the state dir.
        assert all(Path(p.log).is_file() for p in st.processes)

        again = _cli("up", "--state-dir", str(state))
        assert again.returncode == 0
        assert "already up" in again.stderr
        assert [p.pid for p in (cluster.state() or st).processes] == pids

        env = _cli("env", "--state-dir", str(state))
        assert env.returncode == 0
        assert f"export KUBECONFIG={cluster.kubeconfig('admin')}" in env.stdout
        # Tokens appear only where asked for: in `env`, never in up/status output.
        token = cluster.token("ns-user")
        assert token in env.stdout
        assert token not in up.stderr + up.stdout

        status = _cli("status", "--state-dir", str(state))
        assert status.returncode == 0, status.stdout
        assert status.stdout.startswith("up"), status.stdout
        assert token not in status.stdout
        logs = "".join(Path(p.log).read_text(errors="replace") for p in st.processes)
        assert token not in logs
    finally:
        down = _cli("down", "--state-dir", str(state))
    assert down.returncode == 0, down.stderr
    assert not any(_pid_alive(pid) for pid in pids)
    assert not (ports & listening_ports())
    assert _cli("status", "--state-dir", str(state)).returncode == 1
