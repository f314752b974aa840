"""The metrics parts in ``ai-inference dev up``: Prometheus, the adapter and the scrape-target writer.

Spawned like the stack's other processes (``DevStack.spawn``: pids in ``pids.json``, logs in
``logs/``, stopped by ``dev down``); their ports are kept in ``ports.json`` (``prometheus``,
``prometheus-adapter``). The APIService is (re)registered on every ``up``: a fresh cluster has none.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from devstack.metrics.servers import MetricsServers

Say = Callable[[str], None]


def start_metrics(stack: Any, cluster: Any, ports: dict[str, int], running: dict[str, int], say: Say) -> MetricsServers:
    """Start what is not running of Prometheus, the adapter and the target writer; register the adapter.

    ``ports`` must already hold ``worker-health`` and ``watcher-health`` (their ``/metrics`` is scraped).
    """
    from devstack.stack import free_port

    if "prometheus" not in running:
        ports["prometheus"] = free_port(9090)
    if "prometheus-adapter" not in running:
        ports["prometheus-adapter"] = free_port(6443)
    stack.ports_file.write_text(json.dumps(ports, indent=2))
    kubeconfig = cluster.kubeconfig("admin")
    servers = MetricsServers(
        state_dir=stack.state / "metrics",
        kubeconfig=kubeconfig,
        prometheus_port=ports["prometheus"],
        adapter_port=ports["prometheus-adapter"],
        module_targets=tuple(f"127.0.0.1:{ports[name]}" for name in ("worker-health", "watcher-health")),
        # The chart's alert windows are minutes long: scraping every few seconds is plenty.
        scrape_interval="5s",
        evaluation_interval="5s",
        relist_interval="15s",
    )

    servers.prepare()
    if "prometheus" not in running:
        stack.spawn("prometheus", servers.prometheus_argv())
    servers.wait_prometheus(60)
    if "prometheus-adapter" not in running:
        stack.spawn("prometheus-adapter", servers.adapter_argv())
    servers.register(cluster)
    servers.wait_available(cluster, 90)
    say(f"  prometheus {servers.prometheus_url}, custom metrics API registered")
    if "scrape-targets" not in running:
        stack.spawn(
            "scrape-targets",
            [
                sys.executable,
                "-m",
                "devstack.metrics.targets",
                "--kubeconfig",
                str(kubeconfig),
                "--out",
                str(servers.targets_file),
            ],
        )
    return servers
