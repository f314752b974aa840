"""``ai-inference disable``: what disabling the module does to the orders (the chart's pre-delete hook).

The admin guide promises that disabling stops every order's workload and keeps the orders. Helm
deletes only the release's own objects, so the chart runs this command as a ``pre-delete`` hook Job
(templates/disable/) before it does:

1. **the reconcilers stop first**: the release's worker and watcher Deployments are scaled to 0 and
   their pods waited out, or a level-triggered workflow would make again what step 2 removes;
2. **each order's workload goes**: for every InferenceService in every namespace, the objects the
   module made for it — found by the name its builder gives (``ObjectNames``) and believed only with
   the order's uid on their controller ownerReference (a label is a hint anyone may write) — are
   deleted, each with its uid as precondition: the Ingress (the endpoint is unpublished first), the
   HorizontalPodAutoscaler, the StatefulSet (its pods, and the ResourceClaims made for them, go with
   it), the Service, the ResourceClaimTemplate, the NetworkPolicy (last: the replicas stay fenced
   while they stop). The auth Secret is kept (the token its clients hold survives a disable and an
   enable), so are the TLS copy and the model volumes (an enable does not download the models again);
3. **each order says so**: phase Pending, reason ``ModuleDisabled``, the Ready and WorkloadReady
   conditions False with that reason and a message;
4. **the module's finalizer goes** from each order, so that deleting an order while the module is
   disabled finishes (the workload is gone already; what is left is the order's by ownerReference and
   goes with it).

Enabling again: the workflow re-adds the finalizer on its next reconcile, and the observer tells every
order that says ``ModuleDisabled`` to reconcile (``worker/observer/observer.py``): the workload is
applied again and the order becomes Ready on its own.

Idempotent (a second run finds nothing to delete, the status already written, no finalizer) and
bounded: every wait has a deadline, an API error is tried a few times and then counted as a failure
(exit 1). It logs counts and object names, never a Secret or a token.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar

import structlog
from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api, CustomObjectsApi
from kubernetes.client.rest import ApiException

from activities.builders.claim import RESOURCE_API_VERSION
from activities.builders.common import ObjectNames
from activities.kube import Applier
from activities.order import FINALIZER, JSON_PATCH
from activities.trusted_apply import Ownership, ownership
from inference_api.reasons import Reason
from inference_api.types import GROUP, VERSION

log = structlog.get_logger(__name__)

# The reason this command writes on every order whose workload it stopped (docs/faq.md answers it).
MODULE_DISABLED = Reason.MODULE_DISABLED.value

ORDERS = "inferenceservices"
# The release's reconcilers (templates/worker/, templates/watcher/).
RECONCILERS = ("ai-inference-worker", "ai-inference-watcher")
READY = "Ready"
WORKLOAD_READY = "WorkloadReady"
DISABLED_MESSAGE = (
    "The ai-inference module is disabled: this order's workload (its runtime, Service, endpoint and "
    "device claims) was stopped. The order is kept, with its token Secret, and is served again when the "
    "module is enabled."
)
ATTEMPTS = 3

T = TypeVar("T")


@dataclass(frozen=True)
class WorkloadKind:
    api_version: str
    kind: str
    name: Callable[[ObjectNames], str]


# What an order's workload is, in the order it is stopped (the reverse of activities/builders/objects.py's
# apply order, NetworkPolicy last). The auth Secret and the TLS copy are not in it: they are kept.
WORKLOAD: tuple[WorkloadKind, ...] = (
    WorkloadKind("networking.k8s.io/v1", "Ingress", lambda n: n.ingress),
    WorkloadKind("autoscaling/v2", "HorizontalPodAutoscaler", lambda n: n.autoscaler),
    WorkloadKind("apps/v1", "StatefulSet", lambda n: n.statefulset),
    WorkloadKind("v1", "Service", lambda n: n.service),
    WorkloadKind(RESOURCE_API_VERSION, "ResourceClaimTemplate", lambda n: n.claim_template),
    WorkloadKind("networking.k8s.io/v1", "NetworkPolicy", lambda n: n.network_policy),
)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


# ------------------------------------------------------------------------------------------ pure rules


def stops(order: Mapping[str, Any], obj: Mapping[str, Any]) -> bool:
    """Whether ``obj`` is part of ``order``'s workload that a disable stops: a kind of ``WORKLOAD``, the
    very name the builder gives it for this order, in the order's namespace, and the order (by uid) its
    controller owner. A tenant's object with the module's labels, or even an ownerReference to the order,
    under another name is not; neither is the auth Secret, which is kept."""
    order_meta, meta = _meta(order), _meta(obj)
    names = ObjectNames(str(order_meta.get("name")))
    kind = next(
        (k for k in WORKLOAD if k.kind == obj.get("kind") and k.api_version == obj.get("apiVersion")),
        None,
    )
    if kind is None or meta.get("name") != kind.name(names):
        return False
    if meta.get("namespace") != order_meta.get("namespace"):
        return False
    return ownership(obj, str(order_meta.get("name")), str(order_meta.get("uid"))) == Ownership.OURS


def workload_of(order: Mapping[str, Any], standing: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The objects of ``standing`` that a disable deletes for ``order``, in ``WORKLOAD`` order."""
    rank = {(k.api_version, k.kind): i for i, k in enumerate(WORKLOAD)}
    chosen = [obj for obj in standing if stops(order, obj)]
    return sorted(chosen, key=lambda obj: rank[(str(obj.get("apiVersion")), str(obj.get("kind")))])


def _condition(type_: str, message: str, generation: Any, now: str, old: Mapping[str, Any] | None) -> dict[str, Any]:
    flipped = old is None or old.get("status") != "False"
    condition = {
        "type": type_,
        "status": "False",
        "reason": MODULE_DISABLED,
        "message": message,
        "lastTransitionTime": now if flipped else (old or {}).get("lastTransitionTime", now),
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return condition


def disabled_status(status: Mapping[str, Any] | None, now: datetime) -> dict[str, Any] | None:
    """The status an order gets when the module is disabled (phase Pending, reason ModuleDisabled, Ready
    and WorkloadReady False with that reason, the other conditions as they were); None when it says so
    already (a second run writes nothing). A condition's lastTransitionTime moves only on a flip."""
    status = dict(status or {})
    conditions = [dict(c) for c in status.get("conditions") or []]
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    generation = status.get("observedGeneration")
    for type_ in (WORKLOAD_READY, READY):
        old = next((c for c in conditions if c.get("type") == type_), None)
        new = _condition(type_, DISABLED_MESSAGE, old.get("observedGeneration") if old else generation, stamp, old)
        if old is None:
            conditions.append(new)
        else:
            conditions[conditions.index(old)] = new
    before = [dict(c) for c in status.get("conditions") or []]
    if status.get("phase") == "Pending" and status.get("reason") == MODULE_DISABLED and before == conditions:
        return None
    return {"phase": "Pending", "reason": MODULE_DISABLED, "conditions": conditions}


def wakes_after_disable(order: Mapping[str, Any] | None) -> bool:
    """Whether the observer must tell the order's workflow to reconcile when it starts: the order says
    ``ModuleDisabled`` and is not being deleted. Its workload was deleted while nothing watched, so no
    owned-object event will say so, and a workflow that kept running through the disable (its Temporal
    server kept its database) would otherwise sleep on its long timer; a fresh one reconciles anyway."""
    if order is None or _meta(order).get("deletionTimestamp"):
        return False
    return (order.get("status") or {}).get("reason") == MODULE_DISABLED


# ------------------------------------------------------------------------------------------ the run


@dataclass
class DisableReport:
    orders: int = 0
    deleted: list[str] = field(default_factory=list)  # "Kind namespace/name"
    statuses: int = 0
    finalizers: int = 0
    reconcilers_stopped: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"module disabled: {self.orders} orders kept, {len(self.deleted)} workload objects deleted, "
            f"{self.statuses} statuses written, {self.finalizers} finalizers removed, "
            f"reconcilers stopped: {', '.join(self.reconcilers_stopped) or 'none running'}"
            + (f"; {len(self.failures)} failures" if self.failures else "")
        )


def _tried(what: str, call: Callable[[], T]) -> T:
    """``call`` tried ``ATTEMPTS`` times on an API error other than a 4xx that retrying cannot change."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return call()
        except ApiException as err:
            if attempt == ATTEMPTS or (err.status is not None and 400 <= err.status < 500 and err.status != 429):
                raise
            log.warning("disable: retrying", what=what, status=err.status, attempt=attempt)
            time.sleep(attempt)
    raise AssertionError("unreachable")


def _error(err: Exception) -> str:
    status = getattr(err, "status", None)
    return f"HTTP {status}" if status is not None else type(err).__name__


class Disabler:
    def __init__(self, api: ApiClient, module_namespace: str, wait_seconds: float = 120) -> None:
        self.apps = AppsV1Api(api)
        self.core = CoreV1Api(api)
        self.custom = CustomObjectsApi(api)
        self.objects = Applier(api)
        self.module_namespace = module_namespace
        self.wait_seconds = wait_seconds
        self.report = DisableReport()

    def run(self) -> DisableReport:
        deadline = time.monotonic() + self.wait_seconds
        self.stop_reconcilers(deadline)
        orders = _tried("list orders", lambda: self.custom.list_cluster_custom_object(GROUP, VERSION, ORDERS))
        items: list[dict[str, Any]] = orders.get("items") or []
        self.report.orders = len(items)
        statefulsets: list[tuple[str, str]] = []  # (namespace, uid) of the StatefulSets deleted
        for order in items:
            key = f"{_meta(order).get('namespace')}/{_meta(order).get('name')}"
            try:
                statefulsets += self.stop_workload(order)
                self.write_status(order)
                self.remove_finalizer(order)
            except ApiException as err:
                self.report.failures.append(f"{key}: {_error(err)}")
                log.error("disable: order not finished", order=key, error=_error(err))
        self.wait_for_pods(statefulsets, deadline)
        log.info(self.report.line())
        return self.report

    # -- 1. the reconcilers

    def stop_reconcilers(self, deadline: float) -> None:
        selectors = []
        for name in RECONCILERS:
            try:
                deployment = self.apps.read_namespaced_deployment(name, self.module_namespace)
            except ApiException as err:
                if err.status == 404:
                    continue
                raise
            if (deployment.spec.replicas or 0) != 0:
                _tried(
                    f"scale {name}",
                    partial(
                        self.apps.patch_namespaced_deployment, name, self.module_namespace, {"spec": {"replicas": 0}}
                    ),
                )
            labels = deployment.spec.selector.match_labels or {}
            selectors.append(",".join(f"{k}={v}" for k, v in sorted(labels.items())))
            self.report.reconcilers_stopped.append(name)
        for selector in selectors:
            self._until(
                partial(self._no_pods, self.module_namespace, selector),
                deadline,
                f"the reconcilers' pods ({selector}) to go",
            )
        log.info("disable: reconcilers stopped", deployments=self.report.reconcilers_stopped)

    def _no_pods(self, namespace: str, selector: str) -> bool:
        return not self.core.list_namespaced_pod(namespace, label_selector=selector).items

    # -- 2. the workload

    def standing(self, order: Mapping[str, Any]) -> list[dict[str, Any]]:
        meta = _meta(order)
        names = ObjectNames(str(meta.get("name")))
        found = []
        for kind in WORKLOAD:
            obj = _tried(
                f"get {kind.kind}",
                partial(self.objects.get, kind.api_version, kind.kind, kind.name(names), str(meta.get("namespace"))),
            )
            if obj is not None:
                found.append(obj)
        return found

    def stop_workload(self, order: Mapping[str, Any]) -> list[tuple[str, str]]:
        deleted_statefulsets = []
        for obj in workload_of(order, self.standing(order)):
            meta = _meta(obj)
            name, namespace, uid = str(meta.get("name")), str(meta.get("namespace")), str(meta.get("uid"))
            gone = _tried(
                f"delete {obj.get('kind')}",
                partial(self.objects.delete, str(obj.get("apiVersion")), str(obj.get("kind")), name, namespace, uid),
            )
            if gone:
                self.report.deleted.append(f"{obj.get('kind')} {namespace}/{name}")
                log.info("disable: deleted", kind=obj.get("kind"), object=f"{namespace}/{name}")
            if obj.get("kind") == "StatefulSet":
                deleted_statefulsets.append((namespace, uid))
        return deleted_statefulsets

    def wait_for_pods(self, statefulsets: Sequence[tuple[str, str]], deadline: float) -> None:
        """Until the deleted StatefulSets' pods are gone (garbage collection takes them, and their claims)."""

        def left() -> bool:
            for namespace, uid in statefulsets:
                for pod in self.core.list_namespaced_pod(namespace).items:
                    if any(o.uid == uid for o in pod.metadata.owner_references or []):
                        return True
            return False

        if statefulsets:
            self._until(lambda: not left(), deadline, "the orders' replicas to go")

    # -- 3. the status, 4. the finalizer

    def write_status(self, order: Mapping[str, Any]) -> None:
        meta = _meta(order)
        if meta.get("deletionTimestamp"):
            return
        status = disabled_status(order.get("status"), datetime.now(UTC))
        if status is None:
            return
        _tried(
            "write status",
            lambda: self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, str(meta.get("namespace")), ORDERS, str(meta.get("name")), {"status": status}
            ),
        )
        self.report.statuses += 1

    def remove_finalizer(self, order: Mapping[str, Any]) -> None:
        meta = _meta(order)
        finalizers = list(meta.get("finalizers") or [])
        if FINALIZER not in finalizers:
            return
        index = finalizers.index(FINALIZER)
        patch = [
            {"op": "test", "path": "/metadata/uid", "value": meta.get("uid")},
            {"op": "test", "path": f"/metadata/finalizers/{index}", "value": FINALIZER},
            {"op": "remove", "path": f"/metadata/finalizers/{index}"},
        ]
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        try:
            self.custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, ORDERS, name, patch, _content_type=JSON_PATCH
            )
        except ApiException as err:
            if err.status in (404, 422):  # gone, or the finalizers moved meanwhile: the next run sees
                return
            raise
        self.report.finalizers += 1

    def _until(self, check: Callable[[], bool], deadline: float, what: str) -> None:
        while True:
            try:
                if check():
                    return
            except ApiException as err:
                log.warning("disable: waiting", what=what, error=_error(err))
            if time.monotonic() >= deadline:
                self.report.failures.append(f"timed out waiting for {what}")
                log.error("disable: timed out", what=what)
                return
            time.sleep(1)


def disable(api: ApiClient, module_namespace: str, wait_seconds: float = 120) -> DisableReport:
    return Disabler(api, module_namespace, wait_seconds).run()
