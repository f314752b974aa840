"""A kubelet for the module's own pods on the local cluster: the chart's Deployments and StatefulSet run.

kwok runs no container, so a chart installed on the local control plane is objects only. This
stand-in runs the pods of one namespace that carry the annotation ``ai.deckhouse.io/stand-in-kubelet``
(the chart's ``podAnnotations`` puts it on every pod it makes) as a kubelet would:

* **A network namespace per pod** with the pod's own address (given here, ``PodAddresses``, and
  reported in the pod's status) on ``eth0`` (a veth pair; the host routes the address to it, and
  forwards between pods), so two
  replicas listen on the same ports and a pod's containers share its loopback (the embedded
  Temporal's TLS proxy reaches the server on ``127.0.0.1``). The pod's ``/etc/hosts`` names every
  Service of the namespace (``<service>.<namespace>.svc`` and ``.svc.cluster.local``) at the address
  of a ready pod it selects, and ``kubernetes.default.svc`` at the API server's Service address
  (``pki.KUBERNETES_SERVICE_IP``:443, which this process relays to the local API server); its
  ``resolv.conf`` has no server that answers, as a cluster without a way out.
* **Volumes as the kubelet makes them**: ConfigMap, Secret, projected (ServiceAccount tokens from the
  TokenRequest API with the pod's audience and expiry, renewed at 80 % of their life; ConfigMaps,
  Secrets, the downward API), emptyDir and PersistentVolumeClaim (a hostPath PersistentVolume this
  process binds, kept across restarts), written under ``root/<pod uid>/`` and bind-mounted at each
  mount path in the container's own mount namespace (read-only where the mount says), refreshed every
  ``refresh_seconds``.
* **Containers from their image**: the image's repository's last segment names a local stand-in
  (``IMAGES``: the module's own image is this checkout's ``ai-inference`` — or, for an image named in
  ``image_trees``, another build's source tree mounted at ``IMAGE_TREE`` and first on ``PYTHONPATH`` —,
  the Temporal image the ``temporal`` CLI of the venv, the nginx image this machine's nginx), run with the container's
  command, arguments and environment (values, the downward API, Secret and ConfigMap keys, the
  Services' links unless ``enableServiceLinks: false``, ``KUBERNETES_SERVICE_HOST``). An image with
  no stand-in waits ``ErrImagePull``. A container that exits is started again per the pod's
  ``restartPolicy`` with the kubelet's doubling back-off; a Job's pod ends ``Succeeded`` or
  ``Failed``.
* **Probes**: ``httpGet`` (HTTP and HTTPS, to the pod's address), ``tcpSocket`` and ``exec`` (in the
  container's namespaces), with their delays, periods, timeouts and thresholds: readiness writes the
  pod's ``Ready`` (what Deployments, EndpointSlices and this file's ``/etc/hosts`` count), a failing
  liveness probe restarts the container.
* **Deletion**: a pod being deleted gets SIGTERM, its grace period, then SIGKILL, and is removed
  (kwok's own delete Stage leaves these pods alone: deploy/controlplane/kwok-stages.yaml).

Containers run as their ``securityContext`` user and group (``setpriv``), with the pod's ``fsGroup`` as
a supplementary group that owns the volumes' files. What it does not do: drop capabilities beyond
that, limit CPU or memory, enforce NetworkPolicies, or honour a Service port that differs from
its target port (the chart's do not differ).

Dev/test only (root: network namespaces and mounts): tests/chart/test_chart_pods_run.py.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import ipaddress
import os
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sysconfig
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException

from devstack.cluster.pki import KUBERNETES_SERVICE_IP

log = structlog.get_logger(__name__)

RUN_ANNOTATION = "ai.deckhouse.io/stand-in-kubelet"
# The host's address as the pods see it: their default gateway (a link-local address on the host's
# loopback, as Calico's 169.254.1.1), where the relays below listen.
GATEWAY = "169.254.20.1"
KUBERNETES_SERVICE_PORT = 443
# Where a container's mount namespace reaches the kubelet's folder before binding its volumes.
STAGING = Path("/mnt/ai-inference-kubelet")
# Where an image of another build of the module (``PodKubelet.image_trees``) has its code.
IMAGE_TREE = "/opt/ai-inference-image"
Obj = Mapping[str, Any]


def _venv_scripts(command: str) -> str | None:
    return shutil.which(command, path=sysconfig.get_path("scripts"))


# The local stand-in of an image, by the last segment of its repository: the executable a command
# names, as that image's filesystem would give it.
IMAGES: dict[str, Callable[[str], str | None]] = {
    "ai-inference": _venv_scripts,
    "temporal": lambda command: _venv_scripts(command) or shutil.which(command),
    "nginx-unprivileged": shutil.which,
}


def image_segment(image: str) -> str:
    """``registry/org/name:tag@sha256:…`` → ``name``."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[0]


def _get(obj: Any, *path: str) -> Any:
    found = obj
    for step in path:
        if not isinstance(found, Mapping):
            return None
        found = found.get(step)
    return found


def _ip(*args: str, netns: str | None = None) -> subprocess.CompletedProcess[str]:
    cmd = ["ip", *(["-n", netns] if netns else []), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=15, check=False)


def _must(result: subprocess.CompletedProcess[str], what: str) -> None:
    if result.returncode != 0 and "File exists" not in result.stderr and "already assigned" not in result.stderr:
        raise RuntimeError(f"{what}: {result.stderr.strip()}")


def service_link_env(services: Sequence[Obj]) -> dict[str, str]:
    """The variables a kubelet gives a pod for each Service of its namespace (``enableServiceLinks``)."""
    env: dict[str, str] = {}
    for service in services:
        ip = _get(service, "spec", "clusterIP")
        ports = _get(service, "spec", "ports") or []
        if not ip or ip == "None" or not ports:
            continue
        prefix = service["metadata"]["name"].upper().replace("-", "_")
        first = ports[0]
        env[f"{prefix}_SERVICE_HOST"] = ip
        env[f"{prefix}_SERVICE_PORT"] = str(first["port"])
        env[f"{prefix}_PORT"] = f"{first.get('protocol', 'TCP').lower()}://{ip}:{first['port']}"
        for port in ports:
            proto = port.get("protocol", "TCP")
            key = f"{prefix}_PORT_{port['port']}_{proto}"
            env[key] = f"{proto.lower()}://{ip}:{port['port']}"
            env[f"{key}_PROTO"] = proto.lower()
            env[f"{key}_PORT"] = str(port["port"])
            env[f"{key}_ADDR"] = ip
    return env


def selects(selector: Mapping[str, str] | None, labels: Mapping[str, str] | None) -> bool:
    return bool(selector) and all((labels or {}).get(k) == v for k, v in (selector or {}).items())


def pod_ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in _get(pod, "status", "conditions") or [])


def hosts_file(namespace: str, services: Sequence[Obj], pods: Sequence[Obj], pod: Obj) -> str:
    """``/etc/hosts`` of ``pod``: itself, the API server, each Service at a ready pod it selects."""
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    own_ip = _get(pod, "status", "podIP")
    if own_ip:
        lines.append(f"{own_ip}\t{pod['metadata']['name']}")
    lines.append(
        f"{KUBERNETES_SERVICE_IP}\tkubernetes kubernetes.default kubernetes.default.svc "
        "kubernetes.default.svc.cluster.local"
    )
    for service in services:
        selector = _get(service, "spec", "selector")
        chosen = [p for p in pods if selects(selector, _get(p, "metadata", "labels")) and _get(p, "status", "podIP")]
        chosen.sort(key=lambda p: (not pod_ready(p), p["metadata"]["name"]))
        if not chosen:
            continue
        name = service["metadata"]["name"]
        lines.append(f"{chosen[0]['status']['podIP']}\t{name}.{namespace}.svc {name}.{namespace}.svc.cluster.local")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------- the relay


class Relay:
    """A TCP relay from ``listen`` to ``target`` (the API server's Service address to its loopback port)."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.listen, self.target = listen, target
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(self.listen)
        sock.listen(128)
        self._sock = sock
        self._thread = threading.Thread(target=self._accept, name=f"relay-{self.listen[1]}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._sock is not None:
            # shutdown wakes the accept() blocked in the relay's thread; close alone would not free the port.
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                self._sock.close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _accept(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    s.close()


# ------------------------------------------------------------------------------------ addresses


POD_NETWORK = "10.245.0.0/16"


@dataclass
class PodAddresses:
    """The pods' addresses, as a CNI plugin gives them: one per running pod, never two pods the same.

    Not kwok's: kwok's pool is its process's memory, shared with every other pod of the cluster, and
    nothing here checks that it never hands out an address one of these pods still uses; two of them on
    one address would route one's replies to the other (the suspect of a CI run in which every connection
    of the planner's pod timed out while its neighbours' did not). A range of their own (``POD_NETWORK``)
    also keeps them apart from the pod addresses the fleet puts on the loopback interface.
    """

    network: str = POD_NETWORK
    held: dict[str, str] = field(default_factory=dict)  # pod uid → address
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def allocate(self, uid: str) -> str:
        with self._lock:
            if uid in self.held:
                return self.held[uid]
            taken = set(self.held.values())
            for host in ipaddress.ip_network(self.network).hosts():
                if str(host) not in taken:
                    self.held[uid] = str(host)
                    return str(host)
        raise RuntimeError(f"no address left in {self.network}")

    def release(self, uid: str) -> None:
        with self._lock:
            self.held.pop(uid, None)


# ---------------------------------------------------------------------------------- containers


@dataclass
class ContainerRun:
    spec: Obj
    init: bool = False
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    started_at: str | None = None
    started_mono: float = 0.0
    ready: bool = False
    started: bool = False
    waiting: tuple[str, str] | None = ("ContainerCreating", "")
    terminated: dict[str, Any] | None = None
    last_terminated: dict[str, Any] | None = None
    next_start: float = 0.0
    probe_due: dict[str, float] = field(default_factory=dict)
    probe_runs: dict[str, int] = field(default_factory=dict)  # consecutive failures / successes by kind
    done: bool = False  # an init container that exited 0, or a container not restarted

    @property
    def name(self) -> str:
        return str(self.spec["name"])


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def backoff(restarts: int) -> float:
    """The kubelet's restart back-off: 10 s doubling, at most five minutes (shortened here to 1 s base)."""
    return float(min(300, 2 ** max(0, restarts - 1)))


class PodRun:
    """One pod: its network namespace, volumes, containers, probes and status."""

    def __init__(self, kubelet: PodKubelet, pod: Obj, ip: str) -> None:
        self.kubelet = kubelet
        meta = pod["metadata"]
        self.uid: str = meta["uid"]
        self.name: str = meta["name"]
        self.namespace: str = meta["namespace"]
        self.ip = ip
        # The address is the kubelet's to give (a CNI plugin's), reported with the pod's status.
        self.pod: Obj = {**pod, "status": {**(pod.get("status") or {}), "podIP": ip, "podIPs": [{"ip": ip}]}}
        digest = hashlib.sha256(self.uid.encode()).hexdigest()[:8]
        self.netns = f"aip-{digest}"
        self.host_veth = f"aiph{digest}"
        self.dir = kubelet.root / self.uid
        spec = pod["spec"]
        self.restart_policy: str = spec.get("restartPolicy") or "Always"
        self.inits = [ContainerRun(c, init=True) for c in spec.get("initContainers") or []]
        self.containers = [ContainerRun(c) for c in spec.get("containers") or []]
        self.tokens: dict[str, float] = {}  # token file → when to renew
        self.stopping = False
        self.phase = "Running"
        self._last_status: Any = None
        self._next_refresh = 0.0
        self._thread: threading.Thread | None = None

    # -- setup -------------------------------------------------------------------------------------------

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._network()
        self.write_hosts()
        self._volumes()
        self._thread = threading.Thread(target=self._loop, name=f"pod-{self.name}", daemon=True)
        self._thread.start()

    def _network(self) -> None:
        _ip("netns", "del", self.netns)
        _must(_ip("netns", "add", self.netns), "netns add")
        _ip("link", "del", self.host_veth)
        _must(_ip("link", "add", self.host_veth, "type", "veth", "peer", "name", "eth0", "netns", self.netns), "veth")
        _must(_ip("link", "set", self.host_veth, "up"), "veth up")
        _must(_ip("route", "replace", f"{self.ip}/32", "dev", self.host_veth, "src", GATEWAY), "route to pod")
        _must(_ip("link", "set", "lo", "up", netns=self.netns), "lo up")
        _must(_ip("address", "add", f"{self.ip}/32", "dev", "eth0", netns=self.netns), "pod address")
        _must(_ip("link", "set", "eth0", "up", netns=self.netns), "eth0 up")
        _must(_ip("route", "add", GATEWAY, "dev", "eth0", "scope", "link", netns=self.netns), "gateway route")
        _must(_ip("route", "add", "default", "via", GATEWAY, "dev", "eth0", netns=self.netns), "default route")
        etc = Path("/etc/netns") / self.netns
        etc.mkdir(parents=True, exist_ok=True)
        # No resolver that answers: a name outside /etc/hosts fails at once, not after DNS timeouts.
        (etc / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        (etc / "hosts").touch()

    def write_hosts(self) -> None:
        content = hosts_file(self.namespace, self.kubelet.services, self.kubelet.pods, self.pod)
        path = Path("/etc/netns") / self.netns / "hosts"
        if path.exists() and path.read_text() == content:
            return
        # In place, not renamed: the file is bind-mounted into the pod's processes.
        with path.open("r+" if path.exists() else "w") as f:
            f.seek(0)
            f.write(content)
            f.truncate()

    def volume_dir(self, name: str) -> Path:
        return self.dir / "volumes" / name

    def _volumes(self) -> None:
        for volume in self.pod["spec"].get("volumes") or []:
            target = self.volume_dir(volume["name"])
            if "emptyDir" in volume:
                target.mkdir(parents=True, exist_ok=True)
                target.chmod(0o777)
            elif "persistentVolumeClaim" in volume:
                claim = volume["persistentVolumeClaim"]["claimName"]
                host = self.kubelet.claim_dir(self.namespace, claim)
                host.mkdir(parents=True, exist_ok=True)
                self._own(host, 0o2775)
                if not target.exists():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.symlink_to(host)
            else:
                self._write_files(target, self._files(volume), self.fs_group)
        self._next_refresh = time.monotonic() + self.kubelet.refresh_seconds

    def _files(self, volume: Obj) -> dict[str, tuple[bytes, int]]:
        """The files of a ConfigMap, Secret or projected volume: relative path → (content, mode)."""
        core = self.kubelet.core
        out: dict[str, tuple[bytes, int]] = {}

        def keys(data: Mapping[str, bytes], items: list[Obj] | None, mode: int) -> None:
            if items:
                for item in items:
                    if item["key"] in data:
                        out[item["path"]] = (data[item["key"]], int(item.get("mode") or mode))
            else:
                for key, value in data.items():
                    out[key] = (value, mode)

        def configmap(name: str, optional: bool) -> dict[str, bytes]:
            try:
                found = core.read_namespaced_config_map(name, self.namespace)
            except ApiException as err:
                if err.status == 404 and optional:
                    return {}
                raise
            return {k: v.encode() for k, v in (found.data or {}).items()}

        def secret(name: str, optional: bool) -> dict[str, bytes]:
            try:
                found = core.read_namespaced_secret(name, self.namespace)
            except ApiException as err:
                if err.status == 404 and optional:
                    return {}
                raise
            return {k: base64.b64decode(v) for k, v in (found.data or {}).items()}

        if "configMap" in volume:
            source = volume["configMap"]
            data = configmap(source["name"], bool(source.get("optional")))
            keys(data, source.get("items"), int(source.get("defaultMode") or 0o644))
        elif "secret" in volume:
            source = volume["secret"]
            data = secret(source["secretName"], bool(source.get("optional")))
            keys(data, source.get("items"), int(source.get("defaultMode") or 0o644))
        elif "projected" in volume:
            mode = int(volume["projected"].get("defaultMode") or 0o644)
            for source in volume["projected"].get("sources") or []:
                if "serviceAccountToken" in source:
                    token = source["serviceAccountToken"]
                    out[token["path"]] = (self._token(token).encode(), mode)
                elif "configMap" in source:
                    s = source["configMap"]
                    keys(configmap(s["name"], bool(s.get("optional"))), s.get("items"), mode)
                elif "secret" in source:
                    s = source["secret"]
                    keys(secret(s["name"], bool(s.get("optional"))), s.get("items"), mode)
                elif "downwardAPI" in source:
                    for item in source["downwardAPI"].get("items") or []:
                        value = self.field(_get(item, "fieldRef", "fieldPath") or "")
                        out[item["path"]] = (value.encode(), int(item.get("mode") or mode))
        return out

    def _token(self, source: Obj) -> str:
        """A bound ServiceAccount token for this pod, as the kubelet asks the TokenRequest API for it."""
        expiry = int(source.get("expirationSeconds") or 3600)
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [source["audience"]] if source.get("audience") else None,
                "expirationSeconds": max(600, expiry),
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": self.name, "uid": self.uid},
            },
        }
        sa = self.pod["spec"].get("serviceAccountName") or "default"
        made = self.kubelet.core.create_namespaced_service_account_token(sa, self.namespace, body)
        self.tokens[source["path"]] = time.monotonic() + 0.8 * max(600, expiry)
        return str(made.status.token)

    @property
    def fs_group(self) -> int | None:
        found = _get(self.pod, "spec", "securityContext", "fsGroup")
        return int(found) if found is not None else None

    def _own(self, path: Path, mode: int) -> None:
        """A volume's folder as the kubelet leaves it for ``fsGroup``: group-owned, group-writable, setgid."""
        if self.fs_group is not None:
            os.chown(path, -1, self.fs_group)
            path.chmod(mode)
        else:
            path.chmod(0o777)

    def user(self, container: Obj) -> tuple[int, int] | None:
        """The container's user and group (its securityContext over the pod's), None for root."""
        pod_ctx = _get(self.pod, "spec", "securityContext") or {}
        ctx = container.get("securityContext") or {}
        uid = ctx.get("runAsUser", pod_ctx.get("runAsUser"))
        gid = ctx.get("runAsGroup", pod_ctx.get("runAsGroup"))
        if uid is None:
            return None
        return int(uid), int(gid if gid is not None else uid)

    @staticmethod
    def _write_files(target: Path, files: Mapping[str, tuple[bytes, int]], group: int | None = None) -> None:
        target.mkdir(parents=True, exist_ok=True)
        for rel, (content, mode) in files.items():
            path = target / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.exists() and path.read_bytes() == content:
                if group is not None and path.stat().st_gid != group:
                    os.chown(path, -1, group)
                if path.stat().st_mode & 0o7777 != mode:
                    path.chmod(mode)
                continue
            tmp = path.with_name(f".{path.name}.new")
            tmp.write_bytes(content)
            if group is not None:
                os.chown(tmp, -1, group)
            tmp.chmod(mode)
            # A directory bind-mounted whole: a renamed file shows through, as the kubelet's atomic writer.
            os.replace(tmp, path)

    def field(self, path: str) -> str:
        meta, spec, status = self.pod["metadata"], self.pod["spec"], self.pod.get("status") or {}
        simple = {
            "metadata.name": meta["name"],
            "metadata.namespace": meta["namespace"],
            "metadata.uid": meta["uid"],
            "spec.nodeName": spec.get("nodeName") or "",
            "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
            "status.podIP": self.ip,
            "status.hostIP": status.get("hostIP") or "",
        }
        if path in simple:
            return str(simple[path])
        for prefix, source in (
            ("metadata.labels", meta.get("labels")),
            ("metadata.annotations", meta.get("annotations")),
        ):
            if path.startswith(prefix + "['") and path.endswith("']"):
                return str((source or {}).get(path[len(prefix) + 2 : -2], ""))
        return ""

    # -- running -----------------------------------------------------------------------------------------

    def env(self, container: Obj) -> dict[str, str]:
        env: dict[str, str] = {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOSTNAME": self.name,
            "HOME": "/root" if self.user(container) is None else "/",
            "KUBERNETES_SERVICE_HOST": KUBERNETES_SERVICE_IP,
            "KUBERNETES_SERVICE_PORT": str(KUBERNETES_SERVICE_PORT),
            "KUBERNETES_SERVICE_PORT_HTTPS": str(KUBERNETES_SERVICE_PORT),
            "KUBERNETES_PORT": f"tcp://{KUBERNETES_SERVICE_IP}:{KUBERNETES_SERVICE_PORT}",
        }
        if self.image_tree(container) is not None:
            # That build's packages first (the editable install of this checkout comes after the path).
            env["PYTHONPATH"] = IMAGE_TREE
        if self.pod["spec"].get("enableServiceLinks", True):
            env.update(service_link_env(self.kubelet.services))
        core = self.kubelet.core
        for source in container.get("envFrom") or []:
            prefix = source.get("prefix") or ""
            if "configMapRef" in source:
                found = core.read_namespaced_config_map(source["configMapRef"]["name"], self.namespace)
                env.update({prefix + k: v for k, v in (found.data or {}).items()})
            elif "secretRef" in source:
                found = core.read_namespaced_secret(source["secretRef"]["name"], self.namespace)
                env.update({prefix + k: base64.b64decode(v).decode() for k, v in (found.data or {}).items()})
        for entry in container.get("env") or []:
            value_from = entry.get("valueFrom")
            if not value_from:
                env[entry["name"]] = expand(str(entry.get("value", "")), env)
            elif "fieldRef" in value_from:
                env[entry["name"]] = self.field(value_from["fieldRef"]["fieldPath"])
            elif "secretKeyRef" in value_from:
                ref = value_from["secretKeyRef"]
                data = core.read_namespaced_secret(ref["name"], self.namespace).data or {}
                if ref["key"] in data:
                    env[entry["name"]] = base64.b64decode(data[ref["key"]]).decode()
            elif "configMapKeyRef" in value_from:
                ref = value_from["configMapKeyRef"]
                data = core.read_namespaced_config_map(ref["name"], self.namespace).data or {}
                if ref["key"] in data:
                    env[entry["name"]] = data[ref["key"]]
        return env

    def image_tree(self, container: Obj) -> Path | None:
        """The source tree standing for the container's image when it is another build of the module."""
        return self.kubelet.image_trees.get(str(container.get("image", "")).split("@", 1)[0])

    def argv(self, container: Obj) -> list[str] | None:
        """The container's command on this machine, None when its image has no stand-in."""
        resolve = IMAGES.get(image_segment(str(container.get("image", ""))))
        command = [*(container.get("command") or []), *(container.get("args") or [])]
        if resolve is None or not command:
            return None
        found = resolve(command[0]) if "/" not in command[0] else command[0]
        return [found, *command[1:]] if found else None

    def in_pod(self, container: Obj, argv: list[str]) -> list[str]:
        """``argv`` in the pod's network namespace and a mount namespace of the container's own, with its
        volumes bound at their mount paths (``ip netns exec`` gives the namespace, /etc/hosts and
        resolv.conf)."""
        needed = [str(Path(argv[0]).resolve().parent), str(self.kubelet.repo_root)]
        mounts = sorted(container.get("volumeMounts") or [], key=lambda m: len(Path(m["mountPath"]).parts))
        # The volumes are reached through a staging point no mount path covers (the kubelet's folder
        # may lie under one: /tmp).
        root = self.kubelet.root.resolve()
        stage = STAGING / self.netns
        script: list[str] = ["set -e", f"mkdir -p {stage}", f"mount --bind {shlex.quote(str(root))} {stage}"]
        tree = self.image_tree(container)
        if tree is not None:
            script += [f"mkdir -p {IMAGE_TREE}", f"mount --bind -o ro {shlex.quote(str(tree))} {IMAGE_TREE}"]
        for mount in mounts:
            volume = self.volume_dir(mount["name"])
            volume = volume.resolve() if volume.is_symlink() else volume
            source = stage / volume.relative_to(root)
            if mount.get("subPath"):
                source = source / mount["subPath"]
            target = mount["mountPath"]
            # A host path the process needs (the venv, this checkout) under the mount path stays
            # visible: bound into the volume's folder first, carried over by the recursive bind.
            for keep in needed:
                if keep == target or keep.startswith(target.rstrip("/") + "/"):
                    inner = f"{source}/{os.path.relpath(keep, target)}"
                    script.append(f"mkdir -p {shlex.quote(inner)}")
                    script.append(f"mount --bind {shlex.quote(keep)} {shlex.quote(inner)}")
            on_host = volume / mount["subPath"] if mount.get("subPath") else volume
            if on_host.is_dir():
                script.append(f"mkdir -p {shlex.quote(target)}")
            else:
                script.append(f"mkdir -p {shlex.quote(str(Path(target).parent))}; touch {shlex.quote(target)}")
            script.append(f"mount --rbind {shlex.quote(str(source))} {shlex.quote(target)}")
            if mount.get("readOnly"):
                script.append(f"mount -o remount,bind,ro {shlex.quote(target)}")
        working = container.get("workingDir")
        if working:
            script.append(f"cd {shlex.quote(working)}")
        user = self.user(container)
        as_user = ""
        if user is not None:
            # As the kubelet runs it: the securityContext's user and group, fsGroup a supplementary group.
            groups = ",".join(str(g) for g in {user[1], *([self.fs_group] if self.fs_group is not None else [])})
            as_user = f"setpriv --reuid {user[0]} --regid {user[1]} --groups {groups} --inh-caps=-all"
        # The pod's own UTS namespace, its hostname the pod's name (what the Temporal SDK names a worker by).
        uts = 'hostname "$1"; shift; exec "$@"'
        script.append(f'exec unshare --uts -- sh -c {shlex.quote(uts)} uts {shlex.quote(self.name)} {as_user} "$@"')
        return ["ip", "netns", "exec", self.netns, "sh", "-c", "\n".join(script), "pod", *argv]

    def _log(self, run: ContainerRun) -> Path:
        return self.dir / f"{run.name}.log"

    def _start(self, run: ContainerRun) -> None:
        argv = self.argv(run.spec)
        if argv is None:
            image = run.spec.get("image")
            run.waiting = ("ErrImagePull", f"no local stand-in for image {image!r} (pod_kubelet.IMAGES)")
            run.next_start = time.monotonic() + 30
            return
        env = self.env(run.spec)
        with self._log(run).open("ab") as out:
            run.process = subprocess.Popen(
                self.in_pod(run.spec, argv),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        run.started_at, run.started_mono = _now(), time.monotonic()
        run.waiting, run.terminated, run.ready, run.started = None, None, False, "startupProbe" not in run.spec
        run.probe_due = {}
        run.probe_runs = {}
        log.info("container started", pod=self.name, container=run.name, pid=run.process.pid)

    @staticmethod
    def _signal(run: ContainerRun, sig: int) -> None:
        if run.process is not None and run.process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(run.process.pid, sig)

    def _exited(self, run: ContainerRun, code: int, reason: str | None = None) -> None:
        finished = {
            "exitCode": code,
            "reason": reason or ("Completed" if code == 0 else "Error"),
            "startedAt": run.started_at,
            "finishedAt": _now(),
        }
        run.process, run.ready, run.started = None, False, False
        restart = self.restart_policy == "Always" or (self.restart_policy == "OnFailure" and code != 0)
        if run.init and code == 0:
            run.terminated, run.done = finished, True
            return
        if restart and not self.stopping:
            run.last_terminated = finished
            run.restarts += 1
            run.waiting = ("CrashLoopBackOff", f"back-off restarting failed container {run.name}")
            run.terminated = None
            run.next_start = time.monotonic() + backoff(run.restarts)
        else:
            run.terminated, run.done = finished, True
        log.info("container exited", pod=self.name, container=run.name, code=code, restarts=run.restarts)

    def _kill(self, run: ContainerRun, reason: str) -> None:
        self._signal(run, signal.SIGTERM)
        if run.process is not None:
            try:
                code = run.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._signal(run, signal.SIGKILL)
                code = run.process.wait(timeout=10)
            self._exited(run, code if code >= 0 else 128 - code, reason)

    def _loop(self) -> None:
        while not self.stopping:
            try:
                self.step()
            except Exception as err:  # a kubelet keeps going: the next pass tries again
                log.warning("pod pass failed", pod=self.name, error=str(err))
            time.sleep(0.5)

    def step(self) -> None:
        now = time.monotonic()
        if now >= self._next_refresh:
            self._volumes()
        for renew_at in list(self.tokens.values()):
            if now >= renew_at:
                self._volumes()
                break
        pending_init = next((r for r in self.inits if not r.done), None)
        runs = [pending_init] if pending_init is not None else self.containers
        for run in runs:
            if run.done:
                continue
            if run.process is None:
                if now >= run.next_start:
                    self._start(run)
                continue
            code = run.process.poll()
            if code is not None:
                self._exited(run, code)
                continue
            if not run.init:
                self._probe(run, now)
        if self.restart_policy != "Always" and all(r.done for r in self.containers):
            failed = any((r.terminated or {}).get("exitCode") for r in self.containers)
            self.phase = "Failed" if failed else "Succeeded"
        self.report()

    # -- probes ------------------------------------------------------------------------------------------

    def _probe(self, run: ContainerRun, now: float) -> None:
        for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            probe = run.spec.get(kind)
            if probe is None:
                continue
            if kind != "startupProbe" and not run.started:
                continue
            if kind == "startupProbe" and run.started:
                continue
            due = run.probe_due.get(kind, run.started_mono + float(probe.get("initialDelaySeconds") or 0))
            if now < due:
                continue
            run.probe_due[kind] = now + float(probe.get("periodSeconds") or 10)
            ok = self._check(run, probe)
            good, bad = run.probe_runs.get(kind + "+", 0), run.probe_runs.get(kind + "-", 0)
            good, bad = (good + 1, 0) if ok else (0, bad + 1)
            run.probe_runs[kind + "+"], run.probe_runs[kind + "-"] = good, bad
            if kind == "readinessProbe":
                if ok and good >= int(probe.get("successThreshold") or 1):
                    run.ready = True
                elif not ok and bad >= int(probe.get("failureThreshold") or 3):
                    run.ready = False
            elif kind == "startupProbe" and ok:
                run.started = True
            elif not ok and bad >= int(probe.get("failureThreshold") or 3):
                log.info("probe failed: restarting", pod=self.name, container=run.name, probe=kind)
                self._kill(run, "Error")
                return
        if "readinessProbe" not in run.spec and run.started:
            run.ready = True

    def _port(self, run: ContainerRun, port: Any) -> int:
        if isinstance(port, int) or str(port).isdigit():
            return int(port)
        for p in run.spec.get("ports") or []:
            if p.get("name") == port:
                return int(p["containerPort"])
        for other in self.containers:
            for p in other.spec.get("ports") or []:
                if p.get("name") == port:
                    return int(p["containerPort"])
        raise ValueError(f"no port named {port!r}")

    def _check(self, run: ContainerRun, probe: Obj) -> bool:
        timeout = float(probe.get("timeoutSeconds") or 1)
        try:
            if "httpGet" in probe:
                get = probe["httpGet"]
                scheme = str(get.get("scheme") or "HTTP").lower()
                url = f"{scheme}://{get.get('host') or self.ip}:{self._port(run, get['port'])}{get.get('path') or '/'}"
                context = ssl._create_unverified_context() if scheme == "https" else None  # as the kubelet: unverified
                with urllib.request.urlopen(url, timeout=timeout, context=context) as response:
                    return 200 <= response.status < 400
            if "tcpSocket" in probe:
                port = self._port(run, probe["tcpSocket"]["port"])
                with socket.create_connection((self.ip, port), timeout=timeout):
                    return True
            if "exec" in probe:
                argv = self.argv({**run.spec, "command": probe["exec"]["command"], "args": []})
                if argv is None:
                    return False
                done = subprocess.run(
                    self.in_pod(run.spec, argv),
                    env=self.env(run.spec),
                    capture_output=True,
                    timeout=timeout,
                    check=False,
                )
                return done.returncode == 0
        except (OSError, ValueError, subprocess.TimeoutExpired):
            return False
        return False

    # -- status ------------------------------------------------------------------------------------------

    def _container_status(self, run: ContainerRun) -> dict[str, Any]:
        state: dict[str, Any]
        if run.process is not None:
            state = {"running": {"startedAt": run.started_at}}
        elif run.terminated is not None:
            state = {"terminated": run.terminated}
        else:
            reason, message = run.waiting or ("ContainerCreating", "")
            state = {"waiting": {"reason": reason, **({"message": message} if message else {})}}
        status: dict[str, Any] = {
            "name": run.name,
            "image": run.spec.get("image"),
            "imageID": "",
            "ready": run.ready and run.process is not None,
            "restartCount": run.restarts,
            "state": state,
        }
        if not run.init:
            status["started"] = run.started and run.process is not None
        if run.last_terminated is not None:
            status["lastState"] = {"terminated": run.last_terminated}
        return status

    def report(self) -> None:
        containers = [self._container_status(r) for r in self.containers]
        ready = self.phase == "Running" and all(c["ready"] for c in containers)
        initialized = all(r.done for r in self.inits)
        conditions = {
            "Initialized": initialized,
            "ContainersReady": ready,
            "Ready": ready,
        }
        summary = (self.phase, tuple(sorted(conditions.items())), repr(containers))
        if summary == self._last_status:
            return
        old = {c.get("type"): c for c in _get(self.pod, "status", "conditions") or []}
        now = _now()
        status: dict[str, Any] = {
            "phase": self.phase,
            "conditions": [
                {
                    "type": kind,
                    "status": "True" if value else "False",
                    "lastTransitionTime": (
                        old[kind].get("lastTransitionTime")
                        if kind in old and old[kind].get("status") == ("True" if value else "False")
                        else now
                    ),
                }
                for kind, value in conditions.items()
            ]
            + [c for kind, c in old.items() if kind not in conditions],
            "containerStatuses": containers,
            "podIP": self.ip,
            "podIPs": [{"ip": self.ip}],
        }
        if self.inits:
            status["initContainerStatuses"] = [self._container_status(r) for r in self.inits]
        try:
            patched = self.kubelet.core.patch_namespaced_pod_status(self.name, self.namespace, {"status": status})
        except ApiException as err:
            if err.status == 404:
                self.stopping = True
                return
            raise
        self.pod = self.kubelet.api.sanitize_for_serialization(patched)
        self._last_status = summary

    # -- ending ------------------------------------------------------------------------------------------

    def stop(self, grace_seconds: float) -> None:
        self.stopping = True
        for run in [*self.inits, *self.containers]:
            self._signal(run, signal.SIGTERM)
        deadline = time.monotonic() + grace_seconds
        for run in [*self.inits, *self.containers]:
            if run.process is None:
                continue
            try:
                run.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._signal(run, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    run.process.wait(timeout=10)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        _ip("route", "del", f"{self.ip}/32", "dev", self.host_veth)
        _ip("link", "del", self.host_veth)
        _ip("netns", "del", self.netns)
        self.kubelet.addresses.release(self.uid)
        shutil.rmtree(Path("/etc/netns") / self.netns, ignore_errors=True)
        with contextlib.suppress(OSError):
            (STAGING / self.netns).rmdir()


def expand(value: str, env: Mapping[str, str]) -> str:
    """``$(VAR)`` references to earlier variables, as the kubelet expands them (``$$`` escapes)."""
    out, i = [], 0
    while i < len(value):
        if value.startswith("$$", i):
            out.append("$")
            i += 2
        elif value.startswith("$(", i) and ")" in value[i:]:
            end = value.index(")", i)
            name = value[i + 2 : end]
            out.append(env.get(name, value[i : end + 1]))
            i = end + 1
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


# --------------------------------------------------------------------------------------- kubelet


@dataclass
class PodKubelet:
    """Runs the annotated pods of ``namespace`` (see the module docstring); ``start`` / ``stop``."""

    api: ApiClient
    namespace: str
    apiserver: tuple[str, int]  # the local API server's loopback address
    root: Path
    repo_root: Path = Path(__file__).resolve().parents[3]
    interval_seconds: float = 1.0
    refresh_seconds: float = 30.0
    # image reference (without digest) → the source tree of the module's build it stands for (an older
    # release: tests/upgrade/releases.py), mounted in its containers and first on their PYTHONPATH.
    image_trees: dict[str, Path] = field(default_factory=dict)
    addresses: PodAddresses = field(default_factory=PodAddresses)
    pods: list[Obj] = field(default_factory=list)
    services: list[Obj] = field(default_factory=list)
    running: dict[str, PodRun] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _relay: Relay | None = None
    _forwarding: str | None = None
    _added: list[str] = field(default_factory=list)
    _endings: list[threading.Thread] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.core = CoreV1Api(self.api)

    def claim_dir(self, namespace: str, claim: str) -> Path:
        return self.root / "claims" / namespace / claim

    def start(self) -> PodKubelet:
        try:
            return self._start()
        except BaseException:
            self.stop()  # nothing of a start cut short stays on the machine (addresses, forwarding)
            raise

    def _start(self) -> PodKubelet:
        self.root.mkdir(parents=True, exist_ok=True)
        for address in (GATEWAY, KUBERNETES_SERVICE_IP):
            added = _ip("address", "add", f"{address}/32", "dev", "lo")
            _must(added, f"address {address}")
            if added.returncode == 0:
                self._added.append(address)
        forwarding = Path("/proc/sys/net/ipv4/ip_forward")
        self._forwarding = forwarding.read_text().strip()
        forwarding.write_text("1")
        self._relay = Relay((KUBERNETES_SERVICE_IP, KUBERNETES_SERVICE_PORT), self.apiserver)
        self._relay.start()
        self._thread = threading.Thread(target=self._loop, name="pod-kubelet", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for ending in self._endings:
            ending.join(timeout=60)
        runs = list(self.running.values())
        threads = [threading.Thread(target=run.stop, args=(5,)) for run in runs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        self.running.clear()
        if self._relay is not None:
            self._relay.stop()
        for address in self._added:
            _ip("address", "del", f"{address}/32", "dev", "lo")
        if self._forwarding is not None:
            Path("/proc/sys/net/ipv4/ip_forward").write_text(self._forwarding)

    def __enter__(self) -> PodKubelet:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync()
            except Exception as err:
                log.warning("kubelet pass failed", error=str(err))
            self._stop.wait(self.interval_seconds)

    def sync(self) -> None:
        """One level-triggered pass: bind claims, start new pods, end deleted ones, refresh names."""
        listed = self.api.sanitize_for_serialization(self.core.list_namespaced_pod(self.namespace))["items"]
        self.services = self.api.sanitize_for_serialization(self.core.list_namespaced_service(self.namespace))["items"]
        ours = [p for p in listed if RUN_ANNOTATION in (_get(p, "metadata", "annotations") or {})]
        self.pods = ours
        self._bind_claims(ours)
        seen = set()
        for pod in ours:
            uid = pod["metadata"]["uid"]
            seen.add(uid)
            run = self.running.get(uid)
            if _get(pod, "metadata", "deletionTimestamp"):
                if run is not None:
                    self.running.pop(uid)
                    grace = float(_get(pod, "metadata", "deletionGracePeriodSeconds") or 30)
                    self._ending(self._end, run, pod, grace)
                elif uid not in self.running:
                    self._remove(pod)
                continue
            if run is None and _get(pod, "status", "phase") == "Running":
                run = PodRun(self, pod, self.addresses.allocate(uid))
                log.info("pod starting", pod=run.name, address=run.ip, node=_get(pod, "spec", "nodeName"))
                self.running[uid] = run
                run.start()
            elif run is not None:
                run.pod = {**pod, "status": run.pod.get("status") or pod.get("status")}
        for uid in set(self.running) - seen:
            self._ending(self.running.pop(uid).stop, 0)
        for run in self.running.values():
            run.write_hosts()

    def _ending(self, target: Callable[..., None], *args: Any) -> None:
        """A pod's end in a thread of its own (its grace period), joined by ``stop``."""
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._endings.append(thread)
        thread.start()

    def _end(self, run: PodRun, pod: Obj, grace: float) -> None:
        run.stop(grace)
        self._remove(pod)

    def _remove(self, pod: Obj) -> None:
        meta = pod["metadata"]
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
        with contextlib.suppress(ApiException):
            self.core.delete_namespaced_pod(meta["name"], meta["namespace"], body=body)

    def _bind_claims(self, pods: list[Obj]) -> None:
        """A hostPath PersistentVolume for each Pending claim these pods mount (a provisioner's work)."""
        wanted = {
            v["persistentVolumeClaim"]["claimName"]
            for p in pods
            for v in _get(p, "spec", "volumes") or []
            if "persistentVolumeClaim" in v
        }
        if not wanted:
            return
        claims = self.core.list_namespaced_persistent_volume_claim(self.namespace).items
        for claim in claims:
            if claim.metadata.name not in wanted or claim.status.phase != "Pending" or claim.spec.volume_name:
                continue
            name = f"standin-{claim.metadata.uid}"
            body = {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": name, "labels": {"ai-inference.deckhouse.io/stand-in": "volume"}},
                "spec": {
                    "capacity": {"storage": (claim.spec.resources.requests or {}).get("storage", "1Gi")},
                    "accessModes": claim.spec.access_modes,
                    "persistentVolumeReclaimPolicy": "Delete",
                    "storageClassName": claim.spec.storage_class_name or "",
                    "hostPath": {"path": str(self.claim_dir(self.namespace, claim.metadata.name))},
                    "claimRef": {
                        "namespace": self.namespace,
                        "name": claim.metadata.name,
                        "uid": claim.metadata.uid,
                    },
                },
            }
            try:
                self.core.create_persistent_volume(body)
            except ApiException as err:
                if err.status != 409:
                    raise
        # A pod the scheduler refused for the unbound claim waits for its five-minute flush: made again.
        for pod in pods:
            if _get(pod, "spec", "nodeName") or _get(pod, "metadata", "deletionTimestamp"):
                continue
            refused = [
                c
                for c in _get(pod, "status", "conditions") or []
                if c.get("type") == "PodScheduled" and "PersistentVolumeClaim" in str(c.get("message"))
            ]
            if refused and self._all_bound(pod):
                self._remove(pod)

    def _all_bound(self, pod: Obj) -> bool:
        for v in _get(pod, "spec", "volumes") or []:
            if "persistentVolumeClaim" in v:
                claim = self.core.read_namespaced_persistent_volume_claim(
                    v["persistentVolumeClaim"]["claimName"], self.namespace
                )
                if claim.status.phase != "Bound":
                    return False
        return True


def apiserver_address(server: str) -> tuple[str, int]:
    """``https://127.0.0.1:6443`` → ``("127.0.0.1", 6443)``."""
    hostport = server.split("://", 1)[-1].split("/", 1)[0]
    host, _, port = hostport.rpartition(":")
    ipaddress.ip_address(host)
    return host, int(port)
