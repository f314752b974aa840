"""What the observer signals, decided without I/O.

Every function here reads objects as the API server returns them (camelCase dicts) or plain
values, and answers what the order's workflow must be told, if anything. The observer does the
I/O around them (informers, probes, Temporal); these are tested exhaustively on their own.

The rule throughout: a signal only for a change the workflow acts on. The module's own writes
(its server-side applies, its status writes, the class status the observer writes itself) never
come back as signals.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from activities.builders.claim import waits_for_placement
from activities.builders.common import (
    ANNOTATION_RUNTIME_IMAGE,
    FETCHER_CONTAINER,
    FIELD_MANAGER,
    LABEL_ORDER,
    RUNTIME_CONTAINER,
)
from inference_api.observation import LEGACY_ORDER_WORKFLOW_TYPES, ORDER_WORKFLOW_TYPE, HealthReport, OrderSignal
from inference_api.payloads import OrderRef, order_workflow_id
from inference_api.preemption import ScalingObservation
from inference_api.reasons import Reason
from inference_api.types import ConditionType, ModelKind, ModelSource, Phase
from workflows.order_state import ReplicaTrouble, TroubleAction
from workflows.status import TROUBLE_SEVERITY

Obj = Mapping[str, Any]

# Event types as the informers deliver them. SYNC: an object of the first listing after a (re)start;
# a later relist delivers what changed meanwhile as ADDED / MODIFIED / DELETED.
SYNC = "SYNC"
ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"

# Field managers of Kubernetes' own controllers: their writes are the cluster doing its job (the HPA
# scaling a StatefulSet through its scale subresource, the garbage collector), never drift.
KUBERNETES_MANAGERS = frozenset({"kube-controller-manager", "kube-scheduler", "kubelet", "kube-apiserver"})
# Metadata the API server maintains itself: a change there is no change of the object (a deletion is
# told by its DELETED event).
_SERVER_METADATA = (
    "resourceVersion",
    "managedFields",
    "generation",
    "uid",
    "creationTimestamp",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)


# ------------------------------------------------------------------------------------ helpers


def meta(obj: Obj | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def object_key(obj: Obj) -> str:
    """``namespace/name``, or ``name`` for a cluster-scoped object."""
    m = meta(obj)
    namespace = m.get("namespace")
    return f"{namespace}/{m.get('name')}" if namespace else str(m.get("name"))


def generation(obj: Obj | None) -> int:
    return int(meta(obj).get("generation") or 0)


def deleting(obj: Obj | None) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def order_ref(obj: Obj) -> OrderRef:
    m = meta(obj)
    return OrderRef(namespace=str(m.get("namespace")), name=str(m.get("name")), uid=str(m.get("uid")))


def shard_of(uid: str, shards: int) -> int:
    """The shard of an order: its uid's sha256, as a number, modulo the shard count."""
    return int(hashlib.sha256(uid.encode()).hexdigest(), 16) % shards


def in_shard(uid: str, shards: int, shard: int) -> bool:
    return shards <= 1 or shard_of(uid, shards) == shard


def owner_order_uid(obj: Obj) -> str | None:
    """The uid of the order an object names as its controller owner."""
    for owner in meta(obj).get("ownerReferences") or []:
        if owner.get("kind") == "InferenceService" and owner.get("controller"):
            return str(owner.get("uid"))
    return None


def owned_by(obj: Obj, order_uid: str) -> bool:
    """An object is an order's only when its controller ownerReference carries the order's uid: labels and
    names can be forged by anyone who may write in the namespace, a uid cannot be chosen."""
    return bool(order_uid) and owner_order_uid(obj) == order_uid


def claims_an_order(obj: Obj) -> bool:
    """Carries the module's order label but no order as controller owner: a decoy, or an object a
    ``kubectl delete --cascade=orphan`` left behind (its order's finalizer step deletes those)."""
    return owner_order_uid(obj) is None and order_name_label(obj) is not None


def order_name_label(obj: Obj) -> str | None:
    """The order an object (or a Pod of its StatefulSet) belongs to, by the module's order label."""
    value = (meta(obj).get("labels") or {}).get(LABEL_ORDER)
    return str(value) if value else None


# ------------------------------------------------------------------------------------- orders


@dataclass
class OrderMemory:
    """What this observer has told one order's workflow (by order uid), since it started."""

    generation: int | None = None
    delete_sent: bool = False


@dataclass(frozen=True)
class Intent:
    """A signal to send: ``start`` is a signal-with-start (the workflow is made when it is missing)."""

    signal: str
    arg: Any = None
    start: bool = False

    @property
    def args(self) -> list[Any]:
        return [] if self.arg is None else [self.arg]


def order_intent(event_type: str, new: Obj | None, memory: OrderMemory) -> Intent | None:
    """An order event → its signal, or None.

    - a deletionTimestamp: ``delete`` (with start: a deleting order with no workflow still gets its
      finalizer removed), once;
    - the order gone without one seen (it had no finalizer): ``delete`` to a running workflow, once;
    - otherwise ``spec_changed(generation)`` with start when the generation is newer than the last one
      sent (on the first listing after a start that is every order, once); a status write keeps the
      generation and is nothing.
    """
    if event_type == DELETED:
        return None if memory.delete_sent else Intent(OrderSignal.DELETE)
    if deleting(new):
        return None if memory.delete_sent else Intent(OrderSignal.DELETE, start=True)
    current = generation(new)
    if memory.generation is not None and current <= memory.generation:
        return None
    return Intent(OrderSignal.SPEC_CHANGED, current, start=True)


# Reasons of a Pending order whose workflow is working through its steps now (a task every few
# seconds): such an order still holds its place in the outbox's start window. Every other status —
# Ready, Degraded, Failed, or Pending on a wait (a load, capacity, an edit, a refusal) — settles it.
_WORKING_REASONS = frozenset(
    {
        Reason.CLASS_RESOLVED,
        Reason.MODEL_RESOLVED,
        Reason.LAUNCH_PLAN_CALCULATED,
        Reason.WORKLOAD_APPLIED,
        Reason.WAITING_FOR_PREVIOUS_STEP,
    }
)


def is_new_order(order: Obj | None) -> bool:
    """No workflow has carried the order yet: it has no status phase (its start is a new workflow's,
    held by the start window)."""
    return order is not None and not (order.get("status") or {}).get("phase")


def start_settled(phase: str | None, reason: str | None) -> bool:
    """Whether an order's status (phase, reason) frees its place in the start window: its workflow
    carried it to Ready, Degraded or Failed, or to a wait. No phase, or Pending on a working step
    (or with no reason yet): not settled."""
    if not phase:
        return False
    if phase != Phase.PENDING:
        return True
    return bool(reason) and reason not in _WORKING_REASONS


def order_start_settled(order: Obj | None) -> bool:
    """``start_settled`` of the order object's status."""
    status = (order or {}).get("status") or {}
    return start_settled(status.get("phase"), status.get("reason"))


def remember(memory: OrderMemory, intent: Intent) -> None:
    if intent.signal == OrderSignal.DELETE:
        memory.delete_sent = True
    elif intent.signal == OrderSignal.SPEC_CHANGED:
        memory.generation = int(intent.arg)


# ------------------------------------------------------------------------------------ classes


# The generation told for a deleted class: no class has it, so the orders always hear of it.
CLASS_GONE = 0


def class_changed_generation(event_type: str, old: Obj | None, new: Obj | None) -> int | None:
    """The generation to send as ``class_changed`` to the class's orders, or None.

    Only a spec edit counts: a new generation versus the cached object (a class created after the
    first listing counts, its orders waited for it; a deleted one counts too). Never on the first
    listing, never on a status write (the observer's own class status included).
    """
    if event_type == SYNC:
        return None
    if event_type == DELETED:
        return CLASS_GONE
    if old is not None and generation(old) == generation(new):
        return None
    return generation(new)


# ------------------------------------------------------------------------------ owned objects


def _content(obj: Obj, ignored_annotations: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The object minus its status and the metadata the server keeps: what a writer changes."""
    body = {k: v for k, v in obj.items() if k != "status"}
    metadata = {k: v for k, v in meta(obj).items() if k not in _SERVER_METADATA}
    annotations = {k: v for k, v in (metadata.pop("annotations", None) or {}).items() if k not in ignored_annotations}
    if annotations:
        metadata["annotations"] = annotations
    body["metadata"] = metadata
    return body


def last_writer(obj: Obj) -> str | None:
    """The manager of the newest managedFields entry that is not a status write.

    Times have a one-second resolution: of entries written in the same second, one that is not the
    module's wins (a change someone else made is never hidden by the module's own apply).
    """
    best: tuple[str, int, str] | None = None
    for entry in meta(obj).get("managedFields") or []:
        if entry.get("subresource") == "status":
            continue
        manager = str(entry.get("manager") or "")
        rank = (str(entry.get("time") or ""), 0 if manager == FIELD_MANAGER else 1, manager)
        if best is None or rank[:2] > best[:2]:
            best = rank
    return best[2] if best else None


def drift_writer(old: Obj | None, new: Obj, ignored_annotations: frozenset[str] = frozenset()) -> str | None:
    """Who changed an owned object, when it is someone to tell the workflow about: its spec, data or
    metadata changed and the newest writer is neither the module nor a Kubernetes controller.
    ``ignored_annotations``: annotations others may write (the local stack's probe target)."""
    if old is None or _content(old, ignored_annotations) == _content(new, ignored_annotations):
        return None
    writer = last_writer(new)
    if writer is None or writer == FIELD_MANAGER or writer in KUBERNETES_MANAGERS:
        return None
    return writer


def ready_replicas(statefulset: Obj | None) -> int:
    return int(((statefulset or {}).get("status") or {}).get("readyReplicas") or 0)


def _condition(order: Obj | None, type_: ConditionType) -> Mapping[str, Any] | None:
    for condition in ((order or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == type_.value:
            return dict(condition)
    return None


def awaiting_replicas(order: Obj | None) -> bool:
    """The order is being brought up (its status does not say it serves): its workflow waits, in the
    step after its apply, for ``replica_ready`` (``replica_got_ready``), and other news of its replicas
    would only make it reconcile and apply again. Except once that wait gave up
    (Ready=False/HealthCheckFailed): the workflow then sleeps on a backoff timer, and a replica
    turning ready is worth a reconcile now."""
    if serving(order) != Serving.NO:
        return False
    ready = _condition(order, ConditionType.READY)
    return not (
        ready is not None and ready.get("status") == "False" and ready.get("reason") == Reason.HEALTH_CHECK_FAILED.value
    )


def secret_period(base: float, secrets: int, reads_per_second: float) -> float:
    """How often each of an observer's ``secrets`` is read by name: every ``base`` seconds, or as
    often as ``reads_per_second`` lets all of them be read (0: no bound)."""
    if reads_per_second <= 0:
        return base
    return max(base, secrets / reads_per_second)


def scaling_news_now(order: Obj | None, observation: ScalingObservation) -> bool:
    """Whether a changed scaling observation is worth a ``scaling_changed`` signal now. While the order
    is brought up (``awaiting_replicas``) its workflow is inside the step that waits for the first
    replica and reads the observation only after it (the signal only stores it): each signal then was
    a workflow task of four history events for nothing, and a first load saw about three. It is held
    (the newest kept, sent once the order's status says it serves, or that the wait gave up) unless it
    says what needs acting on as soon as the load step ends: replicas that cannot be placed (the
    preemption report), an HPA that wants more than its bound, or an HPA gone."""
    if not awaiting_replicas(order):
        return True
    return observation.unschedulableReplicas > 0 or observation.wants_above_bound or not observation.autoscalerFound


def replica_got_ready(event_type: str, old: Obj | None, new: Obj | None) -> int | None:
    """A StatefulSet event of a loading order (``awaiting_replicas``) → the ready replicas to tell its
    workflow (``replica_ready``), or None: when its first replica got ready, or a listing (the
    observer started again) shows one ready — the workflow waits for this signal, not an activity."""
    if event_type == DELETED or new is None:
        return None
    ready = ready_replicas(new)
    if ready < 1:
        return None
    if event_type in (SYNC, ADDED) or old is None or ready_replicas(old) < 1:
        return ready
    return None


def owned_change(
    kind: str,
    event_type: str,
    old: Obj | None,
    new: Obj | None,
    ignored_annotations: frozenset[str] = frozenset(),
    replicas: bool = True,
) -> str | None:
    """An event of an object the order owns (not a Pod) → what the workflow must hear, or None.

    Deleted; changed by someone else (``drift_writer``); for a StatefulSet, its ready replicas (unless
    ``replicas`` is False: the workflow waits for them itself, see ``awaiting_replicas``).
    Additions are the module's own applies (or a relist) and say nothing.
    """
    if event_type == DELETED:
        return f"{kind} {object_key(old or new or {})} deleted"
    if event_type != MODIFIED or new is None:
        return None
    key = object_key(new)
    writer = drift_writer(old, new, ignored_annotations)
    if writer is not None:
        return f"{kind} {key} changed by {writer}"
    if replicas and kind == "StatefulSet" and old is not None and ready_replicas(old) != ready_replicas(new):
        return f"StatefulSet {key} readyReplicas {ready_replicas(old)}→{ready_replicas(new)}"
    return None


def pod_ready(pod: Obj | None) -> bool:
    conditions = ((pod or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def pod_image(pod: Obj | None) -> str | None:
    value = (meta(pod).get("annotations") or {}).get(ANNOTATION_RUNTIME_IMAGE)
    return str(value) if value else None


def pod_change(event_type: str, old: Obj | None, new: Obj | None) -> str | None:
    """A replica's readiness or runtime image changed (what WorkloadReady and RuntimeCurrent follow)."""
    if event_type == SYNC:
        return None
    if event_type == DELETED:
        return f"Pod {object_key(old or new or {})} gone" if pod_ready(old or new) else None
    if new is None:
        return None
    key = object_key(new)
    if old is None:
        return f"Pod {key} ready" if pod_ready(new) else None
    if pod_image(old) != pod_image(new):
        return f"Pod {key} runtime image {pod_image(old) or '-'}→{pod_image(new) or '-'}"
    if pod_ready(old) != pod_ready(new):
        return f"Pod {key} {'ready' if pod_ready(new) else 'not ready'}"
    return None


def served_name(statefulset: Obj | None) -> str | None:
    """The name the runtime serves its model as (``--served-model-name`` of the runtime container)."""
    containers = ((((statefulset or {}).get("spec") or {}).get("template") or {}).get("spec") or {}).get(
        "containers"
    ) or []
    for container in containers:
        if container.get("name") != RUNTIME_CONTAINER:
            continue
        argv = [*(container.get("command") or []), *(container.get("args") or [])]
        for i, arg in enumerate(argv):
            if arg == "--served-model-name" and i + 1 < len(argv):
                return str(argv[i + 1])
            if isinstance(arg, str) and arg.startswith("--served-model-name="):
                return arg.split("=", 1)[1]
    return None


@dataclass
class Coalesced:
    """Changes of one order gathered within the debounce window: one ``observed`` signal."""

    changes: list[tuple[str, str]] = field(default_factory=list)  # (kind, what)

    def add(self, kind: str, what: str) -> None:
        if (kind, what) not in self.changes:
            self.changes.append((kind, what))

    def summary(self, most: int = 4) -> tuple[str, str]:
        """(kind, what): the first change's kind; the changes joined, at most ``most`` named."""
        shown = [what for _, what in self.changes[:most]]
        rest = len(self.changes) - most
        what = "; ".join(shown) + (f"; and {rest} more" if rest > 0 else "")
        return (self.changes[0][0] if self.changes else ""), what


# ------------------------------------------------------------------------------------- models


def model_ref_key(order: Obj) -> tuple[str, str, str] | None:
    """(kind, namespace, name) of the catalog model an order references; a Model's namespace
    defaults to the order's, a ClusterModel has none. None on the direct (HuggingFace) path."""
    model = ((order.get("spec") or {}).get("model")) or {}
    if model.get("src") != ModelSource.AI_MODELS.value:
        return None
    ref = model.get("ref") or {}
    kind = ref.get("kind")
    if kind == ModelKind.CLUSTER_MODEL.value:
        return (kind, "", str(ref.get("name")))
    if kind == ModelKind.MODEL.value:
        return (kind, str(ref.get("namespace") or meta(order).get("namespace")), str(ref.get("name")))
    return None


def catalog_key(kind: str, obj: Obj) -> tuple[str, str, str]:
    m = meta(obj)
    return (kind, str(m.get("namespace") or ""), str(m.get("name")))


def model_phase(obj: Obj | None) -> str | None:
    phase = ((obj or {}).get("status") or {}).get("phase")
    return str(phase) if phase else None


def model_change(kind: str, event_type: str, old: Obj | None, new: Obj | None) -> str | None:
    """A catalog model appeared (after the first listing) or turned Ready → what to tell the orders
    that reference it."""
    if new is None or event_type in (SYNC, DELETED):
        return None
    name = object_key(new)
    if event_type == ADDED and old is None:
        return f"{kind} {name} appeared"
    if model_phase(new) == "Ready" and model_phase(old) != "Ready":
        return f"{kind} {name} is Ready"
    return None


# ------------------------------------------------------------------------------------- health


class Serving(StrEnum):
    """What an order's status says of its API."""

    NO = "No"  # not serving (yet): not probed
    HEALTHY = "Healthy"  # Ready=True
    UNHEALTHY = "Unhealthy"  # Ready=False/ServiceUnhealthy


_SERVING_PHASES = {Phase.READY.value, Phase.DEGRADED.value, Phase.FAILED.value}


def serving(order: Obj | None) -> Serving:
    """Probe an order whose status.phase is Ready, Degraded or Failed and whose Ready condition is
    True (healthy) or False with ServiceUnhealthy (unhealthy); never one being deleted. A Degraded
    order whose Ready says False with the reason of its class or model step, which says False too,
    serves while they refuse it (``workflows.status.published_conditions``): healthy, probed as such."""
    if order is None or deleting(order):
        return Serving.NO
    status = order.get("status") or {}
    if status.get("phase") not in _SERVING_PHASES:
        return Serving.NO
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    ready = conditions.get(ConditionType.READY.value)
    if ready is None:
        return Serving.NO
    if ready.get("status") == "True":
        return Serving.HEALTHY
    if ready.get("status") == "False" and ready.get("reason") == Reason.SERVICE_UNHEALTHY.value:
        return Serving.UNHEALTHY
    if status.get("phase") == Phase.DEGRADED.value and ready.get("status") == "False":
        judged = (conditions.get(t.value) or {} for t in (ConditionType.CLASS_RESOLVED, ConditionType.MODEL_RESOLVED))
        if any(c.get("status") == "False" and c.get("reason") == ready.get("reason") for c in judged):
            return Serving.HEALTHY
    return Serving.NO


@dataclass
class HealthTrack:
    """Probe results of one order (by uid) and whether its flip was already reported.

    ``reported`` is the serving state under which a flip was signalled: while the status still says
    it, the flip is not signalled again; once the status moves on (the workflow acted) it is cleared.
    ``forget`` (each resync) clears it too, so a flip the workflow never acted on is told again.
    """

    failures: int = 0
    reported: Serving | None = None

    def observe(self, state: Serving, ok: bool, detail: str, threshold: int) -> HealthReport | None:
        if self.reported is not None and self.reported != state:
            self.reported = None
        if ok:
            self.failures = 0
            if state == Serving.UNHEALTHY and self.reported is None:
                self.reported = state
                return HealthReport(healthy=True, detail=detail)
            return None
        self.failures += 1
        if state == Serving.HEALTHY and self.failures >= threshold and self.reported is None:
            self.reported = state
            return HealthReport(healthy=False, detail=detail, failures=self.failures)
        return None

    def forget(self) -> None:
        self.reported = None


# ------------------------------------------------------------------------------------- resync


@dataclass(frozen=True)
class RunningWorkflow:
    """A running order workflow as Temporal's visibility lists it."""

    workflow_id: str
    run_id: str
    workflow_type: str
    release: str | None = None


@dataclass(frozen=True)
class ListedOrder:
    """An order as the observer's order cache holds it."""

    ref: OrderRef
    generation: int
    deleting: bool = False


def order_workflow_ref(workflow_id: str) -> OrderRef | None:
    """The order an order workflow id (``order/<namespace>/<name>/<uid>``) names; None for any other id."""
    parts = workflow_id.split("/")
    if len(parts) != 4 or parts[0] != "order" or not all(parts[1:]):
        return None
    return OrderRef(namespace=parts[1], name=parts[2], uid=parts[3])


def listed_order(obj: Obj) -> ListedOrder:
    return ListedOrder(ref=order_ref(obj), generation=generation(obj), deleting=deleting(obj))


@dataclass
class ResyncPlan:
    # signal-with-start the new type (the order has no running order workflow).
    start: list[tuple[OrderRef, Intent]] = field(default_factory=list)
    # terminate the legacy run, then signal-with-start the new type.
    move: list[tuple[OrderRef, str, Intent]] = field(default_factory=list)
    # a running workflow whose order is gone: signal delete (first resync) ...
    delete: list[OrderRef] = field(default_factory=list)
    # ... and terminate it when it still runs at the next one: (workflow id, run id).
    terminate: list[tuple[str, str]] = field(default_factory=list)
    # re-derived: a deleting order whose workflow runs hears delete again.
    redelete: list[OrderRef] = field(default_factory=list)
    # the workflow's OrderRelease is not the fingerprint in force (or unset): settings_changed.
    settings: list[OrderRef] = field(default_factory=list)
    # the orphans signalled this time, (workflow id, run id): the next resync terminates them.
    orphans: set[tuple[str, str]] = field(default_factory=set)

    def counts(self) -> dict[str, int]:
        return {
            "start": len(self.start),
            "move": len(self.move),
            "delete": len(self.delete),
            "terminate": len(self.terminate),
            "redelete": len(self.redelete),
            "settings": len(self.settings),
        }


def _start_intent(order: ListedOrder) -> Intent:
    if order.deleting:
        return Intent(OrderSignal.DELETE, start=True)
    return Intent(OrderSignal.SPEC_CHANGED, order.generation, start=True)


def plan_resync(
    orders: Iterable[ListedOrder],
    running: Iterable[RunningWorkflow],
    fingerprint: str,
    previous_orphans: set[tuple[str, str]] | frozenset[tuple[str, str]] = frozenset(),
    told_release: Mapping[str, str] | None = None,
    shards: int = 1,
    shard: int = 0,
    recently_started: set[str] | frozenset[str] = frozenset(),
) -> ResyncPlan:
    """Compare the listing of orders with the running order workflows (this shard's only).

    ``previous_orphans``: what the last resync signalled ``delete`` as orphans; one still running now
    is terminated. ``told_release``: workflow id → the fingerprint already signalled to it (a
    workflow that heard it is not told again until the fingerprint changes). ``recently_started``:
    workflow ids this observer started moments ago, which visibility may not list yet: not started
    again, and not told settings_changed (the reconcile their start asked for reads the settings).
    """
    told = told_release or {}
    plan = ResyncPlan()
    by_uid = {o.ref.uid: o for o in orders if in_shard(o.ref.uid, shards, shard)}
    seen: set[str] = set()
    for wf in running:
        ref = order_workflow_ref(wf.workflow_id)
        if ref is None or not in_shard(ref.uid, shards, shard):
            continue
        if wf.workflow_type != ORDER_WORKFLOW_TYPE and wf.workflow_type not in LEGACY_ORDER_WORKFLOW_TYPES:
            continue
        order = by_uid.get(ref.uid)
        if order is None:
            if (wf.workflow_id, wf.run_id) in previous_orphans:
                plan.terminate.append((wf.workflow_id, wf.run_id))
            else:
                plan.delete.append(ref)
                plan.orphans.add((wf.workflow_id, wf.run_id))
            continue
        seen.add(ref.uid)
        if wf.workflow_type in LEGACY_ORDER_WORKFLOW_TYPES:
            plan.move.append((order.ref, wf.run_id, _start_intent(order)))
            continue
        if order.deleting:
            plan.redelete.append(order.ref)
        # One signalled-with-start moments ago is not told: the reconcile that start asked for reads the
        # settings in force (its OrderRelease may be unset yet). Told now, it would reconcile twice.
        elif (
            wf.workflow_id not in recently_started
            and wf.release != fingerprint
            and told.get(wf.workflow_id) != fingerprint
        ):
            plan.settings.append(order.ref)
    for uid, order in by_uid.items():
        if uid in seen:
            continue
        if order_workflow_id(order.ref.namespace, order.ref.name, order.ref.uid) in recently_started:
            continue
        plan.start.append((order.ref, _start_intent(order)))
    return plan


def running_order_query(task_queue: str) -> str:
    """Visibility query of every running order workflow (new and legacy types) of one task queue."""
    types = ", ".join(f"'{t}'" for t in (ORDER_WORKFLOW_TYPE, *LEGACY_ORDER_WORKFLOW_TYPES))
    return f"ExecutionStatus = 'Running' AND WorkflowType IN ({types}) AND TaskQueue = '{task_queue}'"


# ------------------------------------------------------------------------ replica troubles

# What a troubled replica's message may hold at most (the condition message holds the rest of it).
TROUBLE_MESSAGE_LIMIT = 480
# Waiting reasons of a container whose image cannot be had.
_IMAGE_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
# Waiting reasons of a container the kubelet cannot even create (a Secret or ConfigMap it reads is
# missing, a bad command path).
_CANNOT_START_REASONS = frozenset({"CreateContainerConfigError", "CreateContainerError", "RunContainerError"})
# Scheduler verdicts that are a moment of the cluster's own work, not a failure: the volume is bound
# (and the pod retried) by the provisioner, the DRA claim made from its template by the controller.
_TRANSIENT_UNSCHEDULABLE = ("unbound immediate PersistentVolumeClaims", "waiting for resource claim", "not found")
# The DRA scheduler plugin's verdicts on a claim it cannot allocate.
_CLAIM_VERDICTS = ("cannot allocate all claims", "resourceclaim", "resource claim")
# What the order does about each (workflows/order.py acts on it).
TROUBLE_ACTIONS: Mapping[Reason, str] = {
    Reason.NODE_LOST: TroubleAction.REPLAN,
    Reason.CLAIM_NOT_ALLOCATABLE: TroubleAction.REPLAN,
    Reason.POD_UNSCHEDULABLE: TroubleAction.REPLAN,
    Reason.QUOTA_EXCEEDED: TroubleAction.WAIT_FOR_EDIT,
    Reason.POD_CREATION_REFUSED: TroubleAction.WAIT_FOR_EDIT,
    Reason.IMAGE_PULL_FAILED: TroubleAction.WAIT_FOR_EDIT,
    Reason.MODEL_DOWNLOAD_FAILED: TroubleAction.WAIT_FOR_EDIT,
    Reason.RUNTIME_OOM_KILLED: TroubleAction.WAIT_FOR_EDIT,
    Reason.RUNTIME_CRASH_LOOPING: TroubleAction.WAIT_FOR_EDIT,
    Reason.RUNTIME_CANNOT_START: TroubleAction.WAIT_FOR_EDIT,
    # The node may come back: the placement is kept (no replan, no retry timer) until the grace ends,
    # when the observer looks again and the trouble becomes NodeLost.
    Reason.NODE_NOT_READY: TroubleAction.WAIT_FOR_EDIT,
    Reason.MODEL_DOWNLOADING: TroubleAction.WAIT,
    Reason.MODEL_LOADING: TroubleAction.WAIT,
}
# Anything that reads like a credential in a message the cluster wrote (an engine's log tail can
# print its arguments): replaced before the message leaves the observer.
_SECRET_PATTERNS = (
    re.compile(r"(?i)(bearer\s+)[^\s'\",]+"),
    re.compile(r"(?i)((?:api[_-]?key|token|password|secret|authorization)['\"]?\s*[:=]\s*['\"]?)[^\s'\",}]+"),
    re.compile(r"\bhf_[A-Za-z0-9]{8,}"),
)


def redact(text: str) -> str:
    """``text`` with whatever reads like a credential replaced by ``***``."""
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + "***", text)
    return text


def cut(text: str, limit: int = TROUBLE_MESSAGE_LIMIT) -> str:
    """A message cut to fit: its last lines (where an engine's error is), one line, at most ``limit``."""
    lines = [line.strip() for line in str(text or "").splitlines() if line.strip()]
    joined = " | ".join(lines)
    if len(joined) <= limit:
        return joined
    return "…" + joined[-(limit - 1) :]


_ERROR_LINE = re.compile(r"(?:Error|Exception)\b|\berror:|\bERROR\b")


def last_words(text: str) -> str:
    """What a container said last that matters: its log tail from the last line that reads like an
    error (``ValueError: …``, ``api_server.py: error: unrecognized arguments …``) on; else its last
    three lines. One line (`` | `` between them)."""
    lines = [line.strip() for line in str(text or "").splitlines() if line.strip()]
    errors = [i for i, line in enumerate(lines) if _ERROR_LINE.search(line)]
    return " | ".join(lines[errors[-1] :] if errors else lines[-3:])


def _with_words(head: str, said: str) -> str:
    """``head`` kept whole, then the container's last words cut to what the message has left."""
    words = last_words(said)
    if not words:
        return head
    return f"{head}: {cut(words, max(80, TROUBLE_MESSAGE_LIMIT - len(head) - 2))}"


def trouble(reason: Reason, message: str, subject: str) -> ReplicaTrouble:
    return ReplicaTrouble(
        reason=reason.value, message=redact(cut(message)), action=TROUBLE_ACTIONS[reason], subject=subject
    )


def node_ready(node: Obj | None) -> tuple[bool, str]:
    """Whether a Node is Ready, and what its Ready condition says when it is not."""
    for condition in ((node or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            if condition.get("status") == "True":
                return True, ""
            said = condition.get("message") or condition.get("reason") or f"Ready={condition.get('status')}"
            return False, f"Ready={condition.get('status')}: {said}"
    return False, "it reports no Ready condition"


def pinned_node(pod: Obj) -> str | None:
    """The node a pod's required node affinity names (``matchFields metadata.name In [node]``, as the
    builder pins a one-replica order to its planned node)."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    for term in required.get("nodeSelectorTerms") or []:
        for expression in term.get("matchFields") or []:
            values = expression.get("values") or []
            if expression.get("key") == "metadata.name" and expression.get("operator") == "In" and len(values) == 1:
                return str(values[0])
    return None


def parse_time(value: object) -> datetime | None:
    """An API server timestamp (``2026-12-01T10:00:00Z``) as an aware datetime, None when unreadable."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    try:
        parsed = datetime.fromisoformat(str(value or ""))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _stamp(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def not_ready_since(node: Obj | None) -> datetime | None:
    """When a node that is not Ready stopped being Ready: its Ready condition's lastTransitionTime (the
    kubelet's, or the node lifecycle controller's when it marked it Unknown). None when it is Ready, or
    when the time is missing or unreadable."""
    for condition in ((node or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            if condition.get("status") == "True":
                return None
            return parse_time(condition.get("lastTransitionTime"))
    return None


@dataclass(frozen=True)
class NodeGrace:
    """The grace a node that is not Ready gets before its pods' orders move: ``now`` (the observer's
    clock when it looks: decisions have none) and ``seconds`` (``observer.nodeNotReadyGraceSeconds``)."""

    now: datetime
    seconds: float

    def ends(self, node: Obj | None) -> datetime | None:
        """When the node's grace ends, None when it has none (Ready, no grace, or no transition time:
        a not-Ready node that cannot say since when is lost at once)."""
        since = not_ready_since(node)
        if since is None or self.seconds <= 0:
            return None
        return since + timedelta(seconds=self.seconds)

    def within(self, node: Obj | None) -> bool:
        ends = self.ends(node)
        return ends is not None and self.now < ends


def _node_trouble(
    node_name: str, nodes: Mapping[str, Obj], pod_key: str, pinned: bool, grace: NodeGrace | None = None
) -> ReplicaTrouble | None:
    """A deleted node: NodeLost at once. A node not Ready: NodeNotReady while within its ``grace``
    (the placement is kept), NodeLost after it (or at once without a grace)."""
    node = nodes.get(node_name)
    where = f"the node {node_name} that pod {pod_key} is {'pinned to' if pinned else 'on'}"
    if node is None:
        return trouble(Reason.NODE_LOST, f"{where} is gone (deleted from the cluster)", node_name)
    ready, why = node_ready(node)
    if ready:
        return None
    since = not_ready_since(node)
    ends = grace.ends(node) if grace is not None else None
    if grace is None or ends is None:
        return trouble(Reason.NODE_LOST, f"{where} is not Ready ({why})", node_name)
    assert since is not None  # ends is since + grace
    if grace.within(node):
        return trouble(
            Reason.NODE_NOT_READY,
            f"{where} is not Ready since {_stamp(since)} ({why}); the order keeps its placement until "
            f"{_stamp(ends)} ({grace.seconds:g} s grace, as the cluster's own eviction gives its pods)",
            node_name,
        )
    return trouble(
        Reason.NODE_LOST,
        f"{where} is not Ready since {_stamp(since)}, past its {grace.seconds:g} s grace ({why})",
        node_name,
    )


def _container_trouble(pod_key: str, status: Obj, init: bool) -> ReplicaTrouble | None:
    name = str(status.get("name") or "")
    state = status.get("state") or {}
    waiting = state.get("waiting") or {}
    waiting_reason = str(waiting.get("reason") or "")
    last = (status.get("lastState") or {}).get("terminated") or {}
    terminated = state.get("terminated") or {}
    what = f"pod {pod_key}, container {name}"
    if waiting_reason in _IMAGE_PULL_REASONS:
        return trouble(Reason.IMAGE_PULL_FAILED, f"{what}: {waiting_reason}: {waiting.get('message') or ''}", pod_key)
    if waiting_reason in _CANNOT_START_REASONS:
        return trouble(
            Reason.RUNTIME_CANNOT_START, f"{what}: {waiting_reason}: {waiting.get('message') or ''}", pod_key
        )
    # A container that ended badly: now (an init container between attempts), in its back-off, or
    # started again but not ready yet after it (the trouble holds until it is ready: no flapping).
    ended = terminated if terminated and int(terminated.get("exitCode") or 0) != 0 else None
    restarted = bool(last) and int(status.get("restartCount") or 0) > 0 and not status.get("ready")
    if ended is None and restarted and (waiting_reason == "CrashLoopBackOff" or "running" in state or init):
        ended = last
    if ended is None:
        return None
    code = ended.get("exitCode")
    said = ended.get("message") or ""
    ended_reason = str(ended.get("reason") or "")
    restarts = int(status.get("restartCount") or 0)
    head = f"{what} exited with code {code}" + (f" ({ended_reason})" if ended_reason else "")
    head += f", restarted {restarts} time(s)" if restarts else ""
    if init and name == FETCHER_CONTAINER:
        return trouble(Reason.MODEL_DOWNLOAD_FAILED, _with_words(head, said), pod_key)
    if ended_reason == "OOMKilled":
        return trouble(Reason.RUNTIME_OOM_KILLED, _with_words(f"{head}, killed for memory", said), pod_key)
    return trouble(Reason.RUNTIME_CRASH_LOOPING, _with_words(head, said), pod_key)


def _loading(pod_key: str, status: Obj) -> ReplicaTrouble | None:
    """The runtime runs and has not passed its startup probe (or is not ready yet, never restarted)."""
    state = status.get("state") or {}
    if state.get("running") is None or status.get("ready"):
        return None
    since = (state.get("running") or {}).get("startedAt") or ""
    return trouble(
        Reason.MODEL_LOADING,
        f"pod {pod_key}: the engine runs{' since ' + since if since else ''} and loads the model; "
        "it serves once its probes pass",
        pod_key,
    )


# The fetcher's line (activities/builders/fetcher.py): "model-fetcher: progress: <arrived> of <total> bytes (<p>%)".
_PROGRESS_LINE = re.compile(r"model-fetcher: progress: (\d+) of (\d+) bytes")
# The order is told the download's progress in these steps (at most 100 / step status writes per replica).
PROGRESS_STEP_PERCENT = 10


@dataclass(frozen=True)
class FetchProgress:
    """How much of the model a replica's model-fetcher has put in its volume (its log's last progress line)."""

    arrived: int
    total: int

    def step(self, percent_step: int = PROGRESS_STEP_PERCENT) -> int:
        """The percentage arrived, rounded down to ``percent_step``: the order is told each step once."""
        if self.total <= 0:
            return 0
        return min(100, int(100 * self.arrived / self.total) // percent_step * percent_step)


def fetch_progress(log_tail: str) -> FetchProgress | None:
    """The last progress line of a model-fetcher's log, or None when it printed none yet."""
    found = _PROGRESS_LINE.findall(log_tail or "")
    if not found:
        return None
    arrived, total = found[-1]
    return FetchProgress(arrived=int(arrived), total=int(total))


def _mib(count: float) -> str:
    """A size in GiB from 1 GiB on, else in MiB."""
    return f"{count / (1 << 30):.1f} GiB" if count >= 1 << 30 else f"{count / (1 << 20):.1f} MiB"


def fetching_pods(pods: Iterable[Obj]) -> list[Obj]:
    """The order's pods whose model-fetcher runs now (a download under way)."""
    return [
        p
        for p in pods
        if not deleting(p)
        and any(
            c.get("name") == FETCHER_CONTAINER and "running" in (c.get("state") or {})
            for c in (p.get("status") or {}).get("initContainerStatuses") or []
        )
    ]


def _downloading(pod_key: str, progress: FetchProgress | None) -> ReplicaTrouble:
    """The replica's model-fetcher runs: how much of the model arrived, in steps, when its log says."""
    if progress is None or progress.total <= 0:
        said = f"pod {pod_key}: the model downloads (its model-fetcher runs)"
        return trouble(Reason.MODEL_DOWNLOADING, said, pod_key)
    step = progress.step()
    return trouble(
        Reason.MODEL_DOWNLOADING,
        f"pod {pod_key}: the model downloads: {step} % of {_mib(progress.total)} arrived "
        f"({_mib(progress.total * step / 100)} or more)",
        pod_key,
    )


def pod_trouble(
    pod: Obj,
    nodes: Mapping[str, Obj] | None,
    grace: NodeGrace | None = None,
    progress: Mapping[str, FetchProgress] | None = None,
) -> ReplicaTrouble | None:
    """What is wrong with one replica's Pod, as the cluster says it, or None.

    ``nodes``: the Nodes by name (None while they are not listed yet: no node verdict then). Read in
    this order: its node lost (deleted, or not Ready); its scheduling refused (a claim the scheduler
    cannot allocate, a pinned node that is gone, anything else); its init containers (the model
    fetcher) and its runtime failing (image, config, exits, OOM); its runtime loading.

    ``grace``: the grace a node that is not Ready gets (NodeNotReady until it ends; None: NodeLost at
    once). A pod being deleted is no trouble, unless its node is away: a pod on a node that does not
    answer stays Terminating (the taint manager's eviction included) and its replacement waits for it.
    """
    key = object_key(pod)
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    node_name = spec.get("nodeName")
    if node_name and nodes is not None:
        lost = _node_trouble(str(node_name), nodes, key, pinned=False, grace=grace)
        if lost is not None:
            return lost
    if deleting(pod):
        return None
    if not node_name:
        for condition in status.get("conditions") or []:
            if condition.get("type") != "PodScheduled" or condition.get("status") != "False":
                continue
            if condition.get("reason") != "Unschedulable":
                return None
            message = str(condition.get("message") or "")
            if any(t in message for t in _TRANSIENT_UNSCHEDULABLE):
                return None
            pinned = pinned_node(pod)
            if pinned is not None and nodes is not None:
                lost = _node_trouble(pinned, nodes, key, pinned=True, grace=grace)
                if lost is not None:
                    return lost
            if any(v in message.lower() for v in _CLAIM_VERDICTS):
                return trouble(Reason.CLAIM_NOT_ALLOCATABLE, f"pod {key} cannot be scheduled: {message}", key)
            return trouble(Reason.POD_UNSCHEDULABLE, f"pod {key} cannot be scheduled: {message}", key)
        return None
    for container in status.get("initContainerStatuses") or []:
        found = _container_trouble(key, container, init=True)
        if found is not None:
            return found
    if fetching_pods([pod]):
        return _downloading(key, (progress or {}).get(key))
    runtime: Obj | None = None
    for container in status.get("containerStatuses") or []:
        found = _container_trouble(key, container, init=False)
        if found is not None:
            return found
        if container.get("name") == RUNTIME_CONTAINER:
            runtime = container
    return _loading(key, runtime) if runtime is not None else None


def _event_time(event: Obj) -> str:
    return str(event.get("lastTimestamp") or event.get("eventTime") or meta(event).get("creationTimestamp") or "")


def statefulset_trouble(statefulset: Obj | None, events: Iterable[Obj]) -> ReplicaTrouble | None:
    """A StatefulSet that is refused its pods: it has fewer than it wants and the StatefulSet
    controller's latest ``FailedCreate`` event says why (a ResourceQuota, an admission refusal).
    The StatefulSet has no condition for it: the Event is the only place the cluster says it."""
    if statefulset is None or deleting(statefulset):
        return None
    wanted = int(((statefulset.get("spec") or {}).get("replicas")) or 0)
    made = int(((statefulset.get("status") or {}).get("replicas")) or 0)
    if made >= wanted:
        return None
    name = str(meta(statefulset).get("name"))
    refusals = [
        e for e in events if e.get("reason") == "FailedCreate" and ((e.get("involvedObject") or {}).get("name")) == name
    ]
    if not refusals:
        return None
    latest = max(refusals, key=_event_time)
    message = str(latest.get("message") or "")
    key = object_key(statefulset)
    said = f"StatefulSet {key} has {made} of {wanted} pods: {message}"
    if "exceeded quota" in message:
        return trouble(Reason.QUOTA_EXCEEDED, said, key)
    return trouble(Reason.POD_CREATION_REFUSED, said, key)


def order_trouble(
    pods: Iterable[Obj],
    statefulset: Obj | None,
    events: Iterable[Obj],
    nodes: Mapping[str, Obj] | None,
    grace: NodeGrace | None = None,
    progress: Mapping[str, FetchProgress] | None = None,
) -> ReplicaTrouble | None:
    """The trouble an order's replicas have, the worst first (``TROUBLE_SEVERITY``; of equals, the
    lowest pod name), or None. A replica that is ready has none. ``progress``: the downloads' progress
    by pod key (from their fetchers' logs)."""
    found = [t for t in (pod_trouble(p, nodes, grace, progress) for p in sorted(pods, key=object_key)) if t is not None]
    refused = statefulset_trouble(statefulset, events)
    if refused is not None:
        found.append(refused)
    if not found:
        return None
    rank = {reason.value: i for i, reason in enumerate(TROUBLE_SEVERITY)}
    return min(found, key=lambda t: rank.get(t.reason, len(rank)))


def grace_ends(pods: Iterable[Obj], nodes: Mapping[str, Obj] | None, grace: NodeGrace) -> datetime | None:
    """The earliest end of a grace still running for a node the order's pods are on (or pinned to): when
    the observer must look at the order again although no event may come (a node that stays NotReady
    changes nothing the informers see). None when no such grace runs."""
    if nodes is None:
        return None
    ends: list[datetime] = []
    for pod in pods:
        name = ((pod.get("spec") or {}).get("nodeName")) or pinned_node(pod)
        node = nodes.get(str(name)) if name else None
        end = grace.ends(node)
        if end is not None and grace.now < end:
            ends.append(end)
    return min(ends, default=None)


@dataclass
class TroubleMemory:
    """The last trouble told to one order's workflow (by uid): told again only when it changes.
    ``looked``: this observer looked at the order's replicas once already (since it started)."""

    told: ReplicaTrouble | None = None
    looked: bool = False


def shows_trouble(order: Obj | None) -> bool:
    """The order's status names a replica trouble (WorkloadReady's reason is one)."""
    workload = _condition(order, ConditionType.WORKLOAD_READY)
    return workload is not None and workload.get("reason") in {r.value for r in TROUBLE_ACTIONS}


def trouble_signal(found: ReplicaTrouble | None, memory: TroubleMemory, shown: bool = False) -> ReplicaTrouble | None:
    """What to tell the workflow now, or None: a new trouble (its reason, subject or message changed),
    or that the one told is over (a cleared ``ReplicaTrouble``). Nothing when nothing was told and
    nothing is wrong — except at this observer's first look, when the order's status still ``shown``
    a trouble that another observer (before a restart) told and that is over by now."""
    first = not memory.looked
    memory.looked = True
    if found is None:
        if memory.told is None:
            return ReplicaTrouble() if first and shown else None
        memory.told = None
        return ReplicaTrouble()
    if memory.told == found:
        return None
    memory.told = found
    return found


# ---------------------------------------------------------------- pods on lost nodes


@dataclass(frozen=True)
class LostPod:
    """A replica's Pod bound to a node that is lost (deleted, or not Ready past its grace): the
    observer force-deletes it, so the StatefulSet makes the replica again and its claim is freed.
    ``why``: the node's state, for the message that says what was done."""

    namespace: str
    name: str
    uid: str
    node: str
    why: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def note(self) -> str:
        """What was done, as the order's condition message says it (no secret: names and times)."""
        if not self.node:  # an unscheduled pod (``pods_with_stale_claims``)
            return f"pod {self.key} deleted, {self.why}"
        return f"pod {self.key} force-deleted from node {self.node}, {self.why}"


def _controller_uid(obj: Obj, kind: str) -> str | None:
    for owner in meta(obj).get("ownerReferences") or []:
        if owner.get("kind") == kind and owner.get("controller"):
            return str(owner.get("uid") or "") or None
    return None


def _lost_why(node_name: str, nodes: Mapping[str, Obj], grace: NodeGrace) -> str | None:
    """Why the node is lost by the rule ``_node_trouble`` applies, or None when it is not (Ready, or
    not Ready within its grace)."""
    node = nodes.get(node_name)
    if node is None:
        return "which is gone (deleted from the cluster)"
    ready, _ = node_ready(node)
    if ready or grace.within(node):
        return None
    since = not_ready_since(node)
    if since is None or grace.seconds <= 0:
        return "not Ready" + (f" since {_stamp(since)}" if since is not None else "")
    return f"not Ready since {_stamp(since)}, past its {grace.seconds:g} s grace"


def _order_statefulset(order: Obj, statefulset: Obj) -> tuple[str, str] | None:
    """The order's namespace and its StatefulSet's uid, when the StatefulSet is the order's own (its
    controller owner is the order's uid, in the order's namespace); None otherwise."""
    namespace = str(meta(order).get("namespace") or "")
    order_uid = str(meta(order).get("uid") or "")
    if not namespace or not owned_by(statefulset, order_uid) or meta(statefulset).get("namespace") != namespace:
        return None
    sts_uid = str(meta(statefulset).get("uid") or "")
    return (namespace, sts_uid) if sts_uid else None


def pods_on_lost_nodes(
    order: Obj | None,
    statefulset: Obj | None,
    pods: Iterable[Obj],
    nodes: Mapping[str, Obj] | None,
    grace: NodeGrace,
) -> list[LostPod]:
    """The order's own Pods bound to a lost node, to force-delete (a pod there stays Terminating for
    good: no kubelet confirms its deletion, and the StatefulSet makes no replacement while it stands).

    Derived from the cluster only: the order (not being deleted), its StatefulSet (controller-owned by
    the order's uid, in its namespace), Pods whose controller owner is that StatefulSet's uid, in the
    order's namespace, bound (``spec.nodeName``) to a node that is deleted or not Ready past its grace.
    Nothing while the Nodes are not listed yet (a node missing from an unsynced cache is not gone)."""
    if order is None or statefulset is None or nodes is None or deleting(order):
        return []
    chain = _order_statefulset(order, statefulset)
    if chain is None:
        return []
    namespace, sts_uid = chain
    lost: list[LostPod] = []
    for pod in sorted(pods, key=object_key):
        m = meta(pod)
        node_name = str(((pod.get("spec") or {}).get("nodeName")) or "")
        uid = str(m.get("uid") or "")
        if (
            not node_name
            or not uid
            or m.get("namespace") != namespace
            or _controller_uid(pod, "StatefulSet") != sts_uid
        ):
            continue
        why = _lost_why(node_name, nodes, grace)
        if why is not None:
            lost.append(LostPod(namespace=namespace, name=str(m.get("name")), uid=uid, node=node_name, why=why))
    return lost


def _claim_refused(pod: Obj) -> bool:
    """The scheduler refused the pod for its device claim (``PodScheduled=False/Unschedulable``)."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            message = str(condition.get("message") or "").lower()
            return condition.get("reason") == "Unschedulable" and any(v in message for v in _CLAIM_VERDICTS)
    return False


def pods_with_stale_claims(
    order: Obj | None, statefulset: Obj | None, claim_templates: Mapping[str, Obj], pods: Iterable[Obj]
) -> list[LostPod]:
    """The order's own Pods that wait, unscheduled, on a device claim made from a claim template the
    order has replaced since: to delete, so the StatefulSet makes them again with a claim of the
    current template.

    A pod's ResourceClaim is made from the template once, when the pod is made. A new plan that puts
    the replica on another device of the same class and share replaces the template (its spec is
    immutable) but not the pod template, so the StatefulSet controller leaves the waiting pod alone:
    its claim still names the device the scheduler could not allocate (``ClaimNotAllocatable``), and
    every replan would replace the template again to no effect. Only pods that run nothing: not on a
    node, refused by the scheduler for their claim or waiting behind the replica-placement gate, made
    (``creationTimestamp``) before the template
    they name (``claim_templates``: by name, the order's own). Derived from the cluster only, like
    ``pods_on_lost_nodes``."""
    if order is None or statefulset is None or deleting(order):
        return []
    chain = _order_statefulset(order, statefulset)
    if chain is None:
        return []
    namespace, sts_uid = chain
    stale: list[LostPod] = []
    for pod in sorted(pods, key=object_key):
        m = meta(pod)
        spec = pod.get("spec") or {}
        uid = str(m.get("uid") or "")
        created = str(m.get("creationTimestamp") or "")
        if (
            spec.get("nodeName")
            or deleting(pod)
            or not uid
            or not created
            or m.get("namespace") != namespace
            or _controller_uid(pod, "StatefulSet") != sts_uid
            # A gated pod's claim made from a replaced template is never placed: it runs nothing either.
            or not (_claim_refused(pod) or waits_for_placement(spec))
        ):
            continue
        for claim in spec.get("resourceClaims") or []:
            template = claim_templates.get(str(claim.get("resourceClaimTemplateName") or ""))
            if template is None or not owned_by(template, str(meta(order).get("uid") or "")):
                continue
            replaced = str(meta(template).get("creationTimestamp") or "")
            # RFC 3339 UTC timestamps of one API server compare as strings.
            if replaced and created < replaced:
                name = meta(template).get("name")
                why = f"its device claim was made from claim template {name} before a new plan replaced it"
                stale.append(LostPod(namespace=namespace, name=str(m.get("name")), uid=uid, node="", why=why))
                break
    return stale


def with_release_notes(found: ReplicaTrouble | None, notes: Mapping[str, str]) -> ReplicaTrouble | None:
    """A NodeLost trouble about a node the observer force-deleted the order's pods from, its message
    followed by what was done (``notes``: by node name)."""
    if found is None or found.reason != Reason.NODE_LOST.value or found.subject not in notes:
        return found
    return found.model_copy(update={"message": redact(cut(f"{found.message}; {notes[found.subject]}"))})


# Tries of one force delete that fails for want of an answer (the API server unreachable, 5xx, 429).
RELEASE_ATTEMPTS = 5
RELEASE_RETRY_BASE_SECONDS = 2.0


class ReleaseOutcome(StrEnum):
    DELETED = "Deleted"  # force-deleted now
    GONE = "Gone"  # 404 (already gone) or 409 (the uid precondition: another pod has the name now)
    REFUSED = "Refused"  # 403 or another 4xx: the same answer next time, never asked again
    RETRY = "Retry"  # no answer, 429 or 5xx: asked again later
    GIVEN_UP = "GivenUp"  # RETRY too many times


@dataclass
class ReleaseMemory:
    """One order's force deletes of pods on lost nodes: those in flight, those done (whatever the
    answer: never asked again), the failed tries of each, and what was done by node (for its message)."""

    in_flight: set[str] = field(default_factory=set)
    done: set[str] = field(default_factory=set)
    attempts: dict[str, int] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)

    def may_try(self, pod_uid: str) -> bool:
        return pod_uid not in self.in_flight and pod_uid not in self.done

    def outcome(self, lost: LostPod, status: int | None) -> ReleaseOutcome:
        """What a delete's answer (HTTP ``status``; None: no answer) means, remembered."""
        if status is not None and 200 <= status < 300:
            self.done.add(lost.uid)
            self.attempts.pop(lost.uid, None)
            self.notes[lost.node] = lost.note()
            return ReleaseOutcome.DELETED
        if status in (404, 409):
            self.done.add(lost.uid)
            self.attempts.pop(lost.uid, None)
            return ReleaseOutcome.GONE
        if status is not None and 400 <= status < 500 and status != 429:
            self.done.add(lost.uid)
            self.attempts.pop(lost.uid, None)
            return ReleaseOutcome.REFUSED
        self.attempts[lost.uid] = self.attempts.get(lost.uid, 0) + 1
        if self.attempts[lost.uid] >= RELEASE_ATTEMPTS:
            self.done.add(lost.uid)
            self.attempts.pop(lost.uid, None)
            return ReleaseOutcome.GIVEN_UP
        return ReleaseOutcome.RETRY


def release_retry_delay(memory: ReleaseMemory, pod_uid: str) -> float:
    """Seconds before a failed force delete is tried again: doubling from RELEASE_RETRY_BASE_SECONDS."""
    return RELEASE_RETRY_BASE_SECONDS * 2 ** max(0, memory.attempts.get(pod_uid, 1) - 1)
