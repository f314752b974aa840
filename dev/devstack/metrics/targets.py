"""File-based service discovery of the stand-in runtimes: one Prometheus target per placed pod.

In a cluster, the chart's PodMonitor makes Prometheus scrape every replica of an order on its
``http`` port, and prometheus-operator labels each series with the pod's ``namespace`` and
``pod`` — the labels the adapter maps a series to a pod by. kwok pods run nothing: the stand-in
fleet serves each order from one stand-in (``devstack.standins.fleet``), whose URL it writes on the
order's Service (``ai.deckhouse.io/stand-in-url``). This writer reads the API server — those
Services and the orders' pods — and writes a ``file_sd_configs`` file with one target per running
pod of each served order: the order's stand-in URL, labelled with that pod's namespace and name.
Every replica of an order thus reports the order's load (``POST /admin/load``), as replicas behind
one Service that share its queue would.

Dev/test only. ``python -m devstack.metrics.targets --kubeconfig K --out F`` runs it as a process
(the local stack); ``TargetsWriter(api, path).start()`` as a thread (the tests).
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import structlog
from kubernetes import config as kube_config
from kubernetes.client import ApiClient, CoreV1Api

from activities.builders.common import LABEL_MANAGED_BY, LABEL_ORDER, MANAGED_BY
from devstack.standins.fleet import PROBE_URL_ANNOTATION

log = structlog.get_logger(__name__)

RUNTIME_JOB = "ai-inference-runtime"


def _running(pod: Any) -> bool:
    return bool(pod.spec.node_name) and not pod.metadata.deletion_timestamp and pod.status.phase == "Running"


def scrape_targets(core: CoreV1Api) -> list[dict[str, Any]]:
    """The file_sd target groups of every running pod of every order a stand-in serves."""
    selector = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
    urls: dict[tuple[str, str], str] = {}
    for service in core.list_service_for_all_namespaces(label_selector=selector).items:
        url = (service.metadata.annotations or {}).get(PROBE_URL_ANNOTATION)
        if url:
            urls[(service.metadata.namespace, service.metadata.name)] = url
    groups = []
    for pod in core.list_pod_for_all_namespaces(label_selector=f"{selector},{LABEL_ORDER}").items:
        order = (pod.metadata.labels or {}).get(LABEL_ORDER, "")
        url = urls.get((pod.metadata.namespace, order))
        if url is None or not _running(pod):
            continue
        parts = urlsplit(url)
        groups.append(
            {
                "targets": [parts.netloc],
                "labels": {
                    "__metrics_path__": f"{parts.path.rstrip('/')}/metrics",
                    "namespace": pod.metadata.namespace,
                    "pod": pod.metadata.name,
                    "service": order,
                },
            }
        )
    return sorted(groups, key=lambda g: (g["labels"]["namespace"], g["labels"]["pod"]))


def write_targets(path: Path, groups: list[dict[str, Any]]) -> bool:
    """Write ``groups`` to ``path`` atomically (Prometheus may read it any time); False if unchanged."""
    text = json.dumps(groups, indent=1) + "\n"
    if path.is_file() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return True


class TargetsWriter:
    """Keeps ``path`` in step with the cluster every ``interval_seconds`` (a daemon thread)."""

    def __init__(self, api: ApiClient, path: Path, interval_seconds: float = 1.0) -> None:
        self.core = CoreV1Api(api)
        self.path = path
        self.interval_seconds = interval_seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def write_once(self) -> bool:
        return write_targets(self.path, scrape_targets(self.core))

    def start(self) -> TargetsWriter:
        if not self.path.exists():
            write_targets(self.path, [])
        self._thread = threading.Thread(target=self._loop, name="scrape-targets", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                if self.write_once():
                    log.info("scrape targets written", path=str(self.path))
            except Exception as err:  # the API server restarting must not end the writer
                log.warning("scrape targets not written", error=f"{type(err).__name__}: {err}")
            self._stop.wait(self.interval_seconds)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write Prometheus file_sd targets of the stand-in runtimes.")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--interval", type=float, default=2.0)
    args = parser.parse_args(argv)
    api = kube_config.new_client_from_config(config_file=args.kubeconfig, persist_config=False)
    writer = TargetsWriter(api, args.out, args.interval).start()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        writer.stop()


if __name__ == "__main__":
    main()
