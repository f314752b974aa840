"""What a kubelet and a storage provisioner would do, for the local cluster (kwok pods run nothing).

* For every order workload with a ready replica, a stand-in OpenAI-compatible runtime serving the
  model the StatefulSet names, with the order's token. All of them are served by one multiplexed
  server on one loopback port (``runtime.MultiplexedRuntime``), each under its own path prefix,
  ``http://127.0.0.1:<port>/o/<namespace>/<name>``: a thousand orders are one thread, not a
  thousand servers. The order's Service is annotated with that URL so the probe activity and the
  observer (``health.probeTargetAnnotation``) reach it. ``fail``/``recover`` inject API errors;
  ``stop`` makes the endpoint absent. ``targets()`` lists every order's URL (for scraping its
  ``/metrics``: ``<url>/metrics``).
* For every Pending PersistentVolumeClaim of an order, a hostPath PersistentVolume bound to it,
  so the scheduler can place pods that carry a model volume.
* A pod of an order the scheduler last refused for an unbound volume that is bound by now is
  made again (see ``_reschedule_stale_pods``).

Dev/test only: it is started by ``ai-inference dev up`` and by the end-to-end tests.
"""

from __future__ import annotations

import base64
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import structlog
from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api
from kubernetes.client.exceptions import ApiException

from activities.builders.common import LABEL_MANAGED_BY, MANAGED_BY
from devstack.standins.runtime import MultiplexedRuntime, OrderRuntime

log = structlog.get_logger(__name__)

PROBE_URL_ANNOTATION = "ai.deckhouse.io/stand-in-url"
# The scheduler's verdict on a pod whose PersistentVolumeClaim was not bound yet.
UNBOUND_VOLUME_VERDICT = "unbound immediate PersistentVolumeClaims"


def served_model(statefulset: Any) -> str | None:
    """The --served-model-name of the runtime container."""
    for container in statefulset.spec.template.spec.containers or []:
        words = [*(container.command or []), *(container.args or [])]
        for i, word in enumerate(words):
            if word == "--served-model-name" and i + 1 < len(words):
                return str(words[i + 1])
            if word.startswith("--served-model-name="):
                return word.split("=", 1)[1]
    return None


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

    def __post_init__(self) -> None:
        self.core = CoreV1Api(self.api)
        self.apps = AppsV1Api(self.api)

    # ---------------------------------------------------------------- control

    def start(self) -> StandInFleet:
        self.server.start()
        self._thread = threading.Thread(target=self._loop, name="stand-in-fleet", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(10)
        with self._lock:
            for runtime in self.runtimes.values():
                runtime.stop()
            self.runtimes.clear()
        self.server.stop()

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
        """``namespace/name`` → the URL of the order's stand-in (its ``/metrics`` is under it)."""
        with self._lock:
            return {key: runtime.url for key, runtime in self.runtimes.items()}

    # ------------------------------------------------------------------- loop

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.reconcile_once()
            except Exception as err:  # keep serving the others whatever one object does
                log.warning("stand-in fleet pass failed", error=f"{type(err).__name__}: {err}")
            # A pass lists every order's objects: with thousands of orders it is slow, so the fleet
            # rests at least as long as it worked (it never takes more than half the API server).
            self._stop.wait(max(self.interval_seconds, time.monotonic() - started))

    def reconcile_once(self) -> None:
        selector = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
        self._bind_volumes()
        self._reschedule_stale_pods(selector)
        sets = self.apps.list_stateful_set_for_all_namespaces(label_selector=selector).items
        alive = set()
        for sts in sets:
            key = f"{sts.metadata.namespace}/{sts.metadata.name}"
            alive.add(key)
            if (sts.status.ready_replicas or 0) < 1:
                continue
            standing = self.runtime(sts.metadata.namespace, sts.metadata.name)
            if standing is not None and (standing.config.model != served_model(sts) or self._rolled(key, sts)):
                # An edit changed the model, or pods of a new revision run (a rotated token rolls
                # them): the "pod" starts again, reading its model and token as a real one does.
                with self._lock:
                    self.runtimes.pop(key).stop()
                standing = None
            if standing is None:
                self._serve(sts)
        with self._lock:
            for key in set(self.runtimes) - alive:
                self.runtimes.pop(key).stop()
                self._revisions.pop(key, None)

    def _rolled(self, key: str, sts: Any) -> bool:
        """Whether a pod of another revision than the runtime was started for now runs: real replicas
        read their token (an env from the Secret) when they start, so the stand-in must start again."""
        status = sts.status
        return bool(
            status.update_revision
            and status.update_revision != self._revisions.get(key)
            and (status.updated_replicas or 0) >= 1
        )

    def _serve(self, sts: Any) -> None:
        namespace, name = sts.metadata.namespace, sts.metadata.name
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
            rolled = sts.status.update_revision if (sts.status.updated_replicas or 0) >= 1 else None
            self._revisions[f"{namespace}/{name}"] = rolled or sts.status.current_revision
        try:
            self.core.patch_namespaced_service(
                name, namespace, {"metadata": {"annotations": {PROBE_URL_ANNOTATION: runtime.url}}}
            )
        except ApiException as err:
            log.warning("service not annotated", order=f"{namespace}/{name}", status=err.status)
        log.info("stand-in runtime serving", order=f"{namespace}/{name}", url=runtime.url, model=model)

    def _token(self, namespace: str, secret: str) -> str | None:
        try:
            data = self.core.read_namespaced_secret(secret, namespace).data or {}
        except ApiException:
            return None
        raw = data.get("token")
        return base64.b64decode(raw).decode() if raw else None

    def _bind_volumes(self) -> None:
        claims = self.core.list_persistent_volume_claim_for_all_namespaces().items
        for claim in claims:
            if claim.status.phase != "Pending" or claim.spec.volume_name:
                continue
            pv_name = f"standin-{claim.metadata.uid}"
            body = {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": pv_name, "labels": {"ai-inference.deckhouse.io/stand-in": "volume"}},
                "spec": {
                    "capacity": {"storage": claim.spec.resources.requests["storage"]},
                    "accessModes": claim.spec.access_modes,
                    "persistentVolumeReclaimPolicy": "Delete",
                    "storageClassName": claim.spec.storage_class_name or "",
                    "hostPath": {"path": f"/tmp/ai-inference-standin/{pv_name}"},
                    "claimRef": {
                        "namespace": claim.metadata.namespace,
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

    def _reschedule_stale_pods(self, selector: str) -> None:
        """Delete an order's pod still refused for an unbound volume seconds after the volume got bound.

        The volume is bound here, after the pod exists, so the scheduler's first verdict is always
        "unbound immediate PersistentVolumeClaims". It requeues the pod on the claim's bind event,
        but now and then (with a DRA claim on the pod as well) that event is missed and the pod
        waits for the scheduler's five-minute flush of unschedulable pods. The StatefulSet makes
        the pod again at once, and a new pod with a bound volume is scheduled on its first try.
        """
        now = time.monotonic()
        stale: set[str] = set()
        bound = {
            (c.metadata.namespace, c.metadata.name)
            for c in self.core.list_persistent_volume_claim_for_all_namespaces(label_selector=selector).items
            if c.status.phase == "Bound"
        }
        for pod in self.core.list_pod_for_all_namespaces(label_selector=selector).items:
            if pod.spec.node_name or pod.metadata.deletion_timestamp:
                continue
            scheduled = next((c for c in pod.status.conditions or [] if c.type == "PodScheduled"), None)
            if (
                scheduled is None
                or scheduled.status != "False"
                or UNBOUND_VOLUME_VERDICT not in (scheduled.message or "")
            ):
                continue
            claims = [v.persistent_volume_claim.claim_name for v in pod.spec.volumes or [] if v.persistent_volume_claim]
            if not claims or any((pod.metadata.namespace, claim) not in bound for claim in claims):
                continue
            uid = pod.metadata.uid
            stale.add(uid)
            first_seen = self._stale_since.setdefault(uid, now)
            if now - first_seen < self.stale_verdict_seconds:
                continue
            try:
                self.core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
            except ApiException as err:
                if err.status != 404:
                    raise
            log.info("stand-in fleet made a pod again", pod=f"{pod.metadata.namespace}/{pod.metadata.name}")
        self._stale_since = {uid: t for uid, t in self._stale_since.items() if uid in stale}
