"""Catalog object readers that stand in for the API server in the catalog lookup's unit tests."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from activities.catalog import CatalogReadError
from inference_api.types import ModelKind


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
