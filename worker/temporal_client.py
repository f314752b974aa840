"""One way to reach Temporal, for the worker, the watcher and the CLI."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from inference_api.settings import ModuleSettings


async def connect(settings: ModuleSettings) -> Client:
    temporal = settings.temporal
    return await Client.connect(
        temporal.address,
        namespace=temporal.namespace,
        data_converter=pydantic_data_converter,
        tls=temporal.tlsEnabled,
    )
