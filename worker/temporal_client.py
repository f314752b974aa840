"""One way to reach Temporal, for the worker, the watcher and the CLI."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from inference_api.settings import ModuleSettings


async def connect(settings: ModuleSettings) -> Client:
    temporal = settings.temporal
    return await Client.connect(
        temporal.address,
        namespace=temporal.namespace,
        data_converter=pydantic_data_converter,
        tls=temporal.tlsEnabled,
    )


def install_sdk_metrics(port: int | None, host: str = "0.0.0.0") -> None:
    """Serve the SDK runtime's Prometheus metrics (``temporal_*``: polls, task latencies, requests)
    on ``host:port``: the default runtime, so set it before any client connects. ``None``: off."""
    if port:
        telemetry = TelemetryConfig(metrics=PrometheusConfig(bind_address=f"{host}:{port}"))
        Runtime.set_default(Runtime(telemetry=telemetry), error_if_already_set=True)
