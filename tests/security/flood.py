"""A tenant's flood of Secrets carrying the module's labels, and the observer's memory across it.

Shared by tests/security/test_secret_flood.py (the metadata-only informer, as shipped) and
benchmarks/secret_flood.py (that and the whole-object informer of before, side by side).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes.client import ApiClient, CoreV1Api

from activities.builders.common import LABEL_MANAGED_BY, LABEL_ORDER, MANAGED_BY

REPO_ROOT = Path(__file__).resolve().parents[2]
COUNT = 400
SIZE = 700 * 1024  # bytes of data in each Secret (its base64 in the API: about 933 KB)


def flood(api: ApiClient, namespace: str, count: int = COUNT, size: int = SIZE, threads: int = 4) -> float:
    """Create ``count`` Secrets of ``size`` bytes each, labelled as the module labels what it owns
    (managed-by and an order name), as the tenant ``api`` authenticates; seconds it took."""
    core = CoreV1Api(api)
    blob = base64.b64encode(os.urandom(size)).decode()

    def make(i: int) -> None:
        core.create_namespaced_secret(
            namespace,
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": f"flood-{i:04d}",
                    "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_ORDER: f"victim-{i % 7}"},
                },
                "data": {"blob": blob},
            },
            _request_timeout=120,
        )

    started = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(make, range(count)))
    return time.monotonic() - started


@dataclass(frozen=True)
class Memory:
    """The informer process's resident set (KiB) after its first listing and after the flood."""

    mode: str
    synced_kib: int
    flooded_kib: int
    cached: int
    flood_seconds: float

    @property
    def growth_kib(self) -> int:
        return self.flooded_kib - self.synced_kib


def measure(kubeconfig: Path, namespace: str, tenant: ApiClient, full: bool, count: int = COUNT) -> Memory:
    """Start the observer's Secret informer on ``namespace`` in its own process, flood the namespace
    as ``tenant``, and read the process's memory before and after."""
    command = [
        sys.executable,
        "-m",
        "tests.security.secret_informer_process",
        "--kubeconfig",
        str(kubeconfig),
        "--namespace",
        namespace,
        "--expect",
        str(count),
        *(["--full"] if full else []),
    ]
    with subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True) as process:
        assert process.stdout is not None
        stdout = process.stdout

        def report() -> dict[str, Any]:
            # The informer's own log lines go to stdout as well: the report is the JSON line.
            for line in stdout:
                if line.startswith("{"):
                    found: dict[str, Any] = json.loads(line)
                    return found
                print(line, end="", file=sys.stderr)
            return {}

        try:
            synced = report()
            assert synced.get("phase") == "synced", synced
            seconds = flood(tenant, namespace, count)
            flooded = report()
            assert flooded.get("phase") == "flooded", flooded
        finally:
            process.kill()
    return Memory(
        mode="whole Secrets (before)" if full else "metadata only (after)",
        synced_kib=int(synced["rss_kib"]),
        flooded_kib=int(flooded["rss_kib"]),
        cached=int(flooded["cached"]),
        flood_seconds=seconds,
    )
