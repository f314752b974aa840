"""``ai-inference dev up --temporal postgres``, step 3 (``DevStack.start_production_temporal``):
PostgreSQL and the Temporal server as processes of the stack, every port on loopback, the frontend
on the port every client is given, mTLS with the stack's certificates (``dev env``); a second ``up``
starts nothing; after a stop, the next ``up`` finds the same database (a workflow started before
is still there); the switch to the dev server is refused while it runs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from devstack.postgres import PostgresServer, data_dir_for
from devstack.stack import DevStack
from devstack.temporal_server import ensure_server_binaries

pytestmark = pytest.mark.prodtemporal


def _listeners(pid: int) -> set[str]:
    """``ip:port`` of every TCP socket the process listens on (ss)."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    return {line.split()[3] for line in out.splitlines() if f"pid={pid}," in line}


def _up(stack: DevStack) -> dict[str, int]:
    stack.temporal_kind_file.write_text("postgres\n")  # as `dev up --temporal postgres` records it
    ports = stack.ports()
    stack.start_production_temporal(stack.running(), ports, say=lambda _line: None)
    stack.ports_file.write_text(json.dumps(ports))
    return ports


async def _client(stack: DevStack) -> Client:
    return await Client.connect(
        f"127.0.0.1:{stack.ports()['temporal']}", tls=stack.temporal_credentials().tls_config("cli")
    )


def test_the_stack_runs_the_production_temporal_and_finds_its_data_again(tmp_path: Path) -> None:
    ensure_server_binaries()  # built before the first test (the prodtemporal marker); a no-op here
    stack = DevStack(tmp_path / "dev")
    stack.state.mkdir(parents=True)
    workflow_id = f"kept-{uuid.uuid4().hex[:6]}"
    try:
        ports = _up(stack)
        running = stack.running()
        assert {"postgres", "temporal"} <= set(running)
        assert "temporal-tls" not in running  # Temporal's own TLS: no terminator
        assert ports["temporal"] == ports["temporal-frontend"]
        for name in ("postgres", "temporal"):
            assert all(a.startswith("127.0.0.1:") for a in _listeners(running[name])), (name, _listeners(running[name]))
        assert f"127.0.0.1:{ports['temporal']}" in _listeners(running["temporal"])
        # The CLI's certificate from `dev env` is the one the frontend accepts.
        assert stack.env()["TEMPORAL_ADDRESS"] == f"127.0.0.1:{ports['temporal']}"

        async def start_one() -> None:
            client = await _client(stack)
            await client.start_workflow("NoSuchWorkflow", id=workflow_id, task_queue="nobody-polls")

        asyncio.run(start_one())

        # Run again: nothing new starts.
        assert _up(stack) == ports
        assert stack.running() == running
        # The dev server may not be started over it.
        with pytest.raises(RuntimeError, match="dev down"):
            stack.up(lambda _line: None, temporal="dev")

        # Both stopped: the next up starts them on the same database.
        _stop_all(stack)
        _up(stack)

        async def described() -> WorkflowExecutionStatus | None:
            client = await _client(stack)
            return (await client.get_workflow_handle(workflow_id).describe()).status

        assert asyncio.run(described()) == WorkflowExecutionStatus.RUNNING
    finally:
        _stop_all(stack)
        # As `dev down --purge`: the database too (outside the state directory when run as root).
        PostgresServer(data_dir_for(stack.state), port=1).remove()
    assert not stack.running()


def _stop_all(stack: DevStack) -> None:
    # The server first: PostgreSQL's SIGTERM (a smart shutdown) waits for its clients to go.
    running = stack.running()
    for name in sorted(running, key=lambda n: n != "temporal"):
        _stop(running[name], signal.SIGTERM)


def _stop(pid: int, sig: int) -> None:
    # This test started them (`dev up` is a process that exits): reaped here, or they linger as zombies.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
