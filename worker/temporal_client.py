"""One way to reach Temporal, for the worker, the watcher and the CLI.

``temporal.tls`` turns TLS on: the server's certificate is verified against ``serverCAFile`` (else the
system's roots) under ``serverName`` (else the address's host), and ``clientCertFile`` with
``clientKeyFile`` is presented for mTLS. ``temporal.apiKeyFile`` holds a Temporal Cloud API key. Every
file is read when the connection is made (a renewed certificate or key takes a restart); the
contents of key files are never logged, nor put in an error.
"""

from __future__ import annotations

from pathlib import Path

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.service import TLSConfig

from inference_api.settings import ModuleSettings, TemporalSettings
from worker.tracing import temporal_interceptors


class TemporalCredentialsError(RuntimeError):
    """A file named by the temporal settings cannot be read (the message names the setting and the
    path, never what the file holds)."""


def _read(path: str | None, setting: str) -> bytes | None:
    if not path:
        return None
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise TemporalCredentialsError(f"{setting} {path} cannot be read: {err.strerror}") from None
    if not data.strip():
        raise TemporalCredentialsError(f"{setting} {path} is empty")
    return data


def tls_config(temporal: TemporalSettings) -> TLSConfig | bool:
    """What ``Client.connect(tls=...)`` gets: False for plain text, else the TLS block's files."""
    tls = temporal.tls
    if not tls.enabled:
        return False
    return TLSConfig(
        server_root_ca_cert=_read(tls.serverCAFile, "temporal.tls.serverCAFile"),
        client_cert=_read(tls.clientCertFile, "temporal.tls.clientCertFile"),
        client_private_key=_read(tls.clientKeyFile, "temporal.tls.clientKeyFile"),
        domain=tls.serverName or None,
    )


def api_key(temporal: TemporalSettings) -> str | None:
    """The Temporal Cloud API key of ``temporal.apiKeyFile`` (None when unset)."""
    data = _read(temporal.apiKeyFile, "temporal.apiKeyFile")
    return data.decode().strip() if data is not None else None


async def connect(settings: ModuleSettings) -> Client:
    """The process's client; with tracing on (``worker.tracing.setup_tracing`` ran), it carries the
    OpenTelemetry tracing interceptor, and so does a worker made from it."""
    temporal = settings.temporal
    return await Client.connect(
        temporal.address,
        namespace=temporal.namespace,
        data_converter=pydantic_data_converter,
        tls=tls_config(temporal),
        api_key=api_key(temporal),
        interceptors=temporal_interceptors(),
    )


def install_sdk_metrics(port: int | None, host: str = "0.0.0.0") -> None:
    """Serve the SDK runtime's Prometheus metrics (``temporal_*``: polls, task latencies, requests)
    on ``host:port``: the default runtime, so set it before any client connects. ``None``: off."""
    if port:
        telemetry = TelemetryConfig(metrics=PrometheusConfig(bind_address=f"{host}:{port}"))
        Runtime.set_default(Runtime(telemetry=telemetry), error_if_already_set=True)
