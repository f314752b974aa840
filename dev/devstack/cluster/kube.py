"""Small helpers over the official ``kubernetes`` client: server-side apply of plain dicts, waits."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes.client import ApiClient
from kubernetes.dynamic import DynamicClient

from activities.kube import server_side_apply

FIELD_MANAGER = "ai-inference-cluster"

T = TypeVar("T")


def dynamic_client(api: ApiClient, cache_file: Path | None = None) -> DynamicClient:
    # The discovery cache defaults to a shared /tmp file keyed by host; clusters come and go on
    # recycled ports, so each cluster keeps its own cache in its state dir.
    return DynamicClient(api, cache_file=str(cache_file) if cache_file else None)


def apply(
    dyn: DynamicClient,
    obj: dict[str, Any],
    *,
    field_manager: str = FIELD_MANAGER,
    subresource: str | None = None,
) -> Any:
    """Server-side apply one object as the local cluster's own field manager."""
    return server_side_apply(dyn, obj, field_manager, subresource)


def apply_all(dyn: DynamicClient, objects: Iterable[dict[str, Any]], **kwargs: Any) -> int:
    count = 0
    for obj in objects:
        apply(dyn, obj, **kwargs)
        count += 1
    return count


def load_manifests(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Every YAML document of the given files (directories recursively), sorted by path."""
    files: list[Path] = []
    for p in paths:
        files.extend(sorted(p.rglob("*.yaml")) if p.is_dir() else [p])
    docs: list[dict[str, Any]] = []
    for f in files:
        docs.extend(d for d in yaml.safe_load_all(f.read_text()) if d)
    return docs


def wait_until(check: Callable[[], T | None], *, timeout: float, what: str, interval: float = 0.25) -> T:
    """Poll ``check`` until it returns something truthy; exceptions count as "not yet"."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            result = check()
            if result:
                return result
        except Exception as e:  # any error while the server settles means "not yet"
            last_error = e
        if time.monotonic() > deadline:
            suffix = f" (last error: {last_error})" if last_error else ""
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{suffix}")
        time.sleep(interval)
