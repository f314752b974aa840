"""The local stack's tracing backend: Jaeger (v2, an OpenTelemetry Collector distribution) built
from its Go module, holding traces in memory, taking OTLP and serving its query API (docs/tracing.md).

Nothing serves Jaeger's binary on a registry this project can reach, so it is compiled with the Go
toolchain from the Go module proxy, once, into the cache::

    <cache>/jaeger-<version>/bin/jaeger     github.com/jaegertracing/jaeger/cmd/jaeger
    <cache>/jaeger-<version>/built.json     written last (version, go, seconds)
    <cache>/jaeger-<version>/.lock          concurrent callers wait, build once

``go install <package>@<version>`` refuses the module (its go.mod has a ``replace`` directive, which
only a main module may have), so the module is downloaded (``go mod download``: verified against
the Go checksum database like any module) and built as the main module, in the module cache, with
its own go.mod and go.sum. A cold build is about :data:`COLD_BUILD_MINUTES` minutes on two cores
(docs/tracing.md has the measured figure). The UI of a source build is Jaeger's placeholder page
(the real one is a separate npm project); the query API (``/api/services``, ``/api/traces``) is whole.

``python -m devstack.tracing_backend`` builds (if missing) and prints the binary's path.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from devstack.cluster.paths import build_logs_dir, cache_root
from devstack.process_group import stop_group
from devstack.temporal_server import free_port
from devstack.vllm_env import install_lock

Progress = Callable[[str], None]

MODULE = "github.com/jaegertracing/jaeger"
VERSION = "v1.75.0"
PACKAGE = "./cmd/jaeger"
COLD_BUILD_MINUTES = 11
PORT_NAMES = ("otlp-grpc", "otlp-http", "query-http", "query-grpc", "health")


class TracingBackendError(RuntimeError):
    """Jaeger could not be built or started; the message says what failed and where its log is."""


# ------------------------------------------------------------------------------------------ build


@dataclass(frozen=True)
class JaegerBinary:
    """The pinned release's binary in the cache (it exists once :func:`ensure_jaeger` returned)."""

    root: Path
    version: str = VERSION

    @property
    def path(self) -> Path:
        return self.root / "bin" / "jaeger"

    @property
    def marker(self) -> Path:
        return self.root / "built.json"

    def is_built(self) -> bool:
        if not (os.access(self.path, os.X_OK) and self.marker.is_file()):
            return False
        with contextlib.suppress(ValueError, OSError):
            return bool(json.loads(self.marker.read_text()).get("version") == self.version)
        return False

    def build_record(self) -> dict[str, Any]:
        """What ``built.json`` says: the version, the Go toolchain, the build's wall time."""
        record: dict[str, Any] = json.loads(self.marker.read_text())
        return record


def jaeger_root(version: str = VERSION) -> Path:
    return cache_root() / f"jaeger-{version}"


def _go() -> str:
    found = shutil.which("go") or shutil.which("go", path="/usr/local/go/bin")
    if found is None:
        raise TracingBackendError(
            f"`go` is not on PATH: Jaeger is compiled from its Go module ({MODULE}). "
            "Install Go >= 1.25 (it is also what the local control plane is built with) and retry."
        )
    return found


def ensure_jaeger(progress: Progress | None = None, version: str = VERSION) -> JaegerBinary:
    """Build Jaeger ``version`` unless the cache has it; cheap when it does."""
    say = progress or (lambda _line: None)
    binary = JaegerBinary(jaeger_root(version), version)
    if binary.is_built():
        return binary
    with install_lock(binary.root, f"Jaeger {version}", say):
        if not binary.is_built():  # whoever held the lock may have built it meanwhile
            _build(binary, say)
    return binary


def _module_dir(go: str, version: str, log: Path) -> Path:
    """The module's source in the module cache (downloaded and verified when missing)."""
    result = subprocess.run(
        [go, "mod", "download", "-json", f"{MODULE}@{version}"], capture_output=True, text=True, check=False
    )
    with log.open("a") as out:
        out.write(result.stdout + result.stderr)
    if result.returncode != 0:
        raise TracingBackendError(f"go mod download {MODULE}@{version} failed; log {log}\n{result.stderr[-2000:]}")
    directory = json.loads(result.stdout).get("Dir")
    if not directory:
        raise TracingBackendError(f"go mod download {MODULE}@{version} named no directory; log {log}")
    return Path(directory)


def _build(binary: JaegerBinary, say: Progress) -> None:
    go = _go()
    logs = build_logs_dir()
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"jaeger-{binary.version}.log"
    log.write_text("")
    say(f"building Jaeger {binary.version} from its Go module (cold: ~{COLD_BUILD_MINUTES} min; log {log})")
    started = time.monotonic()
    source = _module_dir(go, binary.version, log)
    (binary.root / "bin").mkdir(parents=True, exist_ok=True)
    partial = binary.root / "bin" / f".jaeger-{os.getpid()}"
    # -buildvcs=false: nothing to stamp (the module comes from the proxy). The module's own go.sum
    # verifies every dependency; GOFLAGS=-mod=readonly is Go's default for a main module.
    env = {**os.environ, "GOFLAGS": "-buildvcs=false"}
    command = [go, "build", "-trimpath", "-ldflags=-s -w", "-o", str(partial), PACKAGE]
    with log.open("a") as out:
        out.write(f"$ (cd {source} && {' '.join(command)})\n")
        out.flush()
        result = subprocess.run(command, cwd=source, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    seconds = time.monotonic() - started
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        tail = "".join(log.read_text().splitlines(keepends=True)[-15:])
        raise TracingBackendError(f"go build of Jaeger failed (exit {result.returncode}); log {log}\n{tail}")
    os.replace(partial, binary.path)
    go_version = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True).stdout.strip()
    record = {"version": binary.version, "go": go_version, "seconds": round(seconds, 1)}
    binary.marker.write_text(json.dumps(record) + "\n")
    say(f"  Jaeger {binary.version}: built in {seconds:.0f}s -> {binary.path}")


# ----------------------------------------------------------------------------------------- server


def render_config(ports: dict[str, int], host: str = "127.0.0.1", max_traces: int = 100_000) -> dict[str, Any]:
    """Jaeger's all-in-one configuration, trimmed: OTLP in, traces in memory, the query API out."""
    return {
        "service": {
            "extensions": ["jaeger_storage", "jaeger_query", "healthcheckv2"],
            "pipelines": {
                "traces": {"receivers": ["otlp"], "processors": ["batch"], "exporters": ["jaeger_storage_exporter"]}
            },
            "telemetry": {
                "resource": {"service.name": "jaeger"},
                "metrics": {"level": "none"},
                "logs": {"level": "warn"},
            },
        },
        "extensions": {
            "jaeger_query": {
                "storage": {"traces": "memstore"},
                "http": {"endpoint": f"{host}:{ports['query-http']}"},
                "grpc": {"endpoint": f"{host}:{ports['query-grpc']}"},
            },
            "jaeger_storage": {"backends": {"memstore": {"memory": {"max_traces": max_traces}}}},
            "healthcheckv2": {"use_v2": True, "http": {"endpoint": f"{host}:{ports['health']}"}},
        },
        "receivers": {
            "otlp": {
                "protocols": {
                    "grpc": {"endpoint": f"{host}:{ports['otlp-grpc']}"},
                    "http": {"endpoint": f"{host}:{ports['otlp-http']}"},
                }
            }
        },
        "processors": {"batch": {"timeout": "200ms"}},
        "exporters": {"jaeger_storage_exporter": {"trace_storage": "memstore"}},
    }


@dataclass
class JaegerServer:
    """Jaeger on loopback: OTLP/HTTP at :attr:`otlp_http_endpoint` (the module's
    ``tracing.otlpEndpoint``), OTLP/gRPC at :attr:`otlp_grpc_endpoint` (an engine's), the UI and the
    query API at :attr:`query_url`. ``argv()`` is the server in the foreground (``ai-inference dev
    up``); ``start()``/``stop()`` run it as a child of this process."""

    directory: Path
    binary: JaegerBinary
    ports: dict[str, int] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        for name in PORT_NAMES:
            if name not in self.ports:
                self.ports[name] = free_port(self.ports.values())

    @property
    def otlp_http_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['otlp-http']}"

    @property
    def otlp_grpc_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['otlp-grpc']}"

    @property
    def query_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['query-http']}"

    @property
    def config_file(self) -> Path:
        return self.directory / "jaeger.yaml"

    @property
    def log_file(self) -> Path:
        return self.directory / "jaeger.log"

    def write_config(self) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(yaml.safe_dump(render_config(self.ports), sort_keys=False))
        return self.config_file

    def argv(self) -> list[str]:
        return [str(self.binary.path), "--config", f"file:{self.config_file}"]

    def start(self) -> JaegerServer:
        self.write_config()
        log = self.log_file.open("ab")
        self.process = subprocess.Popen(
            self.argv(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.directory,
            start_new_session=True, preexec_fn=_die_with_parent,
        )  # fmt: skip
        log.close()
        return self

    def stop(self, timeout: float = 10) -> None:
        stop_group(self.process, signal.SIGTERM, timeout)

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_file.read_text(errors="replace")[-chars:] if self.log_file.is_file() else ""

    def ready(self, timeout: float = 60) -> None:
        """Until the query API answers (the receivers start before it)."""
        deadline = time.monotonic() + timeout
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise TracingBackendError(f"Jaeger exited with {self.process.returncode}: {self.log_tail()}")
            try:
                self.get("/api/services")
                return
            except (OSError, urllib.error.URLError) as err:
                if time.monotonic() > deadline:
                    raise TracingBackendError(
                        f"Jaeger's query API does not answer on {self.query_url} after {timeout:.0f}s ({err}): "
                        f"{self.log_tail()}"
                    ) from None
                time.sleep(0.3)

    # The query API ---------------------------------------------------------------------------

    def get(self, path: str, **params: Any) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.query_url}{path}{query}", timeout=10) as response:
            return json.loads(response.read())

    def services(self) -> list[str]:
        return list(self.get("/api/services").get("data") or [])

    def traces(self, service: str, limit: int = 100, **params: Any) -> list[dict[str, Any]]:
        """The service's traces (Jaeger's JSON: ``traceID``, ``spans``, ``processes``), newest first."""
        return list(self.get("/api/traces", service=service, limit=limit, **params).get("data") or [])

    def trace(self, trace_id: str) -> dict[str, Any] | None:
        data = self.get(f"/api/traces/{trace_id}").get("data") or []
        return data[0] if data else None


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the process that started it dies."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


@contextlib.contextmanager
def tracing_backend(directory: Path, progress: Progress | None = None) -> Iterator[JaegerServer]:
    """Jaeger (built if missing) for the block, its traces in memory; stopped on the way out."""
    server = JaegerServer(directory, ensure_jaeger(progress)).start()
    try:
        server.ready()
        yield server
    finally:
        server.stop()


def main() -> None:
    binary = ensure_jaeger(lambda line: print(line, file=sys.stderr, flush=True))
    print(binary.path)


if __name__ == "__main__":
    main()
