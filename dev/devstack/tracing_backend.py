"""The local stack's tracing backend: Jaeger (v2, an OpenTelemetry Collector distribution) built
from its Go module, holding traces in memory, taking OTLP and serving its query API (docs/tracing.md).

Nothing serves Jaeger's binary on a registry this project can reach, so it is compiled with the Go
toolchain from the Go module proxy, once, into the cache (``devstack.go_build``:
``<cache>/jaeger-<version>/bin/jaeger`` of ``github.com/jaegertracing/jaeger/cmd/jaeger``). A cold build
is about :data:`COLD_BUILD_MINUTES` minutes on two cores
(docs/tracing.md has the measured figure). The UI of a source build is Jaeger's placeholder page
(the real one is a separate npm project); the query API (``/api/services``, ``/api/traces``) is whole.

``python -m devstack.tracing_backend`` builds (if missing) and prints the binary's path.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from devstack.go_build import GoBuildError, GoProgram, ensure_built
from devstack.process_group import log_tail, start_group, stop_group, until_answers
from devstack.temporal_server import free_port

Progress = Callable[[str], None]

MODULE = "github.com/jaegertracing/jaeger"
VERSION = "v1.75.0"
PACKAGE = "./cmd/jaeger"
COLD_BUILD_MINUTES = 11
PORT_NAMES = ("otlp-grpc", "otlp-http", "query-http", "query-grpc", "health")


class TracingBackendError(RuntimeError):
    """Jaeger could not be built or started; the message says what failed and where its log is."""


# ------------------------------------------------------------------------------------------ build


# The program in the cache (devstack.go_build: <cache>/jaeger-<version>/bin/jaeger).
JaegerBinary = GoProgram


def jaeger_program(version: str = VERSION) -> GoProgram:
    return GoProgram("jaeger", MODULE, version, PACKAGE, COLD_BUILD_MINUTES)


def ensure_jaeger(progress: Progress | None = None, version: str = VERSION) -> GoProgram:
    """Build Jaeger ``version`` unless the cache has it; cheap when it does."""
    try:
        return ensure_built(jaeger_program(version), progress)
    except GoBuildError as err:
        raise TracingBackendError(str(err)) from err


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
        self.process = start_group(self.argv(), self.log_file, self.directory, preexec_fn=_die_with_parent)
        return self

    def stop(self, timeout: float = 10) -> None:
        stop_group(self.process, signal.SIGTERM, timeout)

    def log_tail(self, chars: int = 3000) -> str:
        return log_tail(self.log_file, chars)

    def ready(self, timeout: float = 60) -> None:
        """Until the query API answers (the receivers start before it)."""

        def answered() -> bool:
            self.get("/api/services")
            return True

        until_answers(
            self.process, answered, "Jaeger", f"Jaeger's query API on {self.query_url}", self.log_file,
            TracingBackendError, timeout,
        )  # fmt: skip

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
