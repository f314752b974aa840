"""The local stack's Temporal (``DevStack.start_temporal``, step 3 of ``ai-inference dev up``): the dev
server on a loopback port behind the mTLS terminator on the port every client is given, its UI on
loopback; a second ``up`` starts nothing; a dev server that died is started again with the terminator
moved in front of its new port; ``down`` leaves neither behind."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from devstack.stack import DevStack, wait_port
from devstack.temporal_dev import temporal_binary

pytestmark = pytest.mark.temporal


def _listeners(pid: int) -> set[str]:
    """``ip:port`` of every TCP socket the process listens on (ss)."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    return {line.split()[3] for line in out.splitlines() if f"pid={pid}," in line}


def _health(stack: DevStack) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "AI_INFERENCE_"))}
    env = {**base, **{k: v for k, v in stack.env().items() if k.startswith("TEMPORAL_")}}
    argv = [str(temporal_binary()), "operator", "cluster", "health"]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def _up(stack: DevStack) -> dict[str, int]:
    ports = stack.ports()
    stack.start_temporal(stack.running(), ports)
    stack.ports_file.write_text(json.dumps(ports))
    for name in ("temporal-upstream", "temporal"):
        wait_port(ports[name], timeout=120)
    return ports


def _until_healthy(stack: DevStack) -> None:
    async def poll() -> None:
        while _health(stack).returncode != 0:
            await asyncio.sleep(0.5)

    asyncio.run(asyncio.wait_for(poll(), 90))


def test_the_stacks_temporal_is_reached_over_mtls_only_and_survives_restarts(tmp_path: Path) -> None:
    stack = DevStack(tmp_path / "dev")
    stack.state.mkdir(parents=True)
    try:
        ports = _up(stack)
        running = stack.running()
        assert {"temporal", "temporal-tls"} <= set(running)
        # Every port of the dev server is on loopback; the terminator has the given one.
        assert all(addr.startswith("127.0.0.1:") for addr in _listeners(running["temporal"])), _listeners(
            running["temporal"]
        )
        assert f"127.0.0.1:{ports['temporal-upstream']}" in _listeners(running["temporal"])
        assert f"127.0.0.1:{ports['temporal-ui']}" in _listeners(running["temporal"])
        assert _listeners(running["temporal-tls"]) == {f"127.0.0.1:{ports['temporal']}"}
        _until_healthy(stack)

        # Run again: nothing new starts.
        assert _up(stack) == ports
        assert stack.running() == running

        # The dev server dies: the next up starts it on a new port and the terminator in front of it.
        _stop(running["temporal"], signal.SIGKILL)
        again = _up(stack)
        assert again["temporal-upstream"] != ports["temporal-upstream"]
        assert stack.running()["temporal-tls"] != running["temporal-tls"]
        _until_healthy(stack)
    finally:
        for pid in stack.running().values():
            _stop(pid, signal.SIGTERM)
    assert not stack.running()


def _stop(pid: int, sig: int) -> None:
    # This test started them (`dev up` is a process that exits): reaped here, or they linger as zombies.
    os.killpg(pid, sig)
    with contextlib.suppress(ChildProcessError):  # reaped already by subprocess
        os.waitpid(pid, 0)
