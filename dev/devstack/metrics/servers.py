"""Prometheus and prometheus-adapter beside a local cluster, the adapter registered as an APIService.

* **Prometheus** (``<state>/prometheus/``): scrapes the stand-in runtimes through the file-based
  targets of ``devstack.metrics.targets`` (job ``ai-inference-runtime``) and the module's own
  ``/metrics`` (the worker's and the observer's health ports, job ``ai-inference``), every
  ``scrape_interval``; evaluates the chart's alert rules (rendered from its PrometheusRule) every
  ``evaluation_interval``. No web UI assets are built; the HTTP API is what is used.
* **prometheus-adapter** (``<state>/adapter/``): serves ``custom.metrics.k8s.io`` from Prometheus with
  the rules the chart ships (``deploy/charts/ai-inference/files/prometheus-adapter-rules.yaml``), on
  loopback HTTPS with a serving certificate of its own CA. It authenticates the API server's proxied
  requests by the front-proxy CA the launcher configures (``extension-apiserver-authentication``)
  and authorizes them by SubjectAccessReview, as any extension API server does.
* **Registration**: the API server reaches the adapter through an ExternalName Service
  (``localhost``; kube-proxy does not exist here, so a ClusterIP would lead nowhere) and the
  APIService ``v1beta1.custom.metrics.k8s.io`` carrying the adapter's CA. The HPA controller then
  reads the pods metric ``vllm_num_requests_waiting`` like in any cluster.

Processes are started by a ``spawn`` callable (the local stack records their pids; the test fixture
keeps the ``Popen`` objects) and never inherit a terminal.
"""

from __future__ import annotations

import base64
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from devstack.cluster.build import METRICS_TOOLS, Binaries, ensure_binaries
from devstack.cluster.pki import create_ca, issue_certificate
from devstack.metrics.rules import ADAPTER_RULES, write_alert_rules
from devstack.metrics.targets import RUNTIME_JOB

METRICS_NAMESPACE = "ai-inference-metrics"
ADAPTER_SERVICE = "custom-metrics-apiserver"
APISERVICE = "v1beta1.custom.metrics.k8s.io"
MODULE_JOB = "ai-inference"

Spawn = Callable[[str, list[str]], Any]
Say = Callable[[str], None]


class MetricsError(RuntimeError):
    """Prometheus or the adapter did not come up; the message says which and why."""


@dataclass
class MetricsServers:
    """The two servers of one local cluster. ``module_targets``: ``host:port`` of the module's health
    ports (worker, observer) whose ``/metrics`` Prometheus scrapes."""

    state_dir: Path
    kubeconfig: Path
    prometheus_port: int
    adapter_port: int
    module_targets: Sequence[str] = ()
    scrape_interval: str = "2s"
    evaluation_interval: str = "2s"
    # How often the adapter lists the series it can serve: a new order's series appear after it.
    relist_interval: str = "5s"
    binaries: Binaries | None = field(default=None, repr=False)

    # ------------------------------------------------------------------ layout

    @property
    def prometheus_dir(self) -> Path:
        return self.state_dir / "prometheus"

    @property
    def adapter_dir(self) -> Path:
        return self.state_dir / "adapter"

    @property
    def targets_file(self) -> Path:
        """Where ``devstack.metrics.targets`` writes the stand-in runtimes' targets."""
        return self.prometheus_dir / "targets" / "runtimes.json"

    @property
    def rules_file(self) -> Path:
        return self.prometheus_dir / "ai-inference.rules.yaml"

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.prometheus_port}"

    # ---------------------------------------------------------------- prepare

    def prepare(self) -> None:
        """Build what is missing, write Prometheus' config and rules, the adapter's certificate."""
        self.binaries = ensure_binaries((*METRICS_TOOLS, "helm"))
        self.prometheus_dir.mkdir(parents=True, exist_ok=True)
        write_alert_rules(self.binaries.helm, self.rules_file)
        if not self.targets_file.exists():
            self.targets_file.parent.mkdir(parents=True, exist_ok=True)
            self.targets_file.write_text("[]\n")
        (self.prometheus_dir / "prometheus.yml").write_text(yaml.safe_dump(self.prometheus_config(), sort_keys=False))
        self._adapter_tls()

    def prometheus_config(self) -> dict[str, Any]:
        scrape_configs: list[dict[str, Any]] = [
            {
                "job_name": RUNTIME_JOB,
                "file_sd_configs": [{"files": [str(self.targets_file)], "refresh_interval": "2s"}],
            }
        ]
        if self.module_targets:
            scrape_configs.append({"job_name": MODULE_JOB, "static_configs": [{"targets": list(self.module_targets)}]})
        return {
            "global": {
                "scrape_interval": self.scrape_interval,
                "scrape_timeout": self.scrape_interval,
                "evaluation_interval": self.evaluation_interval,
            },
            "rule_files": [str(self.rules_file)],
            "scrape_configs": scrape_configs,
        }

    def _adapter_tls(self) -> tuple[Path, Path, Path]:
        directory = self.adapter_dir / "tls"
        cert, key, ca = directory / "adapter.crt", directory / "adapter.key", directory / "adapter-ca.crt"
        if not all(p.is_file() for p in (cert, key, ca)):
            authority = create_ca(directory, "adapter-ca")
            # The aggregator verifies <service>.<namespace>.svc, whatever address it dials.
            sans = (f"DNS:{ADAPTER_SERVICE}.{METRICS_NAMESPACE}.svc", "DNS:localhost", "IP:127.0.0.1")
            issue_certificate(authority, directory, "adapter", sans=sans)
        return cert, key, ca

    # ------------------------------------------------------------------ argv

    def _bin(self) -> Binaries:
        if self.binaries is None:
            raise MetricsError("prepare() first: the binaries and config are not ready")
        return self.binaries

    def prometheus_argv(self) -> list[str]:
        return [
            str(self._bin().prometheus),
            f"--config.file={self.prometheus_dir / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.prometheus_dir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.prometheus_port}",
            "--storage.tsdb.retention.time=2d",
            "--log.level=warn",
        ]

    def adapter_argv(self) -> list[str]:
        cert, key, _ = self._adapter_tls()
        kubeconfig = str(self.kubeconfig)
        return [
            str(self._bin().prometheus_adapter),
            f"--prometheus-url={self.prometheus_url}",
            f"--config={ADAPTER_RULES}",
            f"--metrics-relist-interval={self.relist_interval}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.adapter_port}",
            f"--tls-cert-file={cert}",
            f"--tls-private-key-file={key}",
            f"--lister-kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--v=1",
        ]

    # ----------------------------------------------------------------- start

    def start(self, spawn: Spawn, cluster: Any, say: Say, timeout: float = 90) -> None:
        """Start both servers with ``spawn(name, argv)`` and register the adapter; wait until the
        API server reports the APIService Available."""
        started = time.monotonic()
        self.prepare()
        spawn("prometheus", self.prometheus_argv())
        self.wait_prometheus(timeout)
        say(f"  prometheus ready on {self.prometheus_url} ({time.monotonic() - started:.1f}s)")
        spawn("prometheus-adapter", self.adapter_argv())
        self.register(cluster)
        self.wait_available(cluster, max(5.0, timeout - (time.monotonic() - started)))
        say(f"  {APISERVICE} available ({time.monotonic() - started:.1f}s)")

    def wait_prometheus(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.prometheus_url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.3)
        raise MetricsError(f"Prometheus is not ready on {self.prometheus_url} after {timeout:.0f}s")

    def registration_objects(self) -> list[dict[str, Any]]:
        _, _, ca = self._adapter_tls()
        return [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": METRICS_NAMESPACE}},
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": ADAPTER_SERVICE, "namespace": METRICS_NAMESPACE},
                "spec": {"type": "ExternalName", "externalName": "localhost"},
            },
            {
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": APISERVICE},
                "spec": {
                    "group": "custom.metrics.k8s.io",
                    "version": "v1beta1",
                    "service": {"namespace": METRICS_NAMESPACE, "name": ADAPTER_SERVICE, "port": self.adapter_port},
                    "caBundle": base64.b64encode(ca.read_bytes()).decode(),
                    "groupPriorityMinimum": 100,
                    "versionPriority": 100,
                },
            },
        ]

    def register(self, cluster: Any) -> None:
        """Apply the ExternalName Service and the APIService (the port changes with each start)."""
        cluster.apply(self.registration_objects())

    def wait_available(self, cluster: Any, timeout: float) -> None:
        from kubernetes.client import ApiregistrationV1Api

        deadline = time.monotonic() + timeout
        last = "not observed"
        with cluster.api_client("admin") as api:
            registration = ApiregistrationV1Api(api)
            while time.monotonic() < deadline:
                found = registration.read_api_service(APISERVICE)
                for condition in (found.status.conditions if found.status else None) or []:
                    if condition.type == "Available":
                        if condition.status == "True":
                            return
                        last = f"{condition.reason}: {condition.message}"
                time.sleep(0.5)
        raise MetricsError(f"APIService {APISERVICE} is not Available after {timeout:.0f}s ({last})")

    def unregister(self, cluster: Any) -> None:
        """Remove the APIService: with the adapter gone it would make discovery fail for every client."""
        from kubernetes.client import ApiregistrationV1Api
        from kubernetes.client.exceptions import ApiException

        with cluster.api_client("admin") as api:
            try:
                ApiregistrationV1Api(api).delete_api_service(APISERVICE)
            except ApiException as err:
                if err.status != 404:
                    raise


def prometheus_api(base_url: str, path: str, params: dict[str, str] | None = None, timeout: float = 5) -> Any:
    """GET ``/api/v1/<path>`` of Prometheus; the ``data`` of a success answer."""
    import json
    from urllib.parse import urlencode

    url = f"{base_url}/api/v1/{path}" + (f"?{urlencode(params)}" if params else "")
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body = json.loads(response.read())
    if body.get("status") != "success":
        raise MetricsError(f"Prometheus {path}: {body.get('error')}")
    return body["data"]


def custom_metric(cluster: Any, namespace: str, metric: str, selector: str | None = None) -> list[dict[str, Any]]:
    """``GET /apis/custom.metrics.k8s.io/v1beta1/namespaces/<ns>/pods/*/<metric>`` as the admin: what
    the HPA controller reads."""
    import json
    from urllib.parse import quote

    path = f"/apis/custom.metrics.k8s.io/v1beta1/namespaces/{namespace}/pods/*/{metric}"
    if selector:
        path += f"?labelSelector={quote(selector)}"
    ctx = ssl.create_default_context(cafile=str(cluster.pki.ca_cert))
    request = urllib.request.Request(
        cluster.server + path, headers={"Authorization": f"Bearer {cluster.token('admin')}"}
    )
    with urllib.request.urlopen(request, context=ctx, timeout=10) as response:
        items: list[dict[str, Any]] = json.loads(response.read())["items"]
    return items


def stop_processes(processes: Sequence[subprocess.Popen[bytes]], grace: float = 10) -> None:
    """SIGTERM, then SIGKILL after ``grace`` seconds: processes this module's caller started."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + grace
    for process in processes:
        try:
            process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
