"""The observer's memory across a tenant's flood of labelled Secrets: before and after.

    python -m benchmarks.secret_flood [--count 400] [--state-dir DIR]

Starts the local control plane (or uses the one AI_INFERENCE_TEST_KUBECONFIG_DIR names), then for
each informer — whole Secrets (the observer before the metadata-only informer) and metadata only
(as shipped) — runs the observer's Secret informer in a process of its own on a fresh namespace,
has the tenant ``ns-user`` create ``--count`` Secrets of 700 KB with the module's labels there, and
prints the process's resident set after its first listing and after the flood, and the ratio of the
two growths.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import uuid
from pathlib import Path

from kubernetes.client import CoreV1Api

from devstack.cluster.build import CONTROL_PLANE_TOOLS, ensure_binaries
from devstack.cluster.launcher import LocalCluster
from tests.security.flood import COUNT, SIZE, Memory, measure

REUSE_ENV = "AI_INFERENCE_TEST_KUBECONFIG_DIR"


def run(cluster: LocalCluster, count: int) -> list[Memory]:
    out = []
    for full in (True, False):
        namespace = cluster.create_namespace(f"secret-flood-{uuid.uuid4().hex[:6]}")
        try:
            with cluster.api_client("ns-user") as tenant:
                memory = measure(cluster.kubeconfig("admin"), namespace, tenant, full=full, count=count)
            out.append(memory)
            print(
                f"{memory.mode:24} RSS {memory.synced_kib / 1024:8.1f} MiB -> {memory.flooded_kib / 1024:8.1f} MiB"
                f"  (+{memory.growth_kib / 1024:.1f} MiB; {memory.cached} cached; flood {memory.flood_seconds:.0f} s)",
                flush=True,
            )
        finally:
            with cluster.api_client("admin") as admin:
                CoreV1Api(admin).delete_namespace(namespace)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=COUNT)
    parser.add_argument("--state-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    print(f"{args.count} Secrets of {SIZE // 1024} KB with the module's labels, made by a tenant", flush=True)
    reuse = os.environ.get(REUSE_ENV)
    if reuse:
        results = run(LocalCluster(Path(reuse)), args.count)
    else:
        with tempfile.TemporaryDirectory(prefix="secret-flood-") as tmp:
            cluster = LocalCluster(args.state_dir or Path(tmp), binaries=ensure_binaries(CONTROL_PLANE_TOOLS))
            cluster.up(progress=lambda line: print(line, file=sys.stderr, flush=True))
            try:
                results = run(cluster, args.count)
            finally:
                cluster.down()
    before, after = results
    ratio = before.growth_kib / max(after.growth_kib, 1)
    print(f"growth, whole / metadata only: {ratio:.0f}x ({before.growth_kib} KiB / {after.growth_kib} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
