"""The observer's former Secret informer alone, in a process of its own, so its memory can be read.

The observer no longer runs it (issue 33: no module identity lists or watches Secrets; the Secrets an
order owns are read by name); it stays for benchmarks/secret_flood.py, which compares the metadata-only
informer of then with the whole-object one before it.

``python -m tests.security.secret_informer_process --kubeconfig K --namespace NS --expect N [--full]``

Runs the observer's list+watch loop (``worker.observer.informer.ListWatch``) and cache
(``Informer``) for Secrets with the module's labels in one namespace, exactly as the observer runs
them (``--full``: as today's main did, whole objects, for the baseline). Prints one JSON line when
the first listing is in the cache (``{"phase": "synced", ...}``), then one when the cache holds
``--expect`` Secrets (``{"phase": "flooded", ...}``), each with the process's resident set
(VmRSS, KiB) after a garbage collection and the cache's count; then exits.
"""

from __future__ import annotations

import argparse
import gc
import json
import queue
import sys
import time
from pathlib import Path

from kubernetes import config as kube_config
from kubernetes.client import ApiClient, CoreV1Api

from worker.observer import informer as inf
from worker.observer.informer import MODULE_SELECTOR, Informer, InformerItem, Listed, ListWatch, Resource


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def report(phase: str, cache: Informer, started: float) -> None:
    gc.collect()
    line = {
        "phase": phase,
        "rss_kib": rss_kib(),
        "cached": len(cache.cache),
        "seconds": round(time.monotonic() - started, 1),
    }
    print(json.dumps(line), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--expect", type=int, required=True)
    parser.add_argument("--full", action="store_true", help="whole Secrets, as before the metadata-only informer")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args(argv)
    api: ApiClient = kube_config.new_client_from_config(config_file=args.kubeconfig)
    core = CoreV1Api(api)
    resource = Resource(
        inf.SECRET,
        lambda **kw: core.list_namespaced_secret(args.namespace, **kw),
        MODULE_SELECTOR,
        metadata_only=not args.full,
    )
    items: queue.Queue[InformerItem] = queue.Queue()
    watch = ListWatch(resource, items.put, timeout_seconds=60)
    cache = Informer(inf.SECRET)
    started = time.monotonic()
    watch.start()
    deadline = started + args.timeout
    phase = "synced"
    try:
        while time.monotonic() < deadline:
            try:
                item = items.get(timeout=1)
            except queue.Empty:
                continue
            if isinstance(item, Listed):
                cache.listed(item.items)
            else:
                cache.watched(item.type, item.obj)
            del item
            if phase == "synced" and cache.synced:
                report("synced", cache, started)
                phase = "flooded"
            if phase == "flooded" and len(cache.cache) >= args.expect:
                report("flooded", cache, started)
                return 0
    finally:
        watch.stop()
    print(json.dumps({"phase": "timeout", "cached": len(cache.cache)}), flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
