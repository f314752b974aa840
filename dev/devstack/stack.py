"""``ai-inference dev up|down|env|status``: the whole module on this machine, on embedded defaults.

Up builds what is missing, starts the local control plane with simulated GPUs, the Temporal dev
server (SQLite, UI, the module's search attributes) on loopback behind the chart's mutual-TLS
terminator (nginx: every client presents a certificate of the stack's Temporal CA, the worker, the
watcher and the CLI each their own), the stand-in catalog, the planner, the
worker, the watcher and the stand-in fleet; installs the bundled and example classes; applies
the user guide's minimal order and waits until it is Ready. Every process runs in the
background with its pid and log in the state directory; ``down`` stops them all.

The planner is reached as in a cluster: over HTTPS, with a serving certificate from a CA of its
own (``planner-tls/`` in the state directory, made once with openssl), and a token the worker gets
like a projected one: a TokenRequest for the chart's worker ServiceAccount with the planner's
audience (``tokens/planner``, issued again on every ``up``). Only the stand-in catalog speaks plain
http, which its settings allow explicitly.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from devstack.cluster.inventory import FleetSize, fleet_inventory, save_fleet
from devstack.cluster.paths import REPO_ROOT, STATE_ENV
from devstack.cluster.pki import IssuedCertificate, create_ca, issue_certificate
from devstack.temporal_dev import temporal_binary
from devstack.temporal_tls import TemporalCredentials, TLSTerminator, nginx_binary
from inference_api.settings import PLANNER_AUDIENCE
from inference_api.types import GROUP, ORDERS, VERSION
from workflows.search_attributes import dev_server_flags

Say = Callable[[str], None]

MINIMAL_ORDER = REPO_ROOT / "deploy" / "examples" / "order-minimal.yaml"
# The second order: the local tiny model, served by the real engine (devstack.standins.engine).
ENGINE_ORDER = REPO_ROOT / "deploy" / "dev" / "order-tiny-chat.yaml"
# An engine starts in 80-130 s on two busy cores, after the minimal order is Ready.
ENGINE_READY_SECONDS = 600
CATALOG_FIXTURES = REPO_ROOT / "deploy" / "dev" / "catalog-models.yaml"
CHART = REPO_ROOT / "deploy" / "charts" / "ai-inference"
EXAMPLES = REPO_ROOT / "deploy" / "examples"
# The chart's identity of the worker, bound to the chart's worker ClusterRole (installed in step 5).
MODULE_NAMESPACE = "d8-ai-inference"
WORKER_SERVICE_ACCOUNT = "ai-inference-worker"
WORKER_ROLE = "d8:ai-inference:worker"
# A TokenRequest's lifetime: issued again by every `up`; the worker reads the file when it changes.
PLANNER_TOKEN_SECONDS = 7 * 24 * 3600


def dev_state_dir() -> Path:
    root = os.environ.get(STATE_ENV)
    base = Path(root).expanduser() if root else Path.home() / ".local" / "state" / "ai-inference"
    return base / "dev"


def free_port(preferred: int | None = None) -> int:
    for candidate in ([preferred] if preferred else []) + [0]:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", candidate or 0))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise RuntimeError("no free loopback port")


def wait_port(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f}s")


def catalog_objects(path: Path = CATALOG_FIXTURES) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The stand-in catalog's models (``deploy/dev/catalog-models.yaml``) as ``Model`` /
    ``ClusterModel`` objects, and their status (written through /status, as ai-models writes it)."""
    from inference_api.catalog_types import CATALOG_GROUP, CATALOG_VERSION

    objects, statuses = [], []
    for model in yaml.safe_load(path.read_text())["models"]:
        metadata = {"name": model["name"]}
        if model.get("namespace"):
            metadata["namespace"] = model["namespace"]
        head = {"apiVersion": f"{CATALOG_GROUP}/{CATALOG_VERSION}", "kind": model["kind"], "metadata": metadata}
        objects.append({**head, "spec": {"source": model.get("source", "")}})
        phase = "Ready" if model.get("ready", True) else "Pending"
        statuses.append({**head, "status": {"phase": phase, "facts": model.get("facts", {})}})
    return objects, statuses


@dataclass
class DevStack:
    state: Path

    @property
    def pids(self) -> Path:
        return self.state / "pids.json"

    @property
    def ports_file(self) -> Path:
        return self.state / "ports.json"

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    def cluster(self) -> Any:
        from devstack.cluster.launcher import LocalCluster

        return LocalCluster(self.state / "cluster")

    def _load(self, path: Path) -> dict[str, Any]:
        return json.loads(path.read_text()) if path.is_file() else {}

    def running(self) -> dict[str, int]:
        alive = {}
        for name, pid in self._load(self.pids).items():
            try:
                os.kill(pid, 0)
            except OSError:
                continue
            alive[name] = pid
        return alive

    def ports(self) -> dict[str, int]:
        return self._load(self.ports_file)

    @property
    def planner_token_file(self) -> Path:
        return self.state / "tokens" / "planner"

    def planner_tls(self) -> IssuedCertificate:
        """The planner's serving certificate (localhost, 127.0.0.1) and its CA, made once."""
        directory = self.state / "planner-tls"
        issued = IssuedCertificate(directory / "planner.crt", directory / "planner.key", directory / "planner-ca.crt")
        if all(path.is_file() for path in (issued.cert, issued.key, issued.ca)):
            return issued
        ca = create_ca(directory, "planner-ca")
        return issue_certificate(ca, directory, "planner", sans=("DNS:localhost", "IP:127.0.0.1"))

    def issue_planner_token(self, cluster: Any) -> Path:
        """The worker's token for the planner: the chart's worker ServiceAccount (made here, bound to
        the chart's worker role), a TokenRequest with the planner's audience, written owner-only."""
        from kubernetes.client import AuthenticationV1TokenRequest, CoreV1Api, V1TokenRequestSpec

        cluster.create_namespace(MODULE_NAMESPACE, users=())
        cluster.apply(
            [
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": WORKER_SERVICE_ACCOUNT, "namespace": MODULE_NAMESPACE},
                },
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": WORKER_ROLE},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": WORKER_ROLE},
                    "subjects": [
                        {"kind": "ServiceAccount", "name": WORKER_SERVICE_ACCOUNT, "namespace": MODULE_NAMESPACE}
                    ],
                },
            ]
        )
        with cluster.api_client("admin") as api:
            issued = CoreV1Api(api).create_namespaced_service_account_token(
                WORKER_SERVICE_ACCOUNT,
                MODULE_NAMESPACE,
                AuthenticationV1TokenRequest(
                    spec=V1TokenRequestSpec(audiences=[PLANNER_AUDIENCE], expiration_seconds=PLANNER_TOKEN_SECONDS)
                ),
            )
        path = self.planner_token_file
        path.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(path.parent, 0o700)
        # A new file swapped in, as the kubelet does: a reader never sees half a token.
        fresh = path.with_suffix(".new")
        fresh.touch(mode=0o600)
        fresh.write_text(str(issued.status.token))
        fresh.replace(path)
        return path

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> int:
        self.logs.mkdir(parents=True, exist_ok=True)
        log = (self.logs / f"{name}.log").open("ab")
        process = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            cwd=REPO_ROOT,
            start_new_session=True,
        )
        pids = self._load(self.pids)
        pids[name] = process.pid
        self.pids.write_text(json.dumps(pids, indent=2))
        return process.pid

    def env(self) -> dict[str, str]:
        ports = self.ports()
        from devstack.cluster.build import Binaries

        kubectl_dir = Binaries.pinned().kubectl.parent
        # The project's own commands (ai-inference, kubectl-ai_inference for `kubectl ai-inference`,
        # the Temporal CLI, hf) live beside the interpreter that runs this one: .venv/bin.
        scripts_dir = sysconfig.get_path("scripts")
        credentials = self.temporal_credentials()
        return {
            "PATH": f"{scripts_dir}:{kubectl_dir}:{os.environ.get('PATH', '')}",
            "KUBECONFIG": str(self.cluster().kubeconfig("admin")),
            # Temporal over mTLS with the CLI's client certificate: the temporal CLI's variables…
            "TEMPORAL_ADDRESS": f"127.0.0.1:{ports.get('temporal', 7233)}",
            **credentials.cli_env("cli"),
            # …and the same for the module's own commands (ai-inference replan).
            "AI_INFERENCE_TEMPORAL__ADDRESS": f"127.0.0.1:{ports.get('temporal', 7233)}",
            **credentials.module_env("cli"),
            # `ai-inference plan --source ai-models` asks the stack's stand-in catalog, as the worker does.
            **(
                {
                    "AI_INFERENCE_AIMODELS__CATALOGLOOKUP__BASEURL": f"http://127.0.0.1:{ports['catalog']}",
                    "AI_INFERENCE_AIMODELS__CATALOGLOOKUP__ALLOWINSECUREHTTP": "true",
                }
                if "catalog" in ports
                else {}
            ),
            # The Ingress controller's HTTPS port (docs/local-run.md, "The request's edge").
            **({"INGRESS_PORT": str(ports["ingress-https"])} if "ingress-https" in ports else {}),
        }

    def temporal_credentials(self) -> TemporalCredentials:
        """The CA of the stack's Temporal terminator, its server and client certificates (made once);
        with the production Temporal (``dev up --temporal postgres``), the CA of its own mTLS."""
        if self.temporal_kind() == "postgres":
            from devstack.temporal_server import production_credentials

            return production_credentials(self.state / "temporal-server" / "pki")
        return TemporalCredentials.ensure(self.state / "temporal-tls")

    @property
    def temporal_kind_file(self) -> Path:
        return self.state / "temporal-kind"

    def temporal_kind(self) -> str:
        """Which Temporal the stack runs: ``dev`` (the embedded dev server) or ``postgres``."""
        return self.temporal_kind_file.read_text().strip() if self.temporal_kind_file.is_file() else "dev"

    def production_temporal(self, ports: dict[str, int]) -> Any:
        """The production Temporal of this stack (``devstack.temporal_server``): PostgreSQL and the
        Temporal server on the ports recorded in ``ports`` (made there when missing), the frontend's
        as ``ports["temporal"]``, the port every client is given."""
        from devstack.postgres import PostgresServer, data_dir_for
        from devstack.temporal_server import PORT_NAMES, ProductionTemporal, ServerBinaries, server_root
        from devstack.temporal_server import free_port as low_port  # its ports must be under 32768

        for name in ("temporal-postgres", *(f"temporal-{n}" for n in PORT_NAMES)):
            if name not in ports:
                ports[name] = low_port(ports.values())
        ports["temporal"] = ports["temporal-frontend"]
        postgres = PostgresServer(data_dir_for(self.state), port=ports["temporal-postgres"])
        server_ports = {name: ports[f"temporal-{name}"] for name in PORT_NAMES}
        return ProductionTemporal(self.state / "temporal-server", postgres, ServerBinaries(server_root()), server_ports)

    def start_production_temporal(self, running: dict[str, int], ports: dict[str, int], say: Say) -> None:
        """PostgreSQL (initdb once) and the Temporal server built from its Go module (once, cached),
        whichever is not ``running``; the schemas set up by temporal-sql-tool, the namespace registered."""
        import asyncio

        from devstack.temporal_server import ensure_server_binaries

        ensure_server_binaries(say)
        for stale in ("temporal-upstream", "temporal-ui"):  # the dev server's, from an earlier `up`
            ports.pop(stale, None)
        server = self.production_temporal(ports)
        if "postgres" not in running:
            server.postgres.ensure_initialized(say)
            self.spawn("postgres", server.postgres.argv())
            server.postgres.wait_ready()
        if "temporal" not in running:
            server.prepare(say)
            self.spawn("temporal", server.argv())
        asyncio.run(server.ready(say=say))

    def temporal_terminator(self, ports: dict[str, int]) -> TLSTerminator:
        """nginx on ports["temporal"] (mTLS), in front of the dev server on ports["temporal-upstream"]."""
        upstream = f"127.0.0.1:{ports['temporal-upstream']}"
        return TLSTerminator(self.state / "temporal-tls" / "nginx", self.temporal_credentials(), upstream,
                             ports["temporal"])  # fmt: skip

    def start_temporal(self, running: dict[str, int], ports: dict[str, int]) -> None:
        """The Temporal dev server and its mTLS terminator, whichever is not ``running``; records their
        ports in ``ports`` (``temporal``: the terminator's, given to every client; ``temporal-upstream``:
        the dev server's, on loopback, for the terminator only)."""
        # As in the chart: the dev server on a loopback port only the terminator (nginx) uses; every
        # client is given the terminator's port and a client certificate (dev/devstack/temporal_tls.py).
        nginx_binary()  # missing: a clear error before anything starts
        if "temporal" in running and "temporal-upstream" not in ports:
            raise RuntimeError(
                "the running Temporal dev server predates its mTLS terminator: `ai-inference dev down` first"
            )
        if "temporal" not in running and "temporal-tls" in running:
            # A new dev server gets a new loopback port: the terminator is started again in front of it.
            self.stop_process("temporal-tls", running.pop("temporal-tls"))
        if "temporal" not in running:
            ports["temporal-upstream"] = free_port()
            ports["temporal-ui"] = free_port(8233)
            self.spawn(
                "temporal",
                [
                    str(temporal_binary()),
                    "server",
                    "start-dev",
                    "--db-filename",
                    str(self.state / "temporal.db"),
                    "--ip",
                    "127.0.0.1",
                    "--port",
                    str(ports["temporal-upstream"]),
                    "--ui-port",
                    str(ports["temporal-ui"]),
                    *dev_server_flags(),
                ],
            )
        if "temporal-tls" not in running:
            ports["temporal"] = free_port(7233)
            terminator = self.temporal_terminator(ports)
            terminator.write_config()
            terminator.check()
            self.spawn("temporal-tls", terminator.argv())

    # ------------------------------------------------------------------ up

    def up(
        self,
        say: Say,
        wait_ready: bool = True,
        timeout: float = 300,
        fleet: FleetSize | None = None,
        replicas: int = 1,
        temporal: str = "dev",
    ) -> None:
        """``fleet``: the simulated fleet's size (None: as the cluster has it, the default fleet at first).
        ``replicas``: workers and observers of each (more than one: the observers elect a leader on a
        Lease in the module's namespace, as the chart runs them).
        ``temporal``: ``dev`` (the embedded dev server) or ``postgres`` (devstack.temporal_server)."""
        started = time.monotonic()
        self.state.mkdir(parents=True, exist_ok=True)
        if temporal != self.temporal_kind() and {"temporal", "postgres"} & set(self.running()):
            raise RuntimeError(
                f"the stack runs the {self.temporal_kind()} Temporal: `ai-inference dev down` first "
                f"to switch to {temporal}"
            )
        self.temporal_kind_file.write_text(temporal + "\n")
        from devstack.cluster.build import CONTROL_PLANE_TOOLS, METRICS_TOOLS, ensure_binaries

        say("[1/6] control-plane binaries and the CPU engine (built and installed once, cached)")
        ensure_binaries((*CONTROL_PLANE_TOOLS, *METRICS_TOOLS, "helm"), progress=say)
        from devstack.vllm_cpu_env import ensure_vllm_cpu_env

        ensure_vllm_cpu_env(progress=say)
        from devstack.tracing_backend import ensure_jaeger

        ensure_jaeger(progress=say)  # the tracing backend (docs/tracing.md)
        from devstack.ingress_controller import ensure_traefik

        ensure_traefik(progress=say)  # the Ingress controller (docs/local-run.md, "The request's edge")
        cluster = self.cluster()
        say("[2/6] local Kubernetes control plane with simulated GPUs")
        if fleet is not None:
            save_fleet(cluster.state_dir, fleet)
            say(f"  simulated fleet: {fleet.describe()}")
        if not cluster.up(progress=say) and fleet is not None:
            from devstack.cluster import kube
            from devstack.cluster.launcher import apply_inventory

            with cluster.api_client("admin") as api:
                dyn = kube.dynamic_client(api, cluster.state_dir / "discovery-admin.json")
                apply_inventory(dyn, fleet_inventory(cluster.state_dir))
        kubeconfig = str(cluster.kubeconfig("admin"))
        running = self.running()
        ports = self.ports()
        if temporal == "postgres":
            say("[3/6] Temporal server on PostgreSQL (its own mTLS), stand-in catalog, planner")
            self.start_production_temporal(running, ports, say)
        else:
            say("[3/6] Temporal dev server behind its mTLS terminator, stand-in catalog, planner")
            self.start_temporal(running, ports)
        self.start_tracing(running, ports)
        self.start_ingress(cluster, running, ports)
        if "catalog" not in running:
            ports["catalog"] = free_port()
            self.spawn(
                "catalog",
                [
                    sys.executable,
                    "-m",
                    "devstack.standins.catalog_service",
                    "--port",
                    str(ports["catalog"]),
                    "--fixtures",
                    str(CATALOG_FIXTURES),
                ],
            )
        if "planner" not in running:
            ports["planner"] = free_port()
            tls = self.planner_tls()
            self.spawn(
                "planner",
                [
                    sys.executable,
                    "-m",
                    "worker.cli",
                    "planner",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(ports["planner"]),
                    "--kubeconfig",
                    kubeconfig,
                    "--tls-cert-file",
                    str(tls.cert),
                    "--tls-key-file",
                    str(tls.key),
                ],
                self.tracing_env(ports),
            )
        self.ports_file.write_text(json.dumps(ports, indent=2))
        for name in ("temporal-upstream", "temporal", "catalog", "planner", "jaeger-query-http", "ingress-https"):
            if name in ports:  # no upstream with the production Temporal: its frontend speaks TLS itself
                wait_port(ports[name], timeout=120)
        self.issue_planner_token(cluster)
        env = self.module_env(ports)
        say("[4/6] worker, watcher, stand-in runtimes, Prometheus and the custom metrics adapter")
        self.start_module(cluster, running, ports, env, replicas)
        if "fleet" not in running:
            fleet_argv = [sys.executable, "-m", "worker.cli", "dev", "fleet", "--kubeconfig", kubeconfig]
            self.spawn("fleet", [*fleet_argv, "--engine-root", str(self.logs / "engines")], env)
        from devstack.metrics.dev import start_metrics

        start_metrics(self, cluster, ports, running, say)
        say("[5/6] bundled class, example classes, priority classes, the minimal order and the tiny-chat order")
        self.install_manifests(cluster)
        say(f"stack up in {time.monotonic() - started:.0f}s; logs in {self.logs}")
        if wait_ready:
            say("[6/6] waiting for support/support-llm to be Ready")
            self.wait_ready(cluster, "support", "support-llm", timeout, say)
            say("  and for support/tiny-chat on the real engine (vllm-cpu; its start takes minutes on a CPU)")
            self.wait_ready(
                cluster, "support", "tiny-chat", max(timeout, ENGINE_READY_SECONDS), say, self.print_completion
            )

    def start_module(
        self, cluster: Any, running: dict[str, int], ports: dict[str, int], env: dict[str, str], replicas: int = 1
    ) -> list[str]:
        """The workers and observers not running yet: ``worker`` and ``watcher``, and with ``replicas``
        more, ``worker-1``, ``watcher-1``, ... (each its own health port in ``ports``, its name as
        ``POD_NAME``). With more than one, the observers elect a leader on a Lease in the module's
        namespace, as the chart runs them. Returns the names of the module's processes."""
        kubeconfig = str(cluster.kubeconfig("admin"))
        module = [f"{base}{f'-{i}' if i else ''}" for i in range(max(1, replicas)) for base in ("worker", "watcher")]
        if replicas > 1:
            cluster.create_namespace(MODULE_NAMESPACE, users=())  # the observers' Lease lives there
        for name in module:
            if name not in running or f"{name}-health" not in ports:
                ports[f"{name}-health"] = free_port()  # its /metrics, scraped by Prometheus (the first of each)
            if name in running:
                continue
            base = name.split("-", 1)[0]
            command = "watch" if base == "watcher" else "worker"
            argv = [sys.executable, "-m", "worker.cli", command, "--kubeconfig", kubeconfig]
            # Each process its own Temporal client certificate.
            replica = {**self.temporal_credentials().module_env(base), "POD_NAME": name}
            if base == "watcher" and replicas > 1:
                replica["AI_INFERENCE_OBSERVER__LEADERELECTION__ENABLED"] = "true"
            self.spawn(name, [*argv, "--health-port", str(ports[f"{name}-health"])], {**env, **replica})
        return module

    def start_tracing(self, running: dict[str, int], ports: dict[str, int]) -> None:
        """Jaeger (``devstack.tracing_backend``), unless it runs: OTLP in, its UI and query API on
        ``ports['jaeger-query-http']``; the module's processes send it their spans (``tracing_env``)."""
        from devstack.tracing_backend import PORT_NAMES as JAEGER_PORTS
        from devstack.tracing_backend import JaegerServer, ensure_jaeger

        if "jaeger" in running:
            return
        server = JaegerServer(self.state / "jaeger", ensure_jaeger())
        for name in JAEGER_PORTS:
            ports[f"jaeger-{name}"] = server.ports[name]
        server.write_config()
        self.spawn("jaeger", server.argv())

    def start_ingress(self, cluster: Any, running: dict[str, int], ports: dict[str, int]) -> None:
        """Traefik (``devstack.ingress_controller``), unless it runs: the Ingresses of its IngressClass
        (the module's ``exposure.ingressClassName``, ``module_env``) over HTTPS on
        ``ports['ingress-https']``."""
        from devstack.ingress_controller import IngressController, ensure_ingress_class, ensure_traefik

        if "ingress" in running:
            return
        with cluster.api_client("admin") as api:
            ensure_ingress_class(api)
        kubeconfig = cluster.kubeconfig("admin")
        controller = IngressController(self.state / "ingress", kubeconfig, ensure_traefik())
        ports["ingress-https"] = controller.https_port
        self.spawn("ingress", controller.argv(), {"KUBECONFIG": str(kubeconfig)})

    def tracing_env(self, ports: dict[str, int]) -> dict[str, str]:
        """A module process's tracing settings: its spans to the stack's Jaeger."""
        if "jaeger-otlp-http" not in ports:
            return {}
        return {"AI_INFERENCE_TRACING__OTLPENDPOINT": f"http://127.0.0.1:{ports['jaeger-otlp-http']}"}

    def module_env(self, ports: dict[str, int]) -> dict[str, str]:
        from devstack.ingress_controller import INGRESS_CLASS
        from devstack.standins.fleet import PROBE_URL_ANNOTATION

        return {
            **self.tracing_env(ports),
            "AI_INFERENCE_TEMPORAL__ADDRESS": f"127.0.0.1:{ports['temporal']}",
            "AI_INFERENCE_PLANNER__BASEURL": f"https://127.0.0.1:{ports['planner']}",
            "AI_INFERENCE_PLANNER__CAFILE": str(self.planner_tls().ca),
            "AI_INFERENCE_PLANNER__TOKENFILE": str(self.planner_token_file),
            "AI_INFERENCE_AIMODELS__CATALOGLOOKUP__BASEURL": f"http://127.0.0.1:{ports['catalog']}",
            # The stand-in catalog is plain http: allowed here, and only here, explicitly.
            "AI_INFERENCE_AIMODELS__CATALOGLOOKUP__ALLOWINSECUREHTTP": "true",
            "AI_INFERENCE_HEALTH__PROBETARGETANNOTATION": PROBE_URL_ANNOTATION,
            # The stack's Ingress controller serves this IngressClass (start_ingress).
            "AI_INFERENCE_EXPOSURE__INGRESSCLASSNAME": INGRESS_CLASS,
            "AI_INFERENCE_HEALTH__INTERVALSECONDS": "30",
            "AI_INFERENCE_HEALTH__SERVERETRYSECONDS": "1",
        }

    def rendered_chart_objects(self) -> list[dict[str, Any]]:
        """The chart's cluster-level policy objects (the bundled class, roles), as Helm renders them."""
        from devstack.cluster.build import ensure_binaries

        helm = ensure_binaries(("helm",), progress=None).helm
        out = subprocess.run(
            [
                str(helm),
                "template",
                "ai-inference",
                str(CHART),
                "--namespace",
                "d8-ai-inference",
                "--kube-version",
                "1.34.4",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        keep = {"InferenceServiceClass", "ClusterRole", "PriorityClass"}
        return [d for d in yaml.safe_load_all(out) if d and d.get("kind") in keep]

    def install_manifests(self, cluster: Any) -> None:
        objects = self.rendered_chart_objects()
        for path in [*sorted(EXAMPLES.glob("*.yaml")), ENGINE_ORDER]:
            objects += [d for d in yaml.safe_load_all(path.read_text()) if d]
        namespaces = {o["metadata"]["namespace"] for o in objects if o.get("metadata", {}).get("namespace")}
        for namespace in sorted(namespaces):
            cluster.create_namespace(namespace, users=("ns-user",))
        cluster.apply(objects)
        # The catalog's models as the ai-models module publishes them beside its lookup service, so
        # `kubectl get clustermodels` lists what the stand-in catalog answers for.
        models, statuses = catalog_objects()
        cluster.apply(models)
        cluster.apply(statuses, subresource="status")

    def wait_ready(
        self,
        cluster: Any,
        namespace: str,
        name: str,
        timeout: float,
        say: Say,
        show: Callable[[Any, str, str, dict[str, Any], Say], None] | None = None,
    ) -> None:
        from kubernetes.client import CustomObjectsApi

        api = CustomObjectsApi(cluster.api_client("admin"))
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            obj = api.get_namespaced_custom_object(GROUP, VERSION, namespace, ORDERS, name)
            status = obj.get("status") or {}
            now = (status.get("phase"), status.get("reason"))
            if now != last:
                say(f"  {namespace}/{name}: {now[0] or 'no status yet'}" + (f" ({now[1]})" if now[1] else ""))
                last = now
            if status.get("phase") == "Ready":
                (show or self.print_endpoint)(cluster, namespace, name, status, say)
                return
            time.sleep(1)
        raise RuntimeError(f"{namespace}/{name} is not Ready after {timeout:.0f}s: see `ai-inference dev status`")

    def print_endpoint(self, cluster: Any, namespace: str, name: str, status: dict[str, Any], say: Say) -> None:
        from kubernetes.client import CoreV1Api

        from devstack.standins.fleet import PROBE_URL_ANNOTATION

        core = CoreV1Api(cluster.api_client("admin"))
        service = core.read_namespaced_service(name, namespace)
        local_url = (service.metadata.annotations or {}).get(PROBE_URL_ANNOTATION, "")
        ports = self.ports()
        say("")
        say(f"Ready: {namespace}/{name} serves {status.get('model', {}).get('endpointType')} ")
        say(f"  status.endpoint.url: {status.get('endpoint', {}).get('url')} (in a real cluster)")
        say(f"  locally, the stand-in runtime behind it: {local_url}")
        say("")
        say(f'  eval "$({sys.argv[0]} dev env)"')
        say(
            f"  TOKEN=$(kubectl get secret {status.get('authSecretName')} -n {namespace} -o jsonpath='{{.data.token}}' "
            "| base64 -d)"
        )
        say(f'  curl -sS {local_url}/v1/models -H "Authorization: Bearer $TOKEN"')
        say("")
        if "temporal-ui" in ports:
            say(f"  Temporal UI: http://127.0.0.1:{ports['temporal-ui']}/namespaces/default/workflows")
        if "jaeger-query-http" in ports:
            query = f"http://127.0.0.1:{ports['jaeger-query-http']}"
            say(f"  traces (Jaeger, docs/tracing.md): {query}/api/traces?service=ai-inference-watch&limit=20")

    def print_completion(self, cluster: Any, namespace: str, name: str, status: dict[str, Any], say: Say) -> None:
        """The curl of a chat completion the real engine behind the order answers (generated tokens)."""
        from kubernetes.client import AppsV1Api, CoreV1Api

        from devstack.standins.fleet import PROBE_URL_ANNOTATION

        api = cluster.api_client("admin")
        service = CoreV1Api(api).read_namespaced_service(name, namespace)
        local_url = (service.metadata.annotations or {}).get(PROBE_URL_ANNOTATION, "")
        command = AppsV1Api(api).read_namespaced_stateful_set(name, namespace).spec.template.spec.containers[0].command
        served = command[command.index("--served-model-name") + 1]
        body = json.dumps(
            {"model": served, "messages": [{"role": "user", "content": "Say this is a test"}], "max_tokens": 16}
        )
        say("")
        say(f"Ready: {namespace}/{name} is served by the real vLLM engine (vllm-cpu) at {local_url}")
        say(f"  its log: {self.logs / 'engines'}/<pod uid>/engine.log")
        say(
            f"  TOKEN=$(kubectl get secret {status.get('authSecretName')} -n {namespace} -o jsonpath='{{.data.token}}' "
            "| base64 -d)"
        )
        say(
            f'  curl -sS {local_url}/v1/chat/completions -H "Authorization: Bearer $TOKEN" '
            f"-H 'Content-Type: application/json' -d '{body}'"
        )
        host = urlsplit(str((status.get("endpoint") or {}).get("url") or "")).hostname
        ports = self.ports()
        if host and "ingress-https" in ports:
            # -k: no cert-manager here, so the controller serves its own certificate for the host.
            say("  through the Ingress controller (when the fleet could give the pod its address: as root):")
            say(
                f"  curl -sSk --resolve {host}:{ports['ingress-https']}:127.0.0.1 "
                f'https://{host}:{ports["ingress-https"]}/v1/models -H "Authorization: Bearer $TOKEN"'
            )

    # ---------------------------------------------------------------- down

    def stop_process(self, name: str, pid: int, timeout: float = 15) -> None:
        """One process of the stack (its process group), SIGTERM then SIGKILL."""
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while name in self.running() and time.monotonic() < deadline:
            time.sleep(0.1)
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)

    def down(self, say: Say, purge: bool = False) -> None:
        for name, pid in self.running().items():
            say(f"stopping {name} (pid {pid})")
            try:
                os.killpg(pid, signal.SIGTERM)
            except OSError:
                continue
        deadline = time.monotonic() + 15
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.2)
        for name, pid in self.running().items():
            say(f"killing {name} (pid {pid})")
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        self.pids.unlink(missing_ok=True)
        self.cluster().down(purge=purge, progress=say)
        if purge:
            from devstack.postgres import PostgresServer, data_dir_for

            # The production Temporal's database (outside the state directory when run as root).
            PostgresServer(data_dir_for(self.state), port=1).remove()
            shutil.rmtree(self.state, ignore_errors=True)
