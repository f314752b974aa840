"""What a kubelet and a storage provisioner would do, for the local cluster (kwok pods run nothing).

* For every order workload with a ready replica, a stand-in OpenAI-compatible runtime serving the
  model the StatefulSet names, with the order's token. All of them are served by one multiplexed
  server on one loopback port (``runtime.MultiplexedRuntime``), each under its own path prefix,
  ``http://127.0.0.1:<port>/o/<namespace>/<name>``: a thousand orders are one thread, not a
  thousand servers. The order's Service is annotated with that URL so the probe activity and the
  observer (``health.probeTargetAnnotation``) reach it. ``fail``/``recover`` inject API errors;
  ``stop`` makes the endpoint absent. ``targets()`` lists every order's URL (for scraping its
  ``/metrics``: ``<url>/metrics``).
* For the pods of an order whose model the local stack makes on this machine (the tiny chat
  model), the real engine instead (``devstack.standins.engine``): first the pod's own
  ``model-fetcher`` init container downloads the model into its volume with the Hugging Face CLI
  from a hub (``hub_url``; by default the fleet serves ``hub.standard_hub`` itself, started when the
  first such pod needs it), then the replica's own command and environment load it, its pod's status
  following the fetcher, the engine's probes and crashes; at most ``engine.MAX_ENGINES`` at once.
  ``engine(namespace, name)`` is the order's first.
* For every Pending PersistentVolumeClaim of an order, a hostPath PersistentVolume bound to it,
  so the scheduler can place pods that carry a model volume.
* A pod of an order the scheduler last refused for an unbound volume that is bound by now is
  made again (see ``_reschedule_stale_pods``).
* The kubelet's log API (``kubectl logs``, ``CoreV1Api.read_namespaced_pod_log``): kube-apiserver relays
  pods/log to the nodes' kubelet endpoint, one loopback port per local cluster that the fleet serves
  (``kubelet_api``): a pod's ``model-fetcher``, ``runtime`` (the engine) and ``endpoint-front``
  output, from the files the fleet keeps them in (``engine_root/<pod uid>/``). The port is the one
  the cluster's nodes publish (``status.daemonEndpoints.kubeletEndpoint.Port``, found at ``start``)
  unless ``kubelet_port`` names it; a fleet that cannot listen there logs why and goes on without.
* An image whose registry host is under ``.invalid`` (RFC 2606: a name that never resolves) cannot
  be pulled, as a kubelet would find: the order's pods report their containers
  ``waiting: ImagePullBackOff`` with the kubelet's message, are not ready, and no runtime serves
  them (``_refuse_unpullable_images``). The module's ``workload.imageRegistry`` pointed at such a
  host is how a test makes an image that cannot be pulled.

Like a kubelet, it acts on a change when it happens, whatever the number of orders: the order
StatefulSets and the PersistentVolumeClaims come from informers (watches), and an event of either
wakes the serving and binding passes, which read the informers' caches. The stale-pod pass lists
only the orders' unscheduled pods (``spec.nodeName=``), as plain JSON, every ``interval_seconds``.

Dev/test only: it is started by ``ai-inference dev up`` and by the end-to-end tests.
"""

from __future__ import annotations

import base64
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api
from kubernetes.client.exceptions import ApiException

from activities.builders.common import (
    FETCHER_CONTAINER,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    MODEL_VOLUME,
    RUNTIME_CONTAINER,
    RUNTIME_PORT,
    selector_labels,
)
from activities.builders.endpoint_front import FRONT_CONTAINER
from devstack.cluster.inventory import KWOK_ANNOTATION
from devstack.cluster.launcher import POD_CIDR
from devstack.standins import engine as eng
from devstack.standins import model_fetcher
from devstack.standins.hub import HubServer, standard_hub
from devstack.standins.kubelet_api import ContainerLog, KubeletLogServer, LogUnavailableError
from devstack.standins.pod_network import PodAddresses
from devstack.standins.runtime import MultiplexedRuntime, OrderRuntime
from worker.observer.informer import (
    MODULE_SELECTOR,
    STATEFULSET,
    Informer,
    InformerItem,
    Listed,
    ListWatch,
    Resource,
    list_all,
)

log = structlog.get_logger(__name__)

PROBE_URL_ANNOTATION = "ai.deckhouse.io/stand-in-url"
# The scheduler's verdict on a pod whose PersistentVolumeClaim was not bound yet.
UNBOUND_VOLUME_VERDICT = "unbound immediate PersistentVolumeClaims"
CLAIM = "PersistentVolumeClaim"
Obj = Mapping[str, Any]
# The file under ``engine_root/<pod uid>/`` each container's output goes to, as a kubelet serves it.
CONTAINER_LOG_FILES = {
    FETCHER_CONTAINER: "model-fetcher.log",
    RUNTIME_CONTAINER: "engine.log",
    FRONT_CONTAINER: "front.log",
}


def _get(obj: Obj, *path: str) -> Any:
    """The value at ``path`` of a JSON object, None where a step is missing."""
    found: Any = obj
    for step in path:
        if not isinstance(found, Mapping):
            return None
        found = found.get(step)
    return found


def unpullable(image: str) -> bool:
    """An image no registry serves: its registry host is under ``.invalid`` (never resolves)."""
    host, slash, _ = image.partition("/")
    return bool(slash) and host.split(":", 1)[0].endswith(".invalid")


def unpullable_images(statefulset: Obj) -> list[str]:
    spec = _get(statefulset, "spec", "template", "spec") or {}
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    return [str(c["image"]) for c in containers if c.get("image") and unpullable(str(c["image"]))]


def image_pull_status_patch(pod: Obj, now: str) -> dict[str, Any] | None:
    """The status a kubelet writes for a pod whose images cannot be pulled: each such container
    ``waiting: ImagePullBackOff`` (the first init container that cannot be pulled keeps the rest
    ``PodInitializing``), the pod not ready. None when it already says so."""
    spec = pod.get("spec") or {}
    statuses = {s.get("name"): s for s in _get(pod, "status", "containerStatuses") or []}
    reported = [*(_get(pod, "status", "initContainerStatuses") or []), *statuses.values()]
    if any(((s.get("state") or {}).get("waiting") or {}).get("reason") == "ImagePullBackOff" for s in reported):
        return None

    def waiting(container: Obj, reason: str, message: str | None) -> dict[str, Any]:
        state: dict[str, Any] = {"reason": reason}
        if message:
            state["message"] = message
        return {
            "name": container["name"],
            "image": container.get("image", ""),
            "imageID": "",
            "ready": False,
            "started": False,
            "restartCount": 0,
            "state": {"waiting": state},
        }

    def pull(container: Obj) -> dict[str, Any]:
        image = container.get("image", "")
        return waiting(container, "ImagePullBackOff", f'Back-off pulling image "{image}"')

    init = [c for c in spec.get("initContainers") or []]
    blocked = next((c for c in init if unpullable(str(c.get("image") or ""))), None)
    patch: dict[str, Any] = {}
    if blocked is not None:
        patch["initContainerStatuses"] = [
            pull(c) if c is blocked else waiting(c, "PodInitializing", None) for c in init
        ]
        patch["containerStatuses"] = [waiting(c, "PodInitializing", None) for c in spec.get("containers") or []]
    else:
        patch["containerStatuses"] = [
            pull(c) if unpullable(str(c.get("image") or "")) else statuses.get(c["name"]) or waiting(c, "Waiting", None)
            for c in spec.get("containers") or []
        ]
    conditions = []
    for condition in _get(pod, "status", "conditions") or []:
        if condition.get("type") in ("Ready", "ContainersReady"):
            condition = {**condition, "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": now}
        conditions.append(condition)
    patch["conditions"] = conditions
    return {"status": patch}


def served_model(statefulset: Obj) -> str | None:
    """The --served-model-name of the runtime container."""
    for container in _get(statefulset, "spec", "template", "spec", "containers") or []:
        words = [*(container.get("command") or []), *(container.get("args") or [])]
        for i, word in enumerate(words):
            if word == "--served-model-name" and i + 1 < len(words):
                return str(words[i + 1])
            if word.startswith("--served-model-name="):
                return word.split("=", 1)[1]
    return None


@dataclass
class FetchAttempts:
    """One pod's ``model-fetcher`` as the kubelet keeps it: its process while it runs, how often it
    failed (its ``restartCount``), its last failure, and when it may run again."""

    process: Any = None
    done: bool = False
    failures: int = 0
    next_try: float = 0.0
    last: dict[str, Any] | None = None
    # Every attempt that ended: (wall-clock start, wall-clock end, exit code), for the benchmarks.
    ended: list[tuple[float, float, int]] = field(default_factory=list)
    started_at: float = 0.0


@dataclass
class StandInFleet:
    api: ApiClient
    interval_seconds: float = 0.5
    # How long a pod may stay refused for a volume that is bound by now before it is made again.
    stale_verdict_seconds: float = 5.0
    runtimes: dict[str, OrderRuntime] = field(default_factory=dict)
    # The one server every order's stand-in is served from (started with the fleet, or on first use).
    server: MultiplexedRuntime = field(default_factory=MultiplexedRuntime)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # pod uid -> when it was first seen refused for a volume that is bound by now
    _stale_since: dict[str, float] = field(default_factory=dict)
    # namespace/name -> the status its runtime fails with from the start
    _fail_from_start: dict[str, int] = field(default_factory=dict)
    # namespace/name -> the StatefulSet revision whose pods the runtime was started for
    _revisions: dict[str, str | None] = field(default_factory=dict)
    # The order StatefulSets and every PersistentVolumeClaim, as watches keep them; an event sets _wake.
    _informers: dict[str, Informer] = field(default_factory=lambda: {k: Informer(k) for k in (STATEFULSET, CLAIM)})
    _watches: list[ListWatch] = field(default_factory=list)
    _wake: threading.Event = field(default_factory=threading.Event)
    # Real engines (orders of a model the local stack makes): pod uid -> its engine.
    engines: dict[str, eng.EngineReplica] = field(default_factory=dict)
    # Where engines keep their logs and HOME folders.
    engine_root: Path = field(default_factory=lambda: Path(tempfile.gettempdir()) / "ai-inference-standin" / "engines")
    # pod uid -> the waiting reason last written for a pod that has no engine (over the cap, config error)
    _engine_waiting: dict[str, str] = field(default_factory=dict)
    # namespace/name -> the engine URL its Service was annotated with
    _annotated: dict[str, str] = field(default_factory=dict)
    # pod uid -> its runtime container's preStop sleep (seconds), read when its engine started
    _pre_stop: dict[str, float] = field(default_factory=dict)
    # pod uid -> when its engine stops (monotonic): a pod going keeps it through its preStop sleep, as a
    # kubelet runs the hook before it stops the containers
    _leaving: dict[str, float] = field(default_factory=dict)
    # HF_ENDPOINT of the hub the pods' model fetchers download from; None: the fleet's own hub
    # (hub.standard_hub; with hub_large, the ~200 MiB model too).
    hub_url: str | None = None
    hub_large: bool = False
    _hub: HubServer | None = None
    # pod uid -> its model fetcher's attempts (running, failed and waiting out its back-off, or done)
    _fetches: dict[str, FetchAttempts] = field(default_factory=dict)
    # Real engines' pod addresses made real on the loopback interface, where this process may, when
    # real_pod_addresses is asked for (what routes by EndpointSlice: the Ingress controller's test,
    # dev up); else the fronts keep loopback ports, as every other test has them.
    real_pod_addresses: bool = False
    pod_addresses: PodAddresses = field(default_factory=lambda: PodAddresses(POD_CIDR))
    # The port of the nodes' kubelet API (pods/log) the fleet serves; None: the one the cluster's kwok
    # nodes publish (daemonEndpoints), looked up at start. ``kubelet`` is its server once listening.
    kubelet_port: int | None = None
    kubelet: KubeletLogServer | None = None

    def __post_init__(self) -> None:
        self.core = CoreV1Api(self.api)
        self.apps = AppsV1Api(self.api)
        self._resources = [
            Resource(STATEFULSET, self.apps.list_stateful_set_for_all_namespaces, MODULE_SELECTOR),
            Resource(CLAIM, self.core.list_persistent_volume_claim_for_all_namespaces),
        ]
        # The orders' pods no node was picked for yet (few: a field selector, not every pod).
        self._unscheduled = Resource("Pod", self.core.list_pod_for_all_namespaces, MODULE_SELECTOR, "spec.nodeName=")

    # ---------------------------------------------------------------- control

    def start(self) -> StandInFleet:
        self.server.start()
        self._start_kubelet_api()
        self._watches = [ListWatch(resource, self._deliver) for resource in self._resources]
        for watch in self._watches:
            watch.start()
        self._thread = threading.Thread(target=self._loop, name="stand-in-fleet", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        for watch in self._watches:
            watch.stop()
        if self._thread:
            self._thread.join(10)
        with self._lock:
            for runtime in self.runtimes.values():
                runtime.stop()
            self.runtimes.clear()
            engines = list(self.engines.values())
            self.engines.clear()
        stoppers = [threading.Thread(target=self._stop_replica, args=(replica,), daemon=True) for replica in engines]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join(30)
        with self._lock:
            fetching = [a.process for a in self._fetches.values() if a.process is not None]
            self._fetches.clear()
        for process in fetching:
            model_fetcher.kill(process)
        if self._hub is not None:
            self._hub.stop()
            self._hub = None
        self.pod_addresses.release_all()
        self.server.stop()
        if self.kubelet is not None:
            self.kubelet.stop()
            self.kubelet = None

    # ------------------------------------------------------------- the kubelet's log API

    def _start_kubelet_api(self) -> None:
        """Serve pods' logs where kube-apiserver looks for the nodes' kubelets; without, only log why."""
        port = self.kubelet_port if self.kubelet_port is not None else self._published_kubelet_port()
        if port is None:
            log.warning(
                "pod logs unavailable: the cluster's nodes publish no kubelet port "
                "(a cluster started before the launcher allocated one? `cluster down` and up)"
            )
            return
        try:
            self.kubelet = KubeletLogServer(self.container_log, port).start()
        except OSError as err:
            log.warning("pod logs unavailable: cannot listen on the nodes' kubelet port", port=port, error=str(err))
            return
        log.info("kubelet log API serving", url=self.kubelet.url)

    def _published_kubelet_port(self) -> int | None:
        """The kubelet port the cluster's kwok nodes publish (one kwok: one port for all)."""
        try:
            nodes = self.core.list_node().items
        except ApiException as err:
            log.warning("nodes not listed for their kubelet port", status=err.status)
            return None
        for node in nodes:
            if (node.metadata.annotations or {}).get(KWOK_ANNOTATION) != "fake":
                continue
            endpoints = node.status.daemon_endpoints if node.status else None
            kubelet = endpoints.kubelet_endpoint if endpoints else None
            if kubelet is not None and kubelet.port:
                return int(kubelet.port)
        return None

    def container_log(self, namespace: str, pod: str, container: str) -> ContainerLog:
        """Where the current pod ``namespace/pod``'s ``container`` output is (whether written yet or not),
        and whether it runs; ``LogUnavailableError`` (404) for a pod or container the fleet does not know."""
        try:
            current = self.core.read_namespaced_pod(pod, namespace)
        except ApiException as err:
            if err.status == 404:
                raise LogUnavailableError(404, f'pod "{namespace}/{pod}" not found') from None
            raise
        spec = current.spec
        names = {c.name for c in [*(spec.init_containers or []), *(spec.containers or [])]} if spec else set()
        file = CONTAINER_LOG_FILES.get(container)
        if container not in names or file is None:
            raise LogUnavailableError(404, f'container "{container}" not found in pod "{namespace}/{pod}"')
        uid = str(current.metadata.uid)

        def running() -> bool:
            with self._lock:
                if container == FETCHER_CONTAINER:
                    attempts = self._fetches.get(uid)
                    return attempts is not None and attempts.process is not None
                return uid in self.engines

        return ContainerLog(self.engine_root / uid / file, running)

    def _stop_replica(self, replica: eng.EngineReplica) -> None:
        replica.stop()
        if replica.front_host != eng.HOST:
            self.pod_addresses.release(replica.front_host)

    def fail(self, namespace: str, name: str, status: int = 503) -> None:
        with self._lock:
            self.runtimes[f"{namespace}/{name}"].fail(status)

    def fail_from_start(self, namespace: str, name: str, status: int = 503) -> None:
        """The order's runtime, once the fleet starts one, answers ``status`` from its first request."""
        with self._lock:
            self._fail_from_start[f"{namespace}/{name}"] = status

    def recover(self, namespace: str, name: str) -> None:
        with self._lock:
            self.runtimes[f"{namespace}/{name}"].recover()

    def runtime(self, namespace: str, name: str) -> OrderRuntime | None:
        with self._lock:
            return self.runtimes.get(f"{namespace}/{name}")

    def targets(self) -> dict[str, str]:
        """``namespace/name`` → the URL of the order's stand-in or first engine (its ``/metrics`` is under it)."""
        with self._lock:
            found = {key: runtime.url for key, runtime in self.runtimes.items()}
            for replica in sorted(self.engines.values(), key=lambda r: r.pod_key, reverse=True):
                found[replica.pod_key.rsplit("-", 1)[0]] = replica.url
            return found

    def engine(self, namespace: str, name: str) -> eng.EngineReplica | None:
        """The real engine of the order's first replica that has one (lowest ordinal)."""
        with self._lock:
            replicas = [r for r in self.engines.values() if r.pod_key.rsplit("-", 1)[0] == f"{namespace}/{name}"]
            # A replica going (its preStop sleep) is no longer among the Service's endpoints.
            staying = [r for r in replicas if r.pod_uid not in self._leaving]
        replicas = staying or replicas
        return min(replicas, key=lambda r: int(r.pod_key.rsplit("-", 1)[1])) if replicas else None

    def engine_replicas(self) -> list[eng.EngineReplica]:
        with self._lock:
            return list(self.engines.values())

    # ------------------------------------------------------------------- loop

    def _deliver(self, item: InformerItem) -> None:
        """From the watch's thread: the cache takes the listing or the event, and the loop wakes."""
        informer = self._informers[item.kind]
        with self._lock:
            if isinstance(item, Listed):
                informer.listed(item.items)
            else:
                informer.watched(item.type, item.obj)
        self._wake.set()

    def _loop(self) -> None:
        housekeeping_at = 0.0
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self._bind_volumes()
                self._refuse_unpullable_images()
                self._serve_ready()
                self._serve_engines()
            except Exception as err:  # keep serving the others whatever one object does
                log.warning("stand-in fleet serving pass failed", error=f"{type(err).__name__}: {err}")
            now = time.monotonic()
            if now >= housekeeping_at:
                try:
                    self._reschedule_stale_pods()
                except Exception as err:
                    log.warning("stand-in fleet pass failed", error=f"{type(err).__name__}: {err}")
                # The pass lists the orders' unscheduled pods: it rests at least as long as it worked.
                took = time.monotonic() - now
                housekeeping_at = time.monotonic() + max(self.interval_seconds, took)
            self._wake.wait(max(0.0, min(self.interval_seconds, housekeeping_at - time.monotonic())))

    def reconcile_once(self) -> None:
        """One whole pass now: volumes, stale pods and serving (listed afresh when no watch runs)."""
        if not self._watches:
            for resource in self._resources:
                items, _ = list_all(resource)
                with self._lock:
                    self._informers[resource.kind].listed(items)
        self._bind_volumes()
        self._reschedule_stale_pods()
        self._refuse_unpullable_images()
        self._serve_ready()
        self._serve_engines()

    def _serve_ready(self) -> None:
        """A runtime for every order StatefulSet with a ready replica (started again when its model
        changed or a new revision rolled out); none for a StatefulSet that is gone."""
        with self._lock:
            sets_informer = self._informers[STATEFULSET]
            if not sets_informer.synced:
                return  # not listed yet: every runtime would look orphaned
            sets = list(sets_informer.cache.items())
        alive = set()
        for key, sts in sets:
            if eng.runs_engine(sts) or unpullable_images(sts):
                continue  # its pods run the real engine (_serve_engines), or nothing (no image)
            alive.add(key)
            if (_get(sts, "status", "readyReplicas") or 0) < 1:
                continue
            namespace, name = key.split("/", 1)
            standing = self.runtime(namespace, name)
            if standing is not None and (standing.config.model != served_model(sts) or self._rolled(key, sts)):
                # An edit changed the model, or pods of a new revision run (a rotated token rolls
                # them): the "pod" starts again, reading its model and token as a real one does.
                with self._lock:
                    self.runtimes.pop(key).stop()
                standing = None
            if standing is None:
                self._serve(namespace, name, sts)
        with self._lock:
            for key in set(self.runtimes) - alive:
                self.runtimes.pop(key).stop()
                self._revisions.pop(key, None)

    def _rolled(self, key: str, sts: Obj) -> bool:
        """Whether a pod of another revision than the runtime was started for now runs: real replicas
        read their token (an env from the Secret) when they start, so the stand-in must start again."""
        status = sts.get("status") or {}
        update = status.get("updateRevision")
        return bool(update and update != self._revisions.get(key) and (status.get("updatedReplicas") or 0) >= 1)

    def _serve(self, namespace: str, name: str, sts: Obj) -> None:
        model = served_model(sts)
        if model is None:
            return
        token = self._token(namespace, f"{name}-auth")
        if not self.server.running:
            self.server.start()
        runtime = self.server.add(namespace, name, model, token)
        with self._lock:
            failing = self._fail_from_start.get(f"{namespace}/{name}")
            if failing is not None:
                runtime.fail(failing)
            self.runtimes[f"{namespace}/{name}"] = runtime
            # The revision a ready pod runs now: the one the update rolled out once a pod of it runs.
            status = sts.get("status") or {}
            rolled = status.get("updateRevision") if (status.get("updatedReplicas") or 0) >= 1 else None
            self._revisions[f"{namespace}/{name}"] = rolled or status.get("currentRevision")
        try:
            self.core.patch_namespaced_service(
                name, namespace, {"metadata": {"annotations": {PROBE_URL_ANNOTATION: runtime.url}}}
            )
        except ApiException as err:
            log.warning("service not annotated", order=f"{namespace}/{name}", status=err.status)
        log.info("stand-in runtime serving", order=f"{namespace}/{name}", url=runtime.url, model=model)

    def _refuse_unpullable_images(self) -> None:
        """The pods of the order StatefulSets that name an image no registry serves report it as a
        kubelet would (``image_pull_status_patch``); the pods are listed for those StatefulSets only."""
        with self._lock:
            if not self._informers[STATEFULSET].synced:
                return
            sets = [(k, s) for k, s in self._informers[STATEFULSET].cache.items() if unpullable_images(s)]
        for key, _sts in sets:
            namespace, name = key.split("/", 1)
            selector = ",".join(f"{k}={v}" for k, v in selector_labels(name).items())
            pods = self.api.sanitize_for_serialization(
                self.core.list_namespaced_pod(namespace, label_selector=selector).items
            )
            for pod in pods:
                meta = pod["metadata"]
                if meta.get("deletionTimestamp") or _get(pod, "status", "phase") != "Running":
                    continue  # kwok has not "started" it yet (it would overwrite the status), or it goes
                patch = image_pull_status_patch(pod, eng._now())
                if patch is None:
                    continue
                try:
                    self.core.patch_namespaced_pod_status(meta["name"], namespace, patch)
                except ApiException as err:
                    if err.status != 404:
                        raise
                log.info(
                    "image cannot be pulled",
                    pod=f"{namespace}/{meta['name']}",
                    images=sorted(set(unpullable_images(_sts))),
                )

    # ---------------------------------------------------------------- real engines

    def _serve_engines(self) -> None:
        """Real engines for the running pods of orders of a model the local stack makes; each stopped
        when its pod goes (or is being deleted), as a kubelet stops a container."""
        with self._lock:
            sets_informer = self._informers[STATEFULSET]
            if not sets_informer.synced:
                return
            sets = [(key, sts) for key, sts in sets_informer.cache.items() if eng.runs_engine(sts)]
        live: set[str] = set()
        for key, _sts in sets:
            namespace, name = key.split("/", 1)
            selector = ",".join(f"{k}={v}" for k, v in selector_labels(name).items())
            pods = self.api.sanitize_for_serialization(
                self.core.list_namespaced_pod(namespace, label_selector=selector).items
            )
            for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
                meta = pod["metadata"]
                if meta.get("deletionTimestamp"):
                    continue  # going: its engine runs on through its preStop sleep (below)
                if _get(pod, "status", "phase") != "Running":
                    continue  # not started by the "node" yet (kwok marks it Running)
                live.add(meta["uid"])
                with self._lock:
                    known = meta["uid"] in self.engines
                if not known:
                    self._start_engine(pod)
            self._annotate_engine_url(namespace, name)
        # A going pod's engine stops once its preStop sleep is over: the loop passes every interval_seconds.
        now = time.monotonic()
        with self._lock:
            for uid in self.engines:
                if uid not in live and uid not in self._leaving:
                    self._leaving[uid] = now + self._pre_stop.get(uid, 0.0)
            gone = [uid for uid in self.engines if uid not in live and self._leaving.get(uid, 0.0) <= now]
            stopping = [self.engines.pop(uid) for uid in gone]
            for uid in gone:
                self._leaving.pop(uid, None)
                self._pre_stop.pop(uid, None)
            self._engine_waiting = {uid: r for uid, r in self._engine_waiting.items() if uid in live}
            ended = [self._fetches.pop(uid) for uid in list(self._fetches) if uid not in live]
        for attempts in ended:  # a pod that goes takes its init container with it
            if attempts.process is not None:
                model_fetcher.kill(attempts.process)
        for replica in stopping:
            log.info("engine stopped: its pod is gone", pod=replica.pod_key)
            threading.Thread(
                target=self._stop_replica, args=(replica,), name=f"stop {replica.pod_key}", daemon=True
            ).start()

    def _start_engine(self, pod: Obj) -> None:
        meta = pod["metadata"]
        namespace, pod_name, uid = meta["namespace"], meta["name"], meta["uid"]
        spec = pod.get("spec") or {}
        runtime = eng.container(spec, RUNTIME_CONTAINER)
        if runtime is None:
            return
        sleep = ((runtime.get("lifecycle") or {}).get("preStop") or {}).get("sleep") or {}
        with self._lock:
            self._pre_stop[uid] = float(sleep.get("seconds") or 0)
        with self._lock:
            at_cap = len(self.engines) >= eng.MAX_ENGINES
        if at_cap:
            self._engine_waits(
                pod,
                "ContainerCreating",
                f"the local stack runs at most {eng.MAX_ENGINES} real engines at once; "
                "this replica waits for one to stop",
            )
            return
        try:
            env = eng.resolve_env(
                runtime.get("env") or [], lambda secret, key: self._secret_value(namespace, secret, key)
            )
        except eng.EngineConfigError as err:
            self._engine_waits(pod, "CreateContainerConfigError", str(err))
            return
        volume = self._model_volume_path(namespace, spec)
        if volume is None:
            return  # the claim is not bound to a volume yet: the next pass
        if not self._model_fetched(pod, volume):
            return  # its init container runs, or waits out its back-off: a later pass
        from devstack.vllm_cpu_env import ensure_vllm_cpu_env

        python = ensure_vllm_cpu_env(progress=lambda line: log.info(line)).python
        home = self.engine_root / uid / "home"
        home.mkdir(parents=True, exist_ok=True)
        port = eng.free_port()
        # The pod's endpoint front on the pod's own address and port, where it can be made real here
        # (an Ingress controller routes to it by the EndpointSlice), else on a loopback port.
        pod_ip = _get(pod, "status", "podIP")
        real = self.real_pod_addresses and self.pod_addresses.claim(pod_ip)
        front = {"front_host": pod_ip, "front_port": RUNTIME_PORT} if real else {}
        argv, launch_env = eng.cpu_host_launch(
            runtime.get("command") or [],
            env,
            python=python,
            paths=eng.HostPaths(volume, home),
            port=port,
        )
        replica = eng.EngineReplica(
            pod_key=f"{namespace}/{pod_name}",
            pod_uid=uid,
            argv=argv,
            env=launch_env,
            port=port,
            log_path=self.engine_root / uid / "engine.log",
            token=env.get("VLLM_API_KEY"),
            on_status=self._write_engine_status,
            **front,
        )
        with self._lock:
            self.engines[uid] = replica
            self._engine_waiting.pop(uid, None)
        log.info("engine starting", pod=replica.pod_key, url=replica.url, log=str(replica.log_path))
        replica.start()

    # ------------------------------------------------------------- the model fetcher

    def hub(self) -> str:
        """The hub the fetchers download from: ``hub_url``, or the fleet's own (started now if need be)."""
        if self.hub_url is not None:
            return self.hub_url
        return self.own_hub().url

    def own_hub(self) -> HubServer:
        """The fleet's own hub (``hub.standard_hub``), started on first use: what it served, its faults."""
        with self._lock:
            if self._hub is None:
                self._hub = HubServer(standard_hub(large=self.hub_large)).start()
            return self._hub

    def fetches(self, pod_uid: str) -> list[tuple[float, float, int]]:
        """The pod's model fetcher runs that ended: (wall-clock start, end, exit code), oldest first."""
        with self._lock:
            attempts = self._fetches.get(pod_uid)
            return list(attempts.ended) if attempts is not None else []

    def _model_fetched(self, pod: Obj, volume: Path) -> bool:
        """Whether the pod's ``model-fetcher`` completed; if not, run it (in a thread of its own, as a
        kubelet runs a container) unless it runs already or waits out its back-off after a failure."""
        uid = pod["metadata"]["uid"]
        spec = pod.get("spec") or {}
        container = eng.container(spec, FETCHER_CONTAINER, init=True)
        if container is None:
            return True  # a pod without one (a catalog model mounted as it is)
        with self._lock:
            attempts = self._fetches.setdefault(uid, FetchAttempts())
            if attempts.done:
                return True
            if attempts.process is not None or time.monotonic() < attempts.next_try:
                return False
        secrets: dict[tuple[str, str], str] = {}
        namespace = pod["metadata"]["namespace"]
        for entry in container.get("env") or []:
            ref = (entry.get("valueFrom") or {}).get("secretKeyRef") or {}
            if ref:
                value = self._secret_value(namespace, str(ref.get("name")), str(ref.get("key")))
                if value is not None:
                    secrets[(str(ref.get("name")), str(ref.get("key")))] = value
        # The fetcher's other volumes that are claims (the namespace's model cache): their bound folders.
        claims = {
            v.get("name"): _get(v, "persistentVolumeClaim", "claimName")
            for v in spec.get("volumes") or []
            if _get(v, "persistentVolumeClaim", "claimName") and v.get("name") != MODEL_VOLUME
        }
        mounts: dict[str, Path] = {}
        for mount in container.get("volumeMounts") or []:
            if mount.get("name") in claims:
                folder = self._claim_host_path(namespace, str(claims[mount["name"]]))
                if folder is None:
                    return False  # not bound yet: a later pass
                mounts[str(mount["mountPath"])] = folder
        home = self.engine_root / uid / "fetcher-home"
        log_path = self.engine_root / uid / "model-fetcher.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text("")
        try:
            process = model_fetcher.start_fetcher(
                container, volume, home, self.hub(), secrets, log=log_path, mounts=mounts
            )
        except KeyError as missing:  # a Secret or key it reads is not there: the kubelet does not start it
            self._write_fetcher_status(
                pod, attempts, {"waiting": {"reason": "CreateContainerConfigError", "message": str(missing.args[0])}}
            )
            with self._lock:
                attempts.next_try = time.monotonic() + eng.BACKOFF_FIRST_SECONDS
            return False
        started = eng._now()
        with self._lock:
            attempts.process = process
            attempts.started_at = time.time()
        self._write_fetcher_status(pod, attempts, {"running": {"startedAt": started}})
        log.info("model fetcher started", pod=f"{namespace}/{pod['metadata']['name']}", log=str(log_path))
        threading.Thread(
            target=self._await_fetcher, args=(pod, attempts, process, log_path, started), daemon=True
        ).start()
        return False

    def _await_fetcher(self, pod: Obj, attempts: FetchAttempts, process: Any, log_path: Path, started: str) -> None:
        exit_code = process.wait()
        run = model_fetcher.FetcherRun(exit_code=exit_code, log=log_path.read_text(errors="replace"))
        terminated = {**run.terminated(), "startedAt": started, "finishedAt": eng._now()}
        with self._lock:
            if self._fetches.get(pod["metadata"]["uid"]) is not attempts:
                return  # the pod went (or the fleet stopped) while it ran
            attempts.process = None
            attempts.ended.append((attempts.started_at, time.time(), exit_code))
            if exit_code == 0:
                attempts.done = True
            else:
                attempts.failures += 1
                attempts.next_try = time.monotonic() + eng.backoff_seconds(attempts.failures)
                attempts.last = terminated
        if exit_code == 0:
            self._write_fetcher_status(pod, attempts, {"terminated": terminated}, ready=True)
        else:
            self._write_fetcher_status(
                pod,
                attempts,
                {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off restarting failed container"}},
            )
        log.info(
            "model fetcher ended", pod=f"{pod['metadata']['namespace']}/{pod['metadata']['name']}", exit_code=exit_code
        )
        self._wake.set()

    def _write_fetcher_status(
        self, pod: Obj, attempts: FetchAttempts, state: dict[str, Any], ready: bool = False
    ) -> None:
        container = eng.container(pod.get("spec") or {}, FETCHER_CONTAINER, init=True) or {}
        status: dict[str, Any] = {
            "name": FETCHER_CONTAINER,
            "image": container.get("image", ""),
            "imageID": "",
            "ready": ready,
            "restartCount": attempts.failures,
            "state": state,
        }
        if attempts.last is not None:
            status["lastState"] = {"terminated": attempts.last}
        meta = pod["metadata"]
        try:
            current = self.api.sanitize_for_serialization(
                self.core.read_namespaced_pod(meta["name"], meta["namespace"])
            )
            if current["metadata"]["uid"] != meta["uid"]:
                return
            self.core.patch_namespaced_pod_status(
                meta["name"], meta["namespace"], eng.fetcher_status_patch(current, status)
            )
        except ApiException as err:
            if err.status != 404:
                raise

    def _engine_waits(self, pod: Obj, reason: str, message: str) -> None:
        uid = pod["metadata"]["uid"]
        with self._lock:
            if self._engine_waiting.get(uid) == reason:
                return
            self._engine_waiting[uid] = reason
        view = eng.ContainerView("waiting", reason=reason, message=message)
        self._patch_pod_status(pod["metadata"]["namespace"], pod["metadata"]["name"], view)

    def _write_engine_status(self, replica: eng.EngineReplica, view: eng.ContainerView) -> None:
        namespace, name = replica.pod_key.split("/", 1)
        self._patch_pod_status(namespace, name, view, uid=replica.pod_uid)

    def _patch_pod_status(self, namespace: str, name: str, view: eng.ContainerView, uid: str | None = None) -> None:
        try:
            pod = self.api.sanitize_for_serialization(self.core.read_namespaced_pod(name, namespace))
            if uid is not None and pod["metadata"]["uid"] != uid:
                return  # another pod of the same name by now
            self.core.patch_namespaced_pod_status(name, namespace, eng.pod_status_patch(pod, view, eng._now()))
        except ApiException as err:
            if err.status != 404:
                raise

    def _annotate_engine_url(self, namespace: str, name: str) -> None:
        """The order's Service points at its first engine (where the probes and the tests reach it)."""
        replica = self.engine(namespace, name)
        if replica is None:
            return
        with self._lock:
            if self._annotated.get(f"{namespace}/{name}") == replica.url:
                return
        try:
            self.core.patch_namespaced_service(
                name, namespace, {"metadata": {"annotations": {PROBE_URL_ANNOTATION: replica.url}}}
            )
        except ApiException as err:
            log.warning("service not annotated", order=f"{namespace}/{name}", status=err.status)
            return
        with self._lock:
            self._annotated[f"{namespace}/{name}"] = replica.url

    def _model_volume_path(self, namespace: str, pod_spec: Obj) -> Path | None:
        """The host folder of the pod's model volume: its claim's bound PersistentVolume's hostPath."""
        claim = next(
            (
                _get(v, "persistentVolumeClaim", "claimName")
                for v in pod_spec.get("volumes") or []
                if v.get("name") == MODEL_VOLUME
            ),
            None,
        )
        if not claim:
            return None
        return self._claim_host_path(namespace, claim)

    def _claim_host_path(self, namespace: str, claim: str) -> Path | None:
        """The host folder of a claim's bound PersistentVolume (its hostPath), None until it is bound."""
        pvc = self.core.read_namespaced_persistent_volume_claim(claim, namespace)
        if not pvc.spec.volume_name:
            return None
        pv = self.core.read_persistent_volume(pvc.spec.volume_name)
        if pv.spec.host_path is None:
            return None
        path = Path(pv.spec.host_path.path)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _secret_value(self, namespace: str, secret: str, key: str) -> str | None:
        try:
            data = self.core.read_namespaced_secret(secret, namespace).data or {}
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        raw = data.get(key)
        return base64.b64decode(raw).decode() if raw is not None else None

    def _token(self, namespace: str, secret: str) -> str | None:
        try:
            data = self.core.read_namespaced_secret(secret, namespace).data or {}
        except ApiException:
            return None
        raw = data.get("token")
        # As a pod's secretKeyRef reads it: an emptied key is an empty token (the front fails closed).
        return base64.b64decode(raw).decode() if raw is not None else None

    def _bind_volumes(self) -> None:
        with self._lock:
            claims = list(self._informers[CLAIM].cache.values())
        for claim in claims:
            if _get(claim, "status", "phase") != "Pending" or _get(claim, "spec", "volumeName"):
                continue
            meta = claim["metadata"]
            spec = claim.get("spec") or {}
            pv_name = f"standin-{meta['uid']}"
            body = {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": pv_name, "labels": {"ai-inference.deckhouse.io/stand-in": "volume"}},
                "spec": {
                    "capacity": {"storage": _get(spec, "resources", "requests", "storage")},
                    "accessModes": spec.get("accessModes"),
                    "persistentVolumeReclaimPolicy": "Delete",
                    "storageClassName": spec.get("storageClassName") or "",
                    "hostPath": {"path": f"/tmp/ai-inference-standin/{pv_name}"},
                    "claimRef": {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]},
                },
            }
            try:
                self.core.create_persistent_volume(body)
            except ApiException as err:
                if err.status != 409:
                    raise

    def _reschedule_stale_pods(self) -> None:
        """Delete an order's pod still refused for an unbound volume seconds after the volume got bound.

        The volume is bound here, after the pod exists, so the scheduler's first verdict is always
        "unbound immediate PersistentVolumeClaims". It requeues the pod on the claim's bind event,
        but now and then (with a DRA claim on the pod as well) that event is missed and the pod
        waits for the scheduler's five-minute flush of unschedulable pods. The StatefulSet makes
        the pod again at once, and a new pod with a bound volume is scheduled on its first try.
        """
        now = time.monotonic()
        stale: set[str] = set()
        with self._lock:
            claims = list(self._informers[CLAIM].cache.values())
        bound = {
            (c["metadata"]["namespace"], c["metadata"]["name"])
            for c in claims
            if _get(c, "status", "phase") == "Bound" and _get(c, "metadata", "labels", LABEL_MANAGED_BY) == MANAGED_BY
        }
        for pod in list_all(self._unscheduled)[0]:
            meta = pod["metadata"]
            spec = pod.get("spec") or {}
            if spec.get("nodeName") or meta.get("deletionTimestamp"):
                continue
            conditions = _get(pod, "status", "conditions") or []
            scheduled = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
            if (
                scheduled is None
                or scheduled.get("status") != "False"
                or UNBOUND_VOLUME_VERDICT not in (scheduled.get("message") or "")
            ):
                continue
            volumes = [_get(v, "persistentVolumeClaim", "claimName") for v in spec.get("volumes") or []]
            mine = [claim for claim in volumes if claim]
            if not mine or any((meta["namespace"], claim) not in bound for claim in mine):
                continue
            uid = meta["uid"]
            stale.add(uid)
            first_seen = self._stale_since.setdefault(uid, now)
            if now - first_seen < self.stale_verdict_seconds:
                continue
            try:
                self.core.delete_namespaced_pod(meta["name"], meta["namespace"], grace_period_seconds=0)
            except ApiException as err:
                if err.status != 404:
                    raise
            log.info("stand-in fleet made a pod again", pod=f"{meta['namespace']}/{meta['name']}")
        self._stale_since = {uid: t for uid, t in self._stale_since.items() if uid in stale}
