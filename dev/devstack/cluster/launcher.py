"""Start and stop a real local control plane: etcd, kube-apiserver, controller-manager, scheduler, kwok.

One code path serves ``ai-inference cluster up|down|env|status`` and the pytest ``local_cluster``
fixture. Every process runs in its own process group (so ``down`` can kill whatever it spawned),
listens on loopback ports picked free at start, and logs into the state dir; ``cluster.json``
there records pids, ports and log files so a later ``down``/``status`` from another process finds
them. Each ``up`` is a fresh cluster: new certificates, new tokens, empty etcd.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import config as kube_config
from kubernetes.client import (
    ApiClient,
    ApiextensionsV1Api,
    CoreV1Api,
    RbacAuthorizationV1Api,
    RbacV1Subject,
    V1Namespace,
    V1ObjectMeta,
    V1RoleBinding,
    V1RoleRef,
)
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient

from devstack.cluster import inventory as inv
from devstack.cluster import kube
from devstack.cluster.build import CONTROL_PLANE_TOOLS, Binaries, ensure_binaries
from devstack.cluster.paths import CRDS_DIR, DEV_DIR, KWOK_STAGES, default_state_dir
from devstack.cluster.pki import HUMAN_USERS, PKI, SERVICE_CIDR, USERS, create_ca, create_pki, issue_certificate

FEATURE_GATES = "DRAConsumableCapacity=true"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
POD_CIDR = "10.244.0.0/16"
# The aggregation layer's client identity towards extension API servers (the metrics adapter): the
# CN the apiserver presents and extension servers accept, as kubeadm sets it up.
FRONT_PROXY_CLIENT = "front-proxy-client"
# How often the HPA controller looks at metrics (upstream: 15s); the local stack reacts faster.
HPA_SYNC_PERIOD = "5s"
CLUSTER_NAME = "ai-inference-local"
# Order matters: started in this order, stopped in reverse.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
# The port of every node's "kubelet" API (pods/log), served by the stand-in fleet on loopback
# (devstack.standins.kubelet_api): kwok publishes it as each node's daemonEndpoints port, next to an
# InternalDNS address `localhost` that kube-apiserver prefers (the node's InternalIP, its pods'
# hostIP, is made up and unreachable). Not a component's port: nothing listens on it until a fleet runs.
KUBELETS_PORT = "kubelets"
KUBELET_ADDRESS_TYPES = "InternalDNS,InternalIP,Hostname,ExternalDNS,ExternalIP"
# The placeholder of the kubelet port in deploy/controlplane/kwok-stages.yaml (0 there: no endpoint).
_KUBELET_PORT_TEMPLATE = "{{ $kubeletPort := 0 }}"

Progress = Callable[[str], None]


def with_default_flag(args: tuple[str, ...], flag: str, value: str) -> tuple[str, ...]:
    """``args``, with ``flag=value`` first unless they set ``flag`` themselves."""
    return args if any(a.split("=", 1)[0] == flag for a in args) else (f"{flag}={value}", *args)


class ClusterError(RuntimeError):
    """The cluster could not be brought up (the message carries the failing component's log tail)."""


@dataclass
class ProcessRecord:
    name: str
    pid: int
    binary: str
    log: str
    ports: dict[str, int] = field(default_factory=dict)
    # The command line's arguments: ``restart`` starts the component again with them.
    args: list[str] = field(default_factory=list)


@dataclass
class ClusterState:
    server: str
    ports: dict[str, int]
    processes: list[ProcessRecord]
    started_at: float
    ready_seconds: float | None = None

    @classmethod
    def load(cls, path: Path) -> ClusterState | None:
        if not path.is_file():
            return None
        raw = json.loads(path.read_text())
        raw["processes"] = [ProcessRecord(**p) for p in raw["processes"]]
        return cls(**raw)

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        os.replace(tmp, path)


@dataclass(frozen=True)
class ClusterStatus:
    state_dir: Path
    up: bool
    server: str | None
    processes: dict[str, bool]  # name -> alive
    ready_seconds: float | None


# ---------------------------------------------------------------------------------------------
# process helpers


def _free_ports(n: int) -> list[int]:
    """n distinct free loopback ports (held open together so they differ; a race stays possible)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def listening_ports() -> set[int]:
    """Ports in LISTEN state on this host (from /proc/net/tcp*; TIME_WAIT leftovers don't count)."""
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            next(f)
            for line in f:
                parts = line.split()
                if parts[3] == "0A":  # TCP_LISTEN
                    ports.add(int(parts[1].rsplit(":", 1)[1], 16))
    return ports


def _pid_alive(pid: int, binary: str | None = None) -> bool:
    """Alive, not a zombie, and (when given) still running ``binary`` - pids get recycled."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        if state in ("Z", "X"):
            return False
        if binary is not None:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0", 1)[0].decode(errors="replace")
            return argv0 == binary
        return True
    except (OSError, IndexError):
        return False


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class LocalCluster:
    """A local Kubernetes control plane with simulated GPUs, rooted at one state directory.

    >>> cluster = LocalCluster()          # ~/.local/state/ai-inference/cluster or $AI_INFERENCE_STATE
    >>> cluster.up()                      # no-op when it is already up
    >>> api = cluster.api_client("ns-user")
    >>> cluster.down()
    """

    def __init__(self, state_dir: Path | None = None, binaries: Binaries | None = None) -> None:
        self.state_dir = (state_dir or default_state_dir()).expanduser().resolve()
        self._binaries = binaries
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self.manifest_errors: list[str] = []

    # -- layout ---------------------------------------------------------------------------------

    @property
    def binaries(self) -> Binaries:
        if self._binaries is None:
            self._binaries = ensure_binaries(CONTROL_PLANE_TOOLS)
        return self._binaries

    @property
    def pki(self) -> PKI:
        return PKI(self.state_dir / "pki")

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def _state_file(self) -> Path:
        return self.state_dir / "cluster.json"

    def state(self) -> ClusterState | None:
        return ClusterState.load(self._state_file)

    @property
    def server(self) -> str:
        state = self.state()
        if state is None:
            raise ClusterError(f"no cluster in {self.state_dir}; run `ai-inference cluster up`")
        return state.server

    @property
    def kubelet_port(self) -> int | None:
        """The loopback port kube-apiserver reaches every node's kubelet API at (pods/log): where the
        stand-in fleet serves it. None for a cluster a launcher without it started (or none up)."""
        state = self.state()
        return state.ports.get(KUBELETS_PORT) if state is not None else None

    def kubeconfig(self, user: str = "admin") -> Path:
        """Path of the kubeconfig of ``user`` (admin | module-admin | ns-user)."""
        if user not in {u.name for u in USERS}:
            raise KeyError(f"unknown user {user!r}; known: {', '.join(HUMAN_USERS)}")
        return self.state_dir / "kubeconfig" / f"{user}.yaml"

    kubeconfig_path = kubeconfig

    def token(self, user: str = "admin") -> str:
        """The bearer token of ``user`` (secret: do not log it)."""
        return self.pki.tokens()[user]

    # -- clients --------------------------------------------------------------------------------

    def api_client(self, user: str = "admin") -> ApiClient:
        """A fresh ``kubernetes.client.ApiClient`` authenticated as ``user``; close it when done."""
        return kube_config.new_client_from_config(config_file=str(self.kubeconfig(user)), persist_config=False)

    def dynamic_client(self, user: str = "admin") -> DynamicClient:
        return kube.dynamic_client(self.api_client(user), self.state_dir / f"discovery-{user}.json")

    def kubectl(
        self,
        *args: str,
        user: str = "admin",
        check: bool = True,
        input: str | None = None,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        """Run the pinned kubectl as ``user``; output captured as text."""
        cmd = [str(self.binaries.kubectl), "--kubeconfig", str(self.kubeconfig(user)), *args]
        result = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
        return result

    def apply(self, objects: Iterable[dict[str, Any]], user: str = "admin", **kwargs: Any) -> int:
        """Server-side apply plain dicts (any kind the server knows); returns how many."""
        with self.api_client(user) as api:
            dyn = kube.dynamic_client(api, self.state_dir / f"discovery-{user}.json")
            return kube.apply_all(dyn, objects, **kwargs)

    def create_namespace(self, name: str, users: Iterable[str] = ("ns-user",), wait: float = 30) -> str:
        """Create (or keep) namespace ``name``, give ``users`` the built-in ``edit`` role in it, and
        wait for its default ServiceAccount (pods are refused until the controller made it)."""
        with self.api_client("admin") as api:
            core, rbac = CoreV1Api(api), RbacAuthorizationV1Api(api)
            try:
                core.create_namespace(V1Namespace(metadata=V1ObjectMeta(name=name)))
            except ApiException as e:
                if e.status != 409:
                    raise
            for user in users:
                username = next(u.username for u in USERS if u.name == user)
                binding = V1RoleBinding(
                    metadata=V1ObjectMeta(name=f"ai-inference-dev:{user}-edit", namespace=name),
                    role_ref=V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="edit"),
                    subjects=[RbacV1Subject(api_group="rbac.authorization.k8s.io", kind="User", name=username)],
                )
                try:
                    rbac.create_namespaced_role_binding(name, binding)
                except ApiException as e:
                    if e.status != 409:
                        raise
            kube.wait_until(
                lambda: core.read_namespaced_service_account("default", name),
                timeout=wait,
                what=f"ServiceAccount default in namespace {name}",
            )
        return name

    def env(self, user: str = "admin") -> dict[str, str]:
        """Environment for shells and child processes: KUBECONFIG plus each user's kubeconfig/token."""
        out = {"KUBECONFIG": str(self.kubeconfig(user)), "AI_INFERENCE_KUBE_SERVER": self.server}
        tokens = self.pki.tokens()
        for name in HUMAN_USERS:
            key = name.upper().replace("-", "_")
            out[f"AI_INFERENCE_KUBECONFIG_{key}"] = str(self.kubeconfig(name))
            out[f"AI_INFERENCE_TOKEN_{key}"] = tokens[name]
        return out

    # -- status ---------------------------------------------------------------------------------

    def _alive(self, rec: ProcessRecord) -> bool:
        child = self._children.get(rec.pid)
        if child is not None and child.poll() is not None:
            return False
        return _pid_alive(rec.pid, rec.binary)

    def status(self) -> ClusterStatus:
        state = self.state()
        if state is None:
            return ClusterStatus(self.state_dir, False, None, {}, None)
        alive = {p.name: self._alive(p) for p in state.processes}
        up = bool(alive) and all(alive.values()) and set(alive) == set(COMPONENTS)
        return ClusterStatus(self.state_dir, up, state.server, alive, state.ready_seconds)

    def is_up(self) -> bool:
        return self.status().up

    # -- up -------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with (self.state_dir / ".lock").open("w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def up(
        self,
        *,
        inventory: bool = True,
        timeout: float = 180,
        progress: Progress | None = None,
        controller_args: tuple[str, ...] = (),
        apiserver_args: tuple[str, ...] = (),
    ) -> bool:
        """Start the cluster and wait until it is ready; False (and nothing done) when already up.
        ``controller_args``: more flags for kube-controller-manager (the scale benchmark's client rate);
        ``apiserver_args``: more flags for kube-apiserver (the scale benchmark's audit log)."""
        say = progress or (lambda _line: None)
        with self._lock():
            status = self.status()
            if status.up:
                say(f"cluster already up at {status.server} (state {self.state_dir})")
                return False
            if status.processes:
                dead = ", ".join(n for n, ok in status.processes.items() if not ok)
                say(f"cluster in {self.state_dir} is partly down ({dead} exited): restarting it")
                self._stop(say)
            binaries = self.binaries  # may build (minutes, cold) - before the clock starts
            for attempt in (1, 2):
                started = time.monotonic()
                try:
                    self._start(
                        binaries,
                        inventory=inventory,
                        timeout=timeout,
                        say=say,
                        started=started,
                        controller_args=controller_args,
                        apiserver_args=apiserver_args,
                    )
                    return True
                except ClusterError as e:
                    with contextlib.suppress(Exception):
                        self._stop(lambda _line: None)
                    # Free ports are picked, then bound by the components a moment later; another
                    # cluster on this machine may win that race. Only that is worth a retry.
                    if attempt == 2 or "address already in use" not in str(e):
                        raise
                    say("a port was taken by someone else meanwhile: retrying with new ports")
                except BaseException:
                    # Never leave half a cluster running (KeyboardInterrupt included).
                    with contextlib.suppress(Exception):
                        self._stop(lambda _line: None)
                    raise
            return True

    def _start(
        self,
        b: Binaries,
        *,
        inventory: bool,
        timeout: float,
        say: Progress,
        started: float,
        controller_args: tuple[str, ...] = (),
        apiserver_args: tuple[str, ...] = (),
    ) -> None:
        deadline = started + timeout

        def remaining() -> float:
            return max(1.0, deadline - time.monotonic())

        def step(what: str) -> None:
            say(f"[{time.monotonic() - started:5.1f}s] {what}")

        for sub in ("etcd", "run", "kubeconfig", "pki"):
            shutil.rmtree(self.state_dir / sub, ignore_errors=True)
        for f in self.state_dir.glob("discovery-*.json"):
            f.unlink()
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        pki = create_pki(self.state_dir / "pki")
        front_proxy_ca = create_ca(pki.dir / "front-proxy", "front-proxy-ca")
        front_proxy = issue_certificate(front_proxy_ca, pki.dir / "front-proxy", FRONT_PROXY_CLIENT, usage="clientAuth")
        names = ("etcd_client", "etcd_peer", "apiserver", "controller_manager", "scheduler", KUBELETS_PORT)
        ports = dict(zip(names, _free_ports(len(names)), strict=True))
        server = f"https://127.0.0.1:{ports['apiserver']}"
        self._write_kubeconfigs(pki, server)
        state = ClusterState(server=server, ports=ports, processes=[], started_at=time.time())
        step(f"certificates and tokens ready; apiserver will listen on {server}")

        etcd_url = f"http://127.0.0.1:{ports['etcd_client']}"
        peer_url = f"http://127.0.0.1:{ports['etcd_peer']}"
        self._spawn(state, "etcd", b.etcd, [
            "--name=default",
            f"--data-dir={self.state_dir / 'etcd'}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=default={peer_url}",
            "--unsafe-no-fsync",  # throwaway data: skip fsync, it dominates etcd latency on CI disks
            "--log-level=warn",
        ], {"client": ports["etcd_client"], "peer": ports["etcd_peer"]})  # fmt: skip
        # The apiserver retries etcd on its own; no need to wait for etcd first.
        self._spawn(state, "kube-apiserver", b.kube_apiserver, [
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={ports['apiserver']}",
            f"--cert-dir={self.state_dir / 'run' / 'apiserver'}",
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.ca_cert}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            "--authorization-mode=RBAC",
            f"--token-auth-file={pki.token_file}",
            # resource.k8s.io/v1 is GA and served by default in 1.34: no --runtime-config needed;
            # consumable capacity (KEP-5075) is alpha and silently dropped without the gate.
            f"--feature-gates={FEATURE_GATES}",
            "--allow-privileged=true",
            # The aggregation layer (APIService v1beta1.custom.metrics.k8s.io of the metrics adapter):
            # proxied requests carry the user in headers, signed by the front-proxy client cert.
            f"--requestheader-client-ca-file={front_proxy_ca.cert}",
            f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={front_proxy.cert}",
            f"--proxy-client-key-file={front_proxy.key}",
            # The nodes' kubelet API (pods/log, the stand-in fleet): at the InternalDNS address kwok
            # gives them (localhost), on their daemonEndpoints port. Its serving certificate is not
            # verified (no --kubelet-certificate-authority), as the fleet's is self-signed.
            f"--kubelet-preferred-address-types={KUBELET_ADDRESS_TYPES}",
            # One client per test: API priority & fairness only adds startup work here.
            "--enable-priority-and-fairness=false",
            "--profiling=false",
            *apiserver_args,
        ], {"secure": ports["apiserver"]})  # fmt: skip
        step("etcd and kube-apiserver started")
        ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
        admin_token = pki.tokens()["admin"]
        self._wait_http(state, f"{server}/readyz", ctx, admin_token, remaining(), "kube-apiserver /readyz")
        step("kube-apiserver ready")

        self._spawn(state, "kube-controller-manager", b.kube_controller_manager, [
            f"--kubeconfig={self.kubeconfig('kube-controller-manager')}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports['controller_manager']}",
            f"--service-account-private-key-file={pki.sa_key}",
            f"--root-ca-file={pki.ca_cert}",
            # Each controller acts as its own ServiceAccount, as in a real cluster, so RBAC
            # mistakes in what the module expects from controllers show up locally too.
            "--use-service-account-credentials=true",
            f"--cluster-signing-cert-file={pki.ca_cert}",
            f"--cluster-signing-key-file={pki.ca_key}",
            "--leader-elect=false",
            f"--feature-gates={FEATURE_GATES}",
            *with_default_flag(controller_args, "--horizontal-pod-autoscaler-sync-period", HPA_SYNC_PERIOD),
        ], {"secure": ports["controller_manager"]})  # fmt: skip
        self._spawn(state, "kube-scheduler", b.kube_scheduler, [
            f"--kubeconfig={self.kubeconfig('kube-scheduler')}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports['scheduler']}",
            "--leader-elect=false",
            f"--feature-gates={FEATURE_GATES}",
        ], {"secure": ports["scheduler"]})  # fmt: skip
        self._spawn(state, "kwok", b.kwok, [
            f"--kubeconfig={self.kubeconfig('kwok')}",
            f"--config={self._kwok_stages(ports[KUBELETS_PORT])}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={inv.KWOK_ANNOTATION}=fake",
            f"--cidr={POD_CIDR}",
            "--node-lease-duration-seconds=40",
        ], {})  # fmt: skip
        step("controller-manager, scheduler and kwok started")

        with self.api_client("admin") as api:
            dyn = kube.dynamic_client(api, self.state_dir / "discovery-admin.json")
            crds = self._apply_crds(dyn, say)
            self._wait_crds_established(api, crds, remaining())
            kube.apply_all(dyn, kube.load_manifests([DEV_DIR / "rbac.yaml"]))
            step(f"{len(crds)} CRDs established, dev RBAC applied")
            if inventory:
                count = apply_inventory(dyn, inv.fleet_inventory(self.state_dir))
                step(f"simulated GPU inventory applied ({count} objects)")
            self._wait_components(state, ctx, remaining())
            core = CoreV1Api(api)
            kube.wait_until(
                lambda: core.read_namespaced_service_account("default", "default"),
                timeout=remaining(),
                what="the controller-manager to create ServiceAccount default/default",
            )
            if inventory:
                expected = {n.name for n in inv.fleet_inventory(self.state_dir).nodes}
                kube.wait_until(
                    lambda: expected <= _ready_nodes(core),
                    timeout=remaining(),
                    what=f"kwok to make nodes {sorted(expected)} Ready (and their not-ready taints lifted)",
                )
        state.ready_seconds = round(time.monotonic() - started, 1)
        state.save(self._state_file)
        step(f"cluster ready in {state.ready_seconds}s")

    def _kwok_stages(self, kubelet_port: int) -> Path:
        """This cluster's copy of kwok's Stages, with the nodes' kubelet port rendered in (the ``run``
        folder lives as long as the cluster: ``restart`` of kwok reads it again)."""
        text = KWOK_STAGES.read_text()
        if text.count(_KUBELET_PORT_TEMPLATE) != 1:
            raise ClusterError(f"{KWOK_STAGES} must set {_KUBELET_PORT_TEMPLATE} exactly once (node-initialize)")
        path = self.state_dir / "run" / "kwok-stages.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace(_KUBELET_PORT_TEMPLATE, f"{{{{ $kubeletPort := {kubelet_port} }}}}"))
        return path

    def _spawn(self, state: ClusterState, name: str, binary: Path, args: list[str], ports: dict[str, int]) -> None:
        log = self.logs_dir / f"{name}.log"
        with log.open("ab") as out:
            out.write(f"\n==== {time.strftime('%Y-%m-%dT%H:%M:%S')} starting {name}\n".encode())
            out.flush()
            # start_new_session: own process group (``down`` kills the group) and no SIGHUP when
            # the terminal that ran ``cluster up`` closes.
            proc = subprocess.Popen(
                [str(binary), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.state_dir,
                start_new_session=True,
            )
        self._children[proc.pid] = proc
        state.processes.append(ProcessRecord(name, proc.pid, str(binary), str(log), ports, list(args)))
        state.save(self._state_file)  # recorded at once, so ``down`` can stop a half-started cluster

    def restart(self, name: str = "kube-apiserver", timeout: float = 60, kill: bool = False) -> float:
        """Stop one component (SIGTERM, or SIGKILL with ``kill``) and start it again with the same
        arguments, ports and data; waits for the apiserver's /readyz. Returns the seconds that took."""
        started = time.monotonic()
        with self._lock():
            state = self.state()
            if state is None:
                raise ClusterError(f"no cluster in {self.state_dir}")
            rec = next(p for p in state.processes if p.name == name)
            if not rec.args:
                raise ClusterError(f"{name} was started by a launcher that kept no arguments: `cluster down` and up")
            if kill:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(rec.pid, signal.SIGKILL)
            else:
                self._terminate([rec], grace=10, say=lambda _line: None)
            self._reap(rec.pid, block=True)
            ports = set(rec.ports.values())
            kube.wait_until(lambda: not (ports & listening_ports()), timeout=timeout, what=f"{name} ports to close")
            state.processes.remove(rec)
            self._spawn(state, name, Path(rec.binary), rec.args, rec.ports)
            ctx = ssl.create_default_context(cafile=str(self.pki.ca_cert))
            token = self.pki.tokens()["admin"]
            self._wait_http(state, f"{state.server}/readyz", ctx, token, timeout, "kube-apiserver /readyz")
        return time.monotonic() - started

    def _check_processes(self, state: ClusterState) -> None:
        for rec in state.processes:
            if not self._alive(rec):
                raise ClusterError(
                    f"{rec.name} exited during startup; last lines of {rec.log}:\n{_tail(Path(rec.log))}"
                )

    def _wait_http(
        self, state: ClusterState, url: str, ctx: ssl.SSLContext, token: str | None, timeout: float, what: str
    ) -> None:
        def check() -> bool:
            self._check_processes(state)
            req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
            try:
                with urllib.request.urlopen(req, context=ctx, timeout=5) as resp:
                    return bool(resp.status == 200)
            except (urllib.error.URLError, OSError):
                return False

        try:
            kube.wait_until(check, timeout=timeout, what=what, interval=0.2)
        except TimeoutError as e:
            raise ClusterError(str(e)) from None
        except ClusterError:
            raise

    def _wait_components(self, state: ClusterState, ca_ctx: ssl.SSLContext, timeout: float) -> None:
        # controller-manager and scheduler serve self-signed certs; /healthz is always-allowed.
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        for name, key in (("kube-controller-manager", "controller_manager"), ("kube-scheduler", "scheduler")):
            url = f"https://127.0.0.1:{state.ports[key]}/healthz"
            self._wait_http(state, url, insecure, None, timeout, f"{name} /healthz")
        self._check_processes(state)

    def _apply_crds(self, dyn: DynamicClient, say: Progress) -> list[str]:
        """Apply every CRD of deploy/crds; a CRD the server refuses is reported, not fatal.

        The CRDs are generated by other work in flight: one broken rule must not take the whole
        cluster (and every cluster test) down with it. ``manifest_errors`` keeps what failed.
        """
        applied = []
        self.manifest_errors = []
        for crd in kube.load_manifests([CRDS_DIR]):
            name = crd["metadata"]["name"]
            try:
                kube.apply(dyn, crd)
            except ApiException as e:
                message = _api_message(e)
                self.manifest_errors.append(f"CRD {name}: {message}")
                say(f"WARNING: the API server refused CRD {name} (left out): {message}")
                continue
            applied.append(name)
        return applied

    def _wait_crds_established(self, api: ApiClient, names: list[str], timeout: float) -> None:
        ext = ApiextensionsV1Api(api)

        def established() -> bool:
            for name in names:
                status = ext.read_custom_resource_definition(name).status
                conds = (status.conditions if status else None) or []
                if not any(c.type == "Established" and c.status == "True" for c in conds):
                    return False
            return True

        kube.wait_until(established, timeout=timeout, what=f"CRDs {names} to be Established")

    def _write_kubeconfigs(self, pki: PKI, server: str) -> None:
        import base64

        directory = self.state_dir / "kubeconfig"
        directory.mkdir(parents=True, exist_ok=True)
        os.chmod(directory, 0o700)
        ca = base64.b64encode(pki.ca_cert.read_bytes()).decode()
        tokens = pki.tokens()
        for user in USERS:
            doc = {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": CLUSTER_NAME, "cluster": {"server": server, "certificate-authority-data": ca}}],
                "users": [{"name": user.name, "user": {"token": tokens[user.name]}}],
                "contexts": [{"name": user.name, "context": {"cluster": CLUSTER_NAME, "user": user.name}}],
                "current-context": user.name,
            }
            path = self.kubeconfig(user.name)
            # Created 0600 before the token is written into it.
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                yaml.safe_dump(doc, f, sort_keys=False)

    # -- down -----------------------------------------------------------------------------------

    def down(self, *, purge: bool = False, progress: Progress | None = None) -> bool:
        """Stop every process of the cluster; True when something was running.

        ``purge`` also deletes the state dir (logs included); otherwise logs stay for post-mortems
        and only the etcd data, certificates and tokens go.
        """
        say = progress or (lambda _line: None)
        with self._lock():
            stopped = self._stop(say)
        if purge:
            shutil.rmtree(self.state_dir, ignore_errors=True)
            say(f"removed {self.state_dir}")
        return stopped

    def _stop(self, say: Progress, grace: float = 10) -> bool:
        state = self.state()
        if state is None:
            say(f"no cluster in {self.state_dir}")
            return False
        running = [p for p in reversed(state.processes) if self._alive(p)]
        # Two waves: the clients of etcd first, etcd last, so the apiserver shuts down cleanly
        # instead of filling its log with connection errors.
        for wave in ([r for r in running if r.name != "etcd"], [r for r in running if r.name == "etcd"]):
            self._terminate(wave, grace, say)
        for rec in running:
            self._reap(rec.pid, block=True)
        # A process may have forked helpers into its group: make sure the groups are empty. Only
        # groups verified ours above: a dead leader's pid could belong to a stranger by now.
        for rec in running:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(rec.pid, signal.SIGKILL)
        ports = {port for rec in state.processes for port in rec.ports.values()}
        with contextlib.suppress(TimeoutError):
            kube.wait_until(lambda: not (ports & listening_ports()), timeout=5, what="ports to close")
        for sub in ("etcd", "run", "pki", "kubeconfig"):
            shutil.rmtree(self.state_dir / sub, ignore_errors=True)
        for f in self.state_dir.glob("discovery-*.json"):
            f.unlink()
        self._state_file.unlink(missing_ok=True)
        if running:
            say(f"stopped {', '.join(r.name for r in running)}")
        else:
            say("cluster was not running; cleaned its state")
        return bool(running)

    def _terminate(self, procs: list[ProcessRecord], grace: float, say: Progress) -> None:
        for rec in procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(rec.pid, signal.SIGTERM)  # pid == pgid: each started its own session
        deadline = time.monotonic() + grace
        for rec in procs:
            while self._alive(rec) and time.monotonic() < deadline:
                self._reap(rec.pid)
                time.sleep(0.05)
            if self._alive(rec):
                say(f"{rec.name} (pid {rec.pid}) ignored SIGTERM for {grace:.0f}s: killing it")
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(rec.pid, signal.SIGKILL)

    def _reap(self, pid: int, block: bool = False) -> None:
        """Collect our own children so they don't linger as zombies (only our children)."""
        child = self._children.get(pid)
        if child is None:
            return
        try:
            child.wait(timeout=5 if block else 0)
        except subprocess.TimeoutExpired:
            return
        self._children.pop(pid, None)


def _api_message(e: ApiException) -> str:
    try:
        return str(json.loads(e.body or "{}").get("message") or e.reason)
    except ValueError:
        return str(e.reason)


# Taints the API server puts on a new node (admission TaintNodesByCondition) and the node lifecycle
# controller lifts some seconds after the node reports Ready: until then nothing schedules there, and
# the planner (rightly) refuses the node.
_CONDITION_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


def _ready_nodes(core: CoreV1Api) -> set[str]:
    """Nodes that are Ready and free of the condition taints: where a pod can be scheduled now."""
    ready: set[str] = set()
    for node in core.list_node().items:
        conds = (node.status.conditions if node.status else None) or []
        taints = (node.spec.taints if node.spec else None) or []
        if (
            node.metadata
            and node.metadata.name
            and any(c.type == "Ready" and c.status == "True" for c in conds)
            and not any(t.key in _CONDITION_TAINTS for t in taints)
        ):
            ready.add(node.metadata.name)
    return ready


def apply_inventory(dyn: DynamicClient, inventory: inv.Inventory | None = None) -> int:
    """Apply the simulated inventory (the default fleet unless given): Nodes, DeviceClasses,
    ResourceSlices, PhysicalGPUs (+status)."""
    count = kube.apply_all(dyn, inv.inventory_objects(inventory))
    # PhysicalGPU status is what the gpu module publishes; it only lands through /status.
    count += kube.apply_all(dyn, inv.physical_gpu_statuses(inventory), subresource="status")
    return count
