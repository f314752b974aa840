"""Fixtures of the metrics parts (a plugin of tests/conftest.py): promtool, Prometheus and the adapter.

Fixtures:
  promtool         (session) ``tests.metrics.promtool.Promtool`` over the pinned promtool
  rules_workdir    (function) a directory holding the chart's alert rules as ``ai-inference.rules.yaml``
  metrics_servers  (session) Prometheus + prometheus-adapter beside ``local_cluster``, the adapter
                   registered as ``v1beta1.custom.metrics.k8s.io``; Prometheus scrapes the stand-in
                   runtimes (file targets written from the API server) and this process's
                   ``/metrics`` (the in-process worker and observer of the end-to-end stands)

The binaries come from ``devstack.cluster.build`` (Go modules, cached): the fixtures are added to
``tests.fixtures.binaries.BINARY_FIXTURES``, so their tests are marked ``binaries`` and the tools are
built once before the first test, never skipped.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes.client import ApiClient
from prometheus_client import REGISTRY, start_http_server

from devstack.cluster.build import ensure_binaries
from devstack.cluster.launcher import LocalCluster, _free_ports
from devstack.metrics.servers import MetricsServers, stop_processes
from devstack.metrics.targets import TargetsWriter
from tests.chart.helm import Helm
from tests.fixtures.binaries import BINARY_FIXTURES
from tests.metrics.promtool import Promtool, rules_dir

# fixture -> the tools it needs (tests.fixtures.binaries marks and builds by this table)
BINARY_FIXTURES.update(
    {
        "promtool": ("prometheus",),
        "metrics_servers": ("prometheus", "prometheus-adapter", "helm"),
    }
)


@pytest.fixture(scope="session")
def promtool() -> Promtool:
    return Promtool(ensure_binaries(("prometheus",), progress=None).promtool)


@pytest.fixture
def rules_workdir(helm: Helm, tmp_path: Path) -> Path:
    rules_dir(helm.binary, tmp_path)
    return tmp_path


@dataclass
class MetricsStand:
    servers: MetricsServers
    cluster: LocalCluster
    writer: TargetsWriter

    @property
    def prometheus_url(self) -> str:
        return self.servers.prometheus_url

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.servers.state_dir / "logs" / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.is_file() else "(no log)"


@pytest.fixture(scope="session")
def metrics_servers(
    local_cluster: LocalCluster, kube_admin: ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MetricsStand]:
    state = tmp_path_factory.mktemp("metrics")
    # The module's /metrics: the worker and the observer of the stands run in this process and
    # register their series in prometheus-client's default registry, as in their own processes.
    module_port, prometheus_port, adapter_port = _free_ports(3)
    http_server, _ = start_http_server(module_port, addr="127.0.0.1", registry=REGISTRY)
    servers = MetricsServers(
        state_dir=state,
        kubeconfig=local_cluster.kubeconfig("admin"),
        prometheus_port=prometheus_port,
        adapter_port=adapter_port,
        module_targets=(f"127.0.0.1:{module_port}",),
    )
    processes: list[subprocess.Popen[bytes]] = []
    logs = state / "logs"
    logs.mkdir()

    def spawn(name: str, argv: list[str]) -> None:
        with (logs / f"{name}.log").open("ab") as log:
            processes.append(
                subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=state)
            )

    writer = TargetsWriter(kube_admin, servers.targets_file, interval_seconds=1.0)
    try:
        servers.start(spawn, local_cluster, lambda line: print(line, file=sys.stderr, flush=True))
        writer.start()
        yield MetricsStand(servers, local_cluster, writer)
    finally:
        writer.stop()
        # Unregistered first: an APIService without its server fails every client's discovery.
        servers.unregister(local_cluster)
        stop_processes(processes)
        http_server.shutdown()
