"""Shared pieces of the catalog tests: a fake object reader, settings, sample models."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import pytest

from activities.catalog import CatalogReadError
from inference_api.catalog_types import CATALOG_GROUP, CATALOG_VERSION, ModelFacts
from inference_api.settings import ModuleSettings
from inference_api.types import EndpointType, ModelKind


def make_settings(
    *,
    mode: str = "Enabled",
    transport: str = "Rest",
    base_url: str = "http://127.0.0.1:9",
    timeout: float = 2.0,
    requeue: float = 30.0,
) -> ModuleSettings:
    return ModuleSettings(
        catalog={"mode": mode},
        aiModels={
            "catalogTransport": transport,
            "catalogLookup": {
                "baseURL": base_url,
                "timeoutSeconds": timeout,
                "notReadyRequeueSeconds": requeue,
            },
        },
    )


QWEN_FACTS = ModelFacts(
    parameterCount="32B",
    quantization="awq",
    format="safetensors",
    endpointTypes=[EndpointType.CHAT],
    servedName="Qwen/Qwen2.5-32B-Instruct-AWQ",
)
QWEN_SOURCE = "hf://Qwen/Qwen2.5-32B-Instruct-AWQ"
E5_FACTS = ModelFacts(parameterCount="560M", format="safetensors", endpointTypes=[EndpointType.EMBEDDINGS])


def catalog_object(
    kind: ModelKind,
    name: str,
    namespace: str | None = None,
    *,
    phase: str = "Ready",
    facts: ModelFacts | None = None,
    source: str | None = None,
) -> dict[str, Any]:
    """A Model / ClusterModel as the API server returns it."""
    metadata: dict[str, Any] = {"name": name, "uid": f"uid-{name}"}
    if namespace is not None:
        metadata["namespace"] = namespace
    status: dict[str, Any] = {"phase": phase}
    if facts is not None:
        status["facts"] = facts.model_dump(mode="json", exclude_none=True)
    return {
        "apiVersion": f"{CATALOG_GROUP}/{CATALOG_VERSION}",
        "kind": kind.value,
        "metadata": metadata,
        "spec": {"source": source} if source else {},
        "status": status,
    }


class FakeReader:
    """CatalogObjectReader over a dict; records calls and the thread they ran on."""

    def __init__(self, objects: list[dict[str, Any]] | None = None, error: str | None = None) -> None:
        self.objects: dict[tuple[str, str, str | None], dict[str, Any]] = {}
        for obj in objects or []:
            self.add(obj)
        self.error = error
        self.calls: list[tuple[ModelKind, str, str | None]] = []
        self.threads: list[int] = []

    def add(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        self.objects[(obj["kind"], meta["name"], meta.get("namespace"))] = obj

    def read_model(self, kind: ModelKind, name: str, namespace: str | None) -> Mapping[str, Any] | None:
        self.calls.append((kind, name, namespace))
        self.threads.append(threading.get_ident())
        if self.error is not None:
            raise CatalogReadError(self.error)
        return self.objects.get((kind.value, name, namespace))


class ExplodingReader:
    """A reader for paths that must not read objects at all."""

    def read_model(self, kind: ModelKind, name: str, namespace: str | None) -> Mapping[str, Any] | None:
        raise AssertionError(f"the object reader was called for {kind} {name}")


@pytest.fixture
def fake_reader() -> FakeReader:
    return FakeReader(
        [
            catalog_object(ModelKind.CLUSTER_MODEL, "qwen2-5-32b-instruct-awq", facts=QWEN_FACTS, source=QWEN_SOURCE),
            catalog_object(ModelKind.MODEL, "e5-large", "team-a", facts=E5_FACTS),
            catalog_object(ModelKind.MODEL, "pending-model", "team-a", phase="Pending", facts=E5_FACTS),
        ]
    )
