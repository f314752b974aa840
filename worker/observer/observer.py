"""The observer (``ai-inference watch``): Kubernetes changes and probe verdicts become order signals.

Informers on orders, classes, what orders own (by the module's labels: StatefulSets and their Pods,
Services, Ingresses, NetworkPolicies, HPAs, ResourceClaimTemplates), PriorityClasses, Nodes, the
StatefulSets' FailedCreate Events, what classes name (DeviceClasses, StorageClasses, cert-manager
ClusterIssuers: metadata only; a class's Ready says whether they exist, ``workflows.class_status``)
and, with the catalog enabled, Model/ClusterModel (ai-models may not be installed: an empty
informer then, and catalog orders wait with ``CatalogNotInstalled``). Not Secrets: no
module identity lists or watches them; the Secrets an order owns are read by name (``check_secret``)
every ``secret_check_seconds`` (longer past ``observer.secretReadsPerSecond``), their deletion or an
edit by someone else told as an informer's change would be. Each change goes through a pure
decision (``decisions``); what the workflow acts on is queued in the outbox (retried, never
dropped), changes of one order within ``observer.debounceSeconds`` coalesced into one signal.
Health is probed here (``prober``), and a periodic resync compares the listing with Temporal
(``resync``). What the cluster says is wrong with an order's replicas (a node lost, a pod
unschedulable or refused by a quota, an image that cannot be pulled, a download or an engine that
fails) is read off its Pods, Nodes, StatefulSet and Events (``decisions.order_trouble``) and told
as ``replica_trouble`` when it changes. Stateless: what it remembers (the last generation sent,
failures in a row) is rebuilt from a listing; two may run at once (signals are
idempotent), and orders are split between shards by uid.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import random
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog
from kubernetes.client import (
    ApiClient,
    CoreV1Api,
    CustomObjectsApi,
    V1DeleteOptions,
    V1Preconditions,
)
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError
from temporalio.client import Client

from activities.builders.common import FETCHER_CONTAINER, ObjectNames
from activities.health import probe_target, token_from_secret
from activities.order import order_event_body
from activities.release import release_fingerprint
from activities.scaling import priority_value, scaling_observation
from inference_api.observation import HealthReport, ObservedChange, OrderSignal
from inference_api.ownership import by_uid, owned_by
from inference_api.payloads import OrderEvent, OrderRef, order_workflow_id
from inference_api.preemption import ScalingObservation
from inference_api.reasons import EventReason
from inference_api.settings import CatalogMode, ModuleSettings
from inference_api.types import CLASSES, GROUP, VERSION, HttpsMode, InferenceServiceClass
from planner.inventory import InventorySnapshot
from worker.disable import wakes_after_disable
from worker.observer import decisions as d
from worker.observer import informer as inf
from worker.observer import repack
from worker.observer.informer import Change, Informer, InformerItem, Listed, ListWatch, Resource, slim_metadata
from worker.observer.inventory import InventoryInformers
from worker.observer.metrics import (
    EVENTS_HANDLED,
    ORDER_STATUS,
    ORDERS_KNOWN,
    REPACK_ASKED,
    REPACK_CONSOLIDATING,
    REPACK_DEVICES_FREED,
    REPACK_DEVICES_TO_FREE,
)
from worker.observer.outbox import Outbox, signal_to
from worker.observer.prober import Prober, ProbeSpec
from worker.observer.repair import Repair
from worker.observer.replica_placer import ReplicaPlacer
from worker.observer.resync import Resync
from workflows.class_status import NOT_SERVED, ClassReferences, Names, class_readiness_change, class_status_patch
from workflows.order_state import REPLICA_TROUBLE

log = structlog.get_logger(__name__)

# How long a device a consolidating move was asked to free is watched for, to be counted once empty: past
# the longest a move made before it breaks may take (activities/builders/move.py withdraws it at 30 min).
REPACK_FREEING_SECONDS = 3600.0
# An order asked a consolidating move is not asked again for this many repack passes.
REPACK_PASSES_BEFORE_ASKING_AGAIN = 3

# Reads one Secret by namespace and name: the object as the API server sends it, None when there is none.
SecretReader = Callable[[str, str], dict[str, Any] | None]

# How often the Secrets the observer's orders own are read by name (a deletion or someone else's edit is
# told within about this long), and how old the token a probe sends may be.
SECRET_CHECK_SECONDS = 30.0


@dataclasses.dataclass(frozen=True)
class SeenSecret:
    """The last read of one Secret an order owns: when (monotonic), whether there was one, what the
    observer keeps of its metadata (``slim_metadata``; None when it is not the order's), and, for an
    auth Secret, its token (never logged: ``repr`` hides it)."""

    read_at: float
    present: bool
    metadata: dict[str, Any] | None
    token: str | None = dataclasses.field(default=None, repr=False)


def secret_reader(api: ApiClient) -> SecretReader:
    """``GET`` of one Secret by name: the only read of a Secret the observer makes (the Secrets an
    order owns, by the names the order's own name gives: never a list or a watch)."""
    core = CoreV1Api(api)

    def read(namespace: str, name: str) -> dict[str, Any] | None:
        try:
            response = core.read_namespaced_secret(name, namespace, _preload_content=False, _request_timeout=30)
        except ApiException as err:
            if err.status == 404:
                return None
            # The status only: an error body could echo the object.
            raise RuntimeError(f"reading Secret {namespace}/{name} failed: HTTP {err.status}") from None
        try:
            found: dict[str, Any] = json.loads(response.data)
        finally:
            response.release_conn()
        return found

    return read


class Observer:
    def __init__(
        self,
        api: ApiClient,
        client: Client,
        settings: ModuleSettings,
        *,
        resources: list[Resource] | None = None,
        watch_timeout_seconds: int = 300,
        senders: int = 16,
        fingerprint: str | None = None,
        read_secret: SecretReader | None = None,
        secret_check_seconds: float = SECRET_CHECK_SECONDS,
        fence: Callable[[], bool] | None = None,
        place_replicas: bool | None = None,
    ) -> None:
        self.api = api
        self.fence = fence
        # The replica placer (worker.observer.replica_placer): shard 0's, on the cluster's informers; a
        # test's observer with its own resources runs none unless asked.
        self.place_replicas = (resources is None if place_replicas is None else place_replicas) and (
            settings.observer.shard == 0
        )
        self.placer: ReplicaPlacer | None = None
        # The devices consolidating moves were asked to free (node/device → when the ask lapses): each
        # counted as freed once a repack pass sees it empty (REPACK_DEVICES_FREED).
        self.repack_freeing: dict[str, float] = {}
        # The orders consolidating moves were asked of, and when (left out of the next passes).
        self.repack_asked: dict[str, float] = {}
        self.read_secret = read_secret or secret_reader(api)
        # The Secrets the observer's orders own, by namespace/name, as last read by name (no informer:
        # the watcher may not list or watch Secrets). Read again once older than secret_check_seconds.
        self.secrets: dict[str, SeenSecret] = {}
        self.secret_check_seconds = secret_check_seconds
        # The secret loop's next read, no sooner (observer.secretReadsPerSecond).
        self._next_secret_read = 0.0
        self.client = client
        self.settings = settings
        self.config = settings.observer
        self.catalog = settings.catalog.mode == CatalogMode.ENABLED
        self.resources = (
            resources if resources is not None else inf.resources(api, self.catalog) + inf.reference_resources(api)
        )
        self.informers = {r.kind: Informer(r.kind) for r in self.resources}
        for kind in (
            inf.ORDER,
            inf.CLASS,
            *inf.OWNED_KINDS,
            inf.POD,
            *inf.REFERENCE_KINDS,
            *inf.CATALOG_KINDS,
            inf.NODE,
            inf.EVENT,
        ):
            self.informers.setdefault(kind, Informer(kind))
        # The kinds a class names that this observer informs on: the class's Ready judges those only.
        self.reference_kinds = [k for k in inf.REFERENCE_KINDS if k in {r.kind for r in self.resources}]
        # By class name: the resourceVersion a status was computed from and what it said (a write in
        # flight is not made twice).
        self.class_writes: dict[str, tuple[str, str]] = {}
        self.watch_timeout_seconds = watch_timeout_seconds
        self.fingerprint = fingerprint or release_fingerprint(settings)
        # fence: with leader election, whether this observer still leads (asked before each send).
        self.outbox = Outbox(
            client,
            settings.temporal.taskQueue,
            senders=senders,
            fence=fence,
            start_window=self.config.startWindow,
            start_window_seconds=self.config.startWindowSeconds,
        )
        self.resync = Resync(
            client, settings.temporal.taskQueue, self.outbox, self.fingerprint, self.config.shards, self.config.shard
        )
        self.repair = Repair(client, settings.temporal.taskQueue, self.config.shards, self.config.shard, fence=fence)
        self.prober = Prober(
            settings.health,
            self.config.probeConcurrency,
            self.probe_candidates,
            self.probe_spec,
            self.serving_of,
            self.report_health,
            fresh_spec_of=lambda ref: self.probe_spec(ref, fresh=True),
        )
        self.custom = CustomObjectsApi(api)
        # The local stack writes the probe target on the order's Service: not a drift.
        annotation = settings.health.probeTargetAnnotation
        self.ignored_annotations = frozenset({annotation} if annotation else ())
        # By order uid: what was told, and changes waiting for the debounce window.
        self.memory: dict[str, d.OrderMemory] = {}
        # Orders that said ModuleDisabled, told to reconcile once since this observer started.
        self.woken: set[str] = set()
        self.uid_key: dict[str, str] = {}
        self.my_orders: set[str] = set()
        self.pending: dict[str, d.Coalesced] = {}
        self.scaling_dirty: set[str] = set()
        self.scaling_last: dict[str, tuple[object, ...]] = {}
        self._flushes: dict[str, asyncio.TimerHandle] = {}
        # By order uid: the look again when a node's NotReady grace ends (no event may come then).
        self._rechecks: dict[str, tuple[datetime, asyncio.TimerHandle]] = {}
        # By order uid: its pods force-deleted from lost nodes (observer.forceDeletePodsOnLostNodes).
        self.releases: dict[str, d.ReleaseMemory] = {}
        # Indexes by order key (namespace/name): its class, its catalog model, its Pods.
        self.by_class: dict[str, set[str]] = {}
        self.by_model: dict[tuple[str, str, str], set[str]] = {}
        self.pods_of: dict[str, set[str]] = {}
        # Replica troubles: what was told by order uid, the orders to look at again, the orders whose
        # pods are on (or pinned to) each node, the node of each pod, FailedCreate Events by StatefulSet.
        self.troubles: dict[str, d.TroubleMemory] = {}
        self.trouble_dirty: set[str] = set()
        self.orders_on_node: dict[str, set[str]] = {}
        self.pod_node: dict[str, str] = {}
        self.events_of: dict[str, set[str]] = {}
        # Downloads under way, by order uid, then pod uid: what the model-fetcher's log said last (None:
        # no progress line yet, or the log could not be read) and when it was read; the reads in flight;
        # the look again at each order while its downloads run (a log's growth sends no event).
        self.progress: dict[str, dict[str, tuple[d.FetchProgress | None, float]]] = {}
        self._progress_reads: set[str] = set()
        self._progress_looks: dict[str, asyncio.TimerHandle] = {}
        self.orders_synced = asyncio.Event()
        self._watches: list[ListWatch] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._rng = random.Random()
        # ai_inference_orders / ai_inference_order_not_ready_seconds, read from this cache at each scrape.
        ORDER_STATUS.watch(lambda: [o for o in self.orders.cache.values() if self.mine(str(d.meta(o).get("uid")))])

    # ------------------------------------------------------------------------- lookups

    @property
    def orders(self) -> Informer:
        return self.informers[inf.ORDER]

    def mine(self, uid: str) -> bool:
        return d.in_shard(uid, self.config.shards, self.config.shard)

    def order_by_uid(self, uid: str | None) -> d.Obj | None:
        key = self.uid_key.get(uid or "")
        return self.orders.get(key) if key else None

    def order_of(self, obj: d.Obj) -> d.Obj | None:
        """The order an owned object belongs to: its controller owner's uid, never its labels (a decoy
        carrying the module's labels is reported and ignored)."""
        order = self.order_by_uid(d.owner_order_uid(obj))
        if order is None and d.claims_an_order(obj):
            log.info("object with the module's labels is not an order's: ignored", object=d.object_key(obj))
        return order

    def listed_orders(self) -> list[d.ListedOrder]:
        return [d.listed_order(o) for o in self.orders.cache.values() if self.mine(str(d.meta(o).get("uid")))]

    def _owned(self, kind: str, order: d.Obj, name: str | None = None) -> d.Obj | None:
        m = d.meta(order)
        obj = self.informers[kind].get(f"{m.get('namespace')}/{name or m.get('name')}")
        if obj is None:
            return None
        return obj if d.owned_by(obj, str(m.get("uid"))) else None

    def _order_pods(self, order: d.Obj, statefulset: d.Obj | None) -> list[d.Obj]:
        """The order's pods: found by its label (the index), believed only when their controller chain
        reaches the order through its own StatefulSet. A tenant's pod carrying an order's label (a
        crash loop, an unschedulable pod) is no trouble of that order's and no replica of it."""
        if statefulset is None:
            return []
        uid = str(d.meta(order).get("uid") or "")
        owners = by_uid(statefulset)
        found = (self.informers[inf.POD].get(k) for k in sorted(self.pods_of.get(d.object_key(order), ())))
        return [p for p in found if p and owned_by(p, uid, owners)]

    # -------------------------------------------------------------------------- events

    def handle(self, delivery: InformerItem) -> None:
        informer = self.informers.get(delivery.kind)
        if informer is None:  # a kind the observer does not inform on (Secrets: read by name)
            return
        was_served = informer.served
        if isinstance(delivery, Listed):
            changes = informer.listed(delivery.items, delivery.served)
        else:
            changes = informer.watched(delivery.type, delivery.obj)
        for change in changes:
            try:
                self.dispatch(delivery.kind, change)
            except Exception as err:  # one bad object must not stop the observer
                log.error(
                    "change not handled",
                    kind=delivery.kind,
                    type=change.type,
                    object=d.object_key(change.obj),
                    error=type(err).__name__,
                    # A Secret's traceback could show its data: name the error only.
                    exc_info=delivery.kind != inf.SECRET,
                )
                continue
            EVENTS_HANDLED.labels(inf.KIND_LABELS.get(delivery.kind, delivery.kind.lower()), change.type).inc()
        if delivery.kind == inf.ORDER and informer.synced and not self.orders_synced.is_set():
            self.orders_synced.set()
        if delivery.kind in inf.CATALOG_KINDS and informer.served != was_served:
            if informer.served:
                log.info("the ai-models module is installed: catalog orders are looked up", kind=delivery.kind)
            else:
                log.warning(
                    "the ai-models module is not installed: its kind is not served; Hugging Face orders are "
                    "served, catalog orders wait with CatalogNotInstalled until it is",
                    kind=delivery.kind,
                )
        if delivery.kind in self.reference_kinds and (
            isinstance(delivery, Listed) or any(c.type in (d.ADDED, d.DELETED) for c in changes)
        ):
            # Something a class may name appeared or went: every class is judged again (few; a status
            # is written only where it changes).
            self.judge_classes()
        if delivery.kind == inf.NODE and isinstance(delivery, Listed):
            # A listing says nothing of a node that is gone (deleted while this observer was away, or
            # listed after the pods): every order with pods on a node looks at them again.
            for key in sorted({k for keys in self.orders_on_node.values() for k in keys}):
                order = self.orders.get(key)
                if order is not None:
                    self.mark_trouble(order)

    def dispatch(self, kind: str, change: Change) -> None:
        if kind == inf.ORDER:
            self.on_order(change)
        elif kind == inf.CLASS:
            self.on_class(change)
        elif kind == inf.POD:
            self.on_pod(change)
        elif kind in inf.OWNED_KINDS:
            self.on_owned(kind, change)
        elif kind in inf.CATALOG_KINDS:
            self.on_model(kind, change)
        elif kind == inf.NODE:
            self.on_node(change)
        elif kind == inf.EVENT:
            self.on_event(change)
        elif kind == inf.PRIORITY_CLASS and change.type != d.SYNC:
            for order in list(self.orders.cache.values()):
                self.mark_scaling(order)

    def on_order(self, change: Change) -> None:
        obj = change.obj
        key = d.object_key(obj)
        uid = str(d.meta(obj).get("uid"))
        self._unindex_order(key, change.old)
        if change.type == d.DELETED:
            self.uid_key.pop(uid, None)
            self.my_orders.discard(uid)
        else:
            self._index_order(key, obj)
            self.uid_key[uid] = key
            if self.mine(uid):
                self.my_orders.add(uid)
        if self.mine(uid):
            memory = self.memory.setdefault(uid, d.OrderMemory())
            intent = d.order_intent(change.type, change.new, memory)
            ref = d.order_ref(obj)
            if intent is not None:
                new_order = intent.signal == OrderSignal.SPEC_CHANGED and d.is_new_order(change.new)
                self.outbox.put(signal_to(ref, intent.signal, intent.args, start=intent.start, new_order=new_order))
                d.remember(memory, intent)
                # Every order is told once after a start: those lines at debug, the changes at info.
                say = log.debug if change.type == d.SYNC else log.info
                say("order signalled", order=key, signal=intent.signal, generation=intent.arg)
            if change.type != d.DELETED and uid not in self.woken and wakes_after_disable(change.new):
                self.woken.add(uid)  # once per observer start (worker/disable.py)
                woken = ObservedChange(what="workload stopped while the module was disabled", kind="InferenceService")
                self.outbox.put(signal_to(ref, OrderSignal.OBSERVED, [woken], start=True))
                log.info("order told to reconcile after a disable", order=key)
            if change.type == d.DELETED or d.order_start_settled(change.new):
                self.outbox.settled(order_workflow_id(ref.namespace, ref.name, ref.uid))
            if change.type == d.DELETED:
                self._forget(uid)
            elif not d.deleting(obj):
                self.mark_scaling(obj)
                if change.type == d.SYNC:
                    self._tell_ready_replica(obj)
                    self.mark_trouble(obj)
        ORDERS_KNOWN.set(len(self.my_orders))

    def _tell_ready_replica(self, order: d.Obj) -> None:
        """After a (re)start: a loading order whose StatefulSet, listed before it, has a ready replica
        is told so (the StatefulSet's own listing found no order to tell)."""
        if not d.awaiting_replicas(order):
            return
        ready = d.replica_got_ready(d.SYNC, None, self._owned(inf.STATEFULSET, order))
        if ready is not None:
            self.outbox.put(signal_to(d.order_ref(order), OrderSignal.REPLICA_READY, [ready]))

    def _index_order(self, key: str, obj: d.Obj) -> None:
        class_name = str((obj.get("spec") or {}).get("inferenceServiceClassName") or "")
        self.by_class.setdefault(class_name, set()).add(key)
        model = d.model_ref_key(obj)
        if model is not None:
            self.by_model.setdefault(model, set()).add(key)

    def _unindex_order(self, key: str, old: d.Obj | None) -> None:
        if old is None:
            return
        class_name = str((old.get("spec") or {}).get("inferenceServiceClassName") or "")
        self.by_class.get(class_name, set()).discard(key)
        model = d.model_ref_key(old)
        if model is not None:
            self.by_model.get(model, set()).discard(key)

    def _forget(self, uid: str) -> None:
        self.memory.pop(uid, None)
        self.pending.pop(uid, None)
        self.scaling_dirty.discard(uid)
        self.scaling_last.pop(uid, None)
        self.troubles.pop(uid, None)
        self.releases.pop(uid, None)
        self.trouble_dirty.discard(uid)
        handle = self._flushes.pop(uid, None)
        if handle is not None:
            handle.cancel()
        recheck = self._rechecks.pop(uid, None)
        if recheck is not None:
            recheck[1].cancel()
        self.progress.pop(uid, None)
        look = self._progress_looks.pop(uid, None)
        if look is not None:
            look.cancel()

    def on_class(self, change: Change) -> None:
        name = str(d.meta(change.obj).get("name"))
        if change.type != d.DELETED and change.new is not None:
            self._write_class_status(change.new)
        else:
            self.class_writes.pop(name, None)
        if change.type == d.MODIFIED:
            became = class_readiness_change(change.old, change.new)
            if became is not None:
                # A status write (the observer's own): the class's orders look again — those waiting with
                # ClassNotReady go on, a serving one shows that its class is not Ready.
                told = 0
                for key in sorted(self.by_class.get(name, set())):
                    order = self.orders.get(key)
                    if order is None or d.deleting(order) or not self.mine(str(d.meta(order).get("uid"))):
                        continue
                    self.observe(order, inf.CLASS, became)
                    told += 1
                log.info("class readiness changed", cls=name, what=became, orders=told)
        generation = d.class_changed_generation(change.type, change.old, change.new)
        if generation is None:
            return
        for key in sorted(self.by_class.get(name, set())):
            order = self.orders.get(key)
            if order is None or d.deleting(order) or not self.mine(str(d.meta(order).get("uid"))):
                continue
            self.outbox.put(signal_to(d.order_ref(order), OrderSignal.CLASS_CHANGED, [generation]))
        log.info("class changed", cls=name, generation=generation, orders=len(self.by_class.get(name, ())))

    def class_references(self) -> ClassReferences | None:
        """What the cluster has of the kinds classes name, from this observer's informers; None until
        each of them has listed (a class is not judged on a half-known cluster). A kind this observer
        does not inform on is not judged."""
        names: dict[str, Names] = {}
        for kind in self.reference_kinds:
            informer = self.informers[kind]
            if not informer.synced:
                return None
            if not informer.served:
                names[kind] = NOT_SERVED
            else:
                names[kind] = frozenset(str(d.meta(o).get("name")) for o in informer.cache.values())
        return ClassReferences(
            deviceClasses=names.get(inf.DEVICE_CLASS),
            priorityClasses=names.get(inf.PRIORITY_CLASS),
            storageClasses=names.get(inf.STORAGE_CLASS),
            clusterIssuers=names.get(inf.CLUSTER_ISSUER),
        )

    def judge_classes(self) -> None:
        """Every class's status judged again (written where it changes)."""
        for obj in list(self.informers[inf.CLASS].cache.values()):
            self._write_class_status(obj)

    def _write_class_status(self, obj: d.Obj) -> None:
        try:
            cls = InferenceServiceClass.model_validate(obj)
        except ValidationError:
            log.warning("class not readable", cls=d.meta(obj).get("name"))
            return
        refs = self.class_references() if self.reference_kinds else None
        if self.reference_kinds and refs is None:
            return  # judged once the reference informers have listed (handle → judge_classes)
        patch = class_status_patch(cls, datetime.now(UTC), refs)
        if patch is None:
            return
        name = cls.metadata.name
        conditions = patch["conditions"]
        assert isinstance(conditions, list)
        # What the write says, without the times (two writes computed from one version differ in those).
        said = json.dumps(
            [patch["phase"], [(c["type"], c["status"], c["reason"], c.get("message")) for c in conditions]]
        )
        written = (str(cls.metadata.resourceVersion or ""), said)
        if self.class_writes.get(name) == written:
            return  # the same write from the same version is in flight (its watch event not back yet)
        self.class_writes[name] = written
        log.info("class status", cls=name, phase=patch["phase"])
        self._spawn(asyncio.to_thread(self._patch_class_status, name, patch), "class-status")

    def _patch_class_status(self, name: str, status: dict[str, object]) -> None:
        try:
            self.custom.patch_cluster_custom_object_status(GROUP, VERSION, CLASSES, name, {"status": status})
        except ApiException as err:
            self.class_writes.pop(name, None)
            log.warning("class status not written", cls=name, status=err.status)
        except Exception as err:  # the API server unreachable: the next event of the class writes it
            self.class_writes.pop(name, None)
            log.warning("class status not written", cls=name, error=type(err).__name__)

    def on_owned(self, kind: str, change: Change) -> None:
        order = self.order_of(change.obj)
        if order is None or d.deleting(order) or not self.mine(str(d.meta(order).get("uid"))):
            return
        awaiting = d.awaiting_replicas(order)
        if awaiting and kind == inf.STATEFULSET:
            ready = d.replica_got_ready(change.type, change.old, change.new)
            if ready is not None:
                # Not debounced: the order's first load ends with this.
                self.outbox.put(signal_to(d.order_ref(order), OrderSignal.REPLICA_READY, [ready]))
                log.info("replica ready", order=d.object_key(order), ready=ready)
        what = d.owned_change(kind, change.type, change.old, change.new, self.ignored_annotations, not awaiting)
        if what is not None:
            self.observe(order, kind, what)
        if kind == inf.HPA:
            self.mark_scaling(order, force=True)
        if kind == inf.STATEFULSET:
            # Its pods count as the order's replicas only through it (scaling_observation).
            self.mark_scaling(order)
            self.mark_trouble(order)
        if kind == inf.CLAIM_TEMPLATE:
            # A replaced template can leave a waiting pod with a claim of the old one (trouble_of).
            self.mark_trouble(order)

    def on_pod(self, change: Change) -> None:
        obj = change.obj
        name = d.order_name_label(obj)
        namespace = d.meta(obj).get("namespace")
        if not name or not namespace:
            return
        order_key = f"{namespace}/{name}"
        pods = self.pods_of.setdefault(order_key, set())
        if change.type == d.DELETED:
            pods.discard(d.object_key(obj))
            if not pods:
                self.pods_of.pop(order_key, None)
        else:
            pods.add(d.object_key(obj))
        self._index_pod_node(order_key, change)
        order = self.orders.get(order_key)
        if order is None or d.deleting(order) or not self.mine(str(d.meta(order).get("uid"))):
            return
        what = None if d.awaiting_replicas(order) else d.pod_change(change.type, change.old, change.new)
        if what is not None:
            self.observe(order, inf.POD, what)
        self.mark_scaling(order)
        self.mark_trouble(order)

    def _index_pod_node(self, order_key: str, change: Change) -> None:
        """Which orders have a pod on (or pinned to) which node: a node's change looks at those only."""
        pod_key = d.object_key(change.obj)
        before = self.pod_node.pop(pod_key, None)
        if before is not None:
            keys = self.orders_on_node.get(before, set())
            keys.discard(order_key)
            if not keys:
                self.orders_on_node.pop(before, None)
        if change.type == d.DELETED or change.new is None:
            return
        node = ((change.new.get("spec") or {}).get("nodeName")) or d.pinned_node(change.new)
        if node:
            self.pod_node[pod_key] = str(node)
            self.orders_on_node.setdefault(str(node), set()).add(order_key)

    def on_node(self, change: Change) -> None:
        """A node deleted, or its readiness changed: the orders with pods on it look at them again."""
        if change.type == d.SYNC:
            return
        if change.type == d.MODIFIED and d.node_ready(change.old) == d.node_ready(change.new):
            return
        name = str(d.meta(change.obj).get("name"))
        for key in sorted(self.orders_on_node.get(name, set())):
            order = self.orders.get(key)
            if order is not None:
                self.mark_trouble(order)

    def on_event(self, change: Change) -> None:
        """A StatefulSet's FailedCreate Event (the only informer's selector): its order looks again."""
        involved = change.obj.get("involvedObject") or {}
        namespace, name = involved.get("namespace"), involved.get("name")
        if not namespace or not name:
            return
        sts_key = f"{namespace}/{name}"
        event_key = d.object_key(change.obj)
        events = self.events_of.setdefault(sts_key, set())
        if change.type == d.DELETED:
            events.discard(event_key)
            if not events:
                self.events_of.pop(sts_key, None)
        else:
            events.add(event_key)
        statefulset = self.informers[inf.STATEFULSET].get(sts_key)
        order = self.order_of(statefulset) if statefulset is not None else None
        if order is not None:
            self.mark_trouble(order)

    def mark_trouble(self, order: d.Obj) -> None:
        """Look at the order's replica troubles after the debounce window."""
        uid = str(d.meta(order).get("uid"))
        if d.deleting(order) or not self.mine(uid):
            return
        self.trouble_dirty.add(uid)
        self._schedule_flush(uid)

    def trouble_of(self, order: d.Obj) -> d.ReplicaTrouble | None:
        """The order's replica trouble now; when a node of its pods is within its NotReady grace, a look
        again is scheduled for the grace's end (level-triggered: a node that stays NotReady sends no
        event, and the order must then hear NodeLost). Its own pods bound to a lost node are
        force-deleted (``observer.forceDeletePodsOnLostNodes``), and a NodeLost message says so."""
        key = d.object_key(order)
        uid = str(d.meta(order).get("uid"))
        statefulset = self._owned(inf.STATEFULSET, order)
        pods = self._order_pods(order, statefulset)
        sts_key = d.object_key(statefulset) if statefulset is not None else key
        events = [e for e in (self.informers[inf.EVENT].get(k) for k in self.events_of.get(sts_key, ())) if e]
        informer = self.informers[inf.NODE]
        nodes = informer.cache if informer.synced else None
        grace = d.NodeGrace(now=datetime.now(UTC), seconds=self.config.nodeNotReadyGraceSeconds)
        ends = d.grace_ends(pods, nodes, grace)
        if ends is not None:
            self._recheck_at(uid, ends, grace.now)
        if self.config.forceDeletePodsOnLostNodes:
            for lost in d.pods_on_lost_nodes(order, statefulset, pods, nodes, grace):
                self._release(uid, lost)
        templates = {
            name: template
            for name in sorted(
                {
                    str(claim.get("resourceClaimTemplateName") or "")
                    for pod in pods
                    for claim in (pod.get("spec") or {}).get("resourceClaims") or []
                }
                - {""}
            )
            if (template := self._owned(inf.CLAIM_TEMPLATE, order, name)) is not None
        }
        for stale in d.pods_with_stale_claims(order, statefulset, templates, pods):
            self._release(uid, stale)
        progress = self._download_progress(uid, d.fetching_pods(pods))
        found = d.order_trouble(pods, statefulset, events, nodes, grace, progress)
        memory = self.releases.get(uid)
        if memory is None:
            return found
        if found is None:
            memory.notes.clear()
        return d.with_release_notes(found, memory.notes)

    def _download_progress(self, order_uid: str, fetching: list[d.Obj]) -> dict[str, d.FetchProgress]:
        """What the fetchers of the order's downloading pods said last, by pod key. Their logs are read
        again (``pods/log``, the last lines) every ``observer.downloadProgressSeconds`` while they run;
        the order is told when a download passes a step (decisions.PROGRESS_STEP_PERCENT)."""
        interval = self.config.downloadProgressSeconds
        if interval <= 0:
            return {}  # not read: the order says it downloads, without numbers
        seen = self.progress.setdefault(order_uid, {})
        now = time.monotonic()
        known: dict[str, d.FetchProgress] = {}
        live: set[str] = set()
        for pod in fetching:
            pod_uid = str(d.meta(pod).get("uid"))
            live.add(pod_uid)
            last = seen.get(pod_uid)
            if last is not None and last[0] is not None:
                known[d.object_key(pod)] = last[0]
            if pod_uid not in self._progress_reads and (last is None or now - last[1] >= interval):
                self._progress_reads.add(pod_uid)
                seen[pod_uid] = (last[0] if last is not None else None, now)  # a read under way keeps it
                namespace, name = str(d.meta(pod).get("namespace")), str(d.meta(pod).get("name"))
                self._spawn(self._read_progress(order_uid, pod_uid, namespace, name), f"progress-{namespace}/{name}")
        for gone in set(seen) - live:
            del seen[gone]
        if not seen:
            self.progress.pop(order_uid, None)
        elif order_uid not in self._progress_looks:
            loop = asyncio.get_running_loop()
            self._progress_looks[order_uid] = loop.call_later(interval, self._progress_look, order_uid)
        return known

    def _progress_look(self, order_uid: str) -> None:
        self._progress_looks.pop(order_uid, None)
        order = self.order_by_uid(order_uid)
        if order is not None and order_uid in self.progress:
            self.mark_trouble(order)

    async def _read_progress(self, order_uid: str, pod_uid: str, namespace: str, name: str) -> None:
        found: d.FetchProgress | None = None
        try:
            found = d.fetch_progress(await asyncio.to_thread(self._fetcher_log, namespace, name))
        except ApiException as err:
            # No pods/log (RBAC), a kubelet out of reach: the order says it downloads, without numbers.
            log.debug("model-fetcher log not read", pod=f"{namespace}/{name}", status=err.status)
        except Exception as err:
            log.debug("model-fetcher log not read", pod=f"{namespace}/{name}", error=type(err).__name__)
        finally:
            self._progress_reads.discard(pod_uid)
        seen = self.progress.get(order_uid)
        if seen is None:
            return  # the order (or its downloads) went meanwhile
        before = seen.get(pod_uid, (None, 0.0))[0]
        seen[pod_uid] = (found or before, time.monotonic())
        if found is not None and (before is None or before.step() != found.step()):
            order = self.order_by_uid(order_uid)
            if order is not None:
                self.mark_trouble(order)

    def _fetcher_log(self, namespace: str, name: str) -> str:
        """The last lines of the pod's model-fetcher log (its progress lines come every few seconds)."""
        text = CoreV1Api(self.api).read_namespaced_pod_log(
            name, namespace, container=FETCHER_CONTAINER, tail_lines=20, _request_timeout=10
        )
        return str(text or "")

    def _release(self, order_uid: str, lost: d.LostPod) -> None:
        """Force-delete one of the order's pods from a lost node, once at a time, in a thread; bounded:
        a refusal (403, any 4xx) is not asked again, an outage at most ``RELEASE_ATTEMPTS`` times."""
        memory = self.releases.setdefault(order_uid, d.ReleaseMemory())
        if not memory.may_try(lost.uid):
            return
        fence = self.outbox.fence
        if fence is not None and not fence():
            return  # a standby does not act: the leader does
        memory.in_flight.add(lost.uid)
        self._spawn(self._force_delete(order_uid, lost, memory), f"release-{lost.key}")

    async def _force_delete(self, order_uid: str, lost: d.LostPod, memory: d.ReleaseMemory) -> None:
        status: int | None = None
        try:
            await asyncio.to_thread(self._delete_pod, lost)
            status = 200
        except ApiException as err:
            status = int(err.status or 0) or None
        except Exception as err:  # the API server unreachable: asked again later, a bounded number of times
            log.warning("pod on a lost node not force-deleted", pod=lost.key, node=lost.node, error=type(err).__name__)
        finally:
            memory.in_flight.discard(lost.uid)
        outcome = memory.outcome(lost, status)
        order = self.order_by_uid(order_uid)
        if outcome == d.ReleaseOutcome.DELETED and not lost.node:
            log.info("waiting pod with a stale device claim deleted", pod=lost.key, why=lost.why)
        elif outcome == d.ReleaseOutcome.DELETED:
            log.info("pod force-deleted from a lost node", pod=lost.key, node=lost.node, why=lost.why)
        elif outcome == d.ReleaseOutcome.REFUSED:
            log.error(
                "pod on a lost node not force-deleted: refused; grant the watcher delete on pods or set "
                "observer.forceDeletePodsOnLostNodes to false",
                pod=lost.key,
                node=lost.node,
                status=status,
            )
        elif outcome == d.ReleaseOutcome.RETRY and order is not None:
            now = datetime.now(UTC)
            self._recheck_at(order_uid, now + timedelta(seconds=d.release_retry_delay(memory, lost.uid)), now)
        elif outcome == d.ReleaseOutcome.GIVEN_UP:
            log.error("pod on a lost node not force-deleted: gave up", pod=lost.key, node=lost.node, status=status)
        if outcome == d.ReleaseOutcome.DELETED and order is not None:
            self.mark_trouble(order)  # the order's message says what was done (while it is NodeLost)
            if lost.node:  # PodForceDeleted is about lost nodes; a waiting pod ran nothing
                await asyncio.to_thread(self._record_release, order, lost)

    def _record_release(self, order: d.Obj, lost: d.LostPod) -> None:
        """A Warning Event on the order (``PodForceDeleted``): the lasting word on what was done, after
        the condition has moved on. Best effort: a refused Event is logged, the delete is done."""
        ref = d.order_ref(order)
        told = OrderEvent(
            ref=ref, reason=EventReason.POD_FORCE_DELETED.value, message=d.cut(lost.note(), 1000), type="Warning"
        )
        event = order_event_body(told, component="ai-inference-watcher")
        try:
            CoreV1Api(self.api).create_namespaced_event(ref.namespace, event, _request_timeout=30)
        except ApiException as err:
            log.warning("event not recorded", order=ref.key, reason=event.reason, status=err.status)
        except Exception as err:
            log.warning("event not recorded", order=ref.key, reason=event.reason, error=type(err).__name__)

    def _delete_pod(self, lost: d.LostPod) -> None:
        """``DELETE`` of the pod with ``gracePeriodSeconds: 0`` (no kubelet will confirm it) and
        ``preconditions.uid`` (a pod the StatefulSet made again under the same name is never touched)."""
        options = V1DeleteOptions(grace_period_seconds=0, preconditions=V1Preconditions(uid=lost.uid))
        CoreV1Api(self.api).delete_namespaced_pod(
            lost.name, lost.namespace, body=options, grace_period_seconds=0, _request_timeout=30
        )

    def _recheck_at(self, uid: str, at: datetime, now: datetime) -> None:
        """Look at the order's replica troubles again at ``at`` (just after), unless a look is due sooner."""
        scheduled = self._rechecks.get(uid)
        if scheduled is not None:
            if scheduled[0] <= at:
                return
            scheduled[1].cancel()
        delay = max(0.0, (at - now).total_seconds()) + 0.5
        handle = asyncio.get_running_loop().call_later(delay, self._recheck, uid)
        self._rechecks[uid] = (at, handle)

    def _recheck(self, uid: str) -> None:
        self._rechecks.pop(uid, None)
        order = self.order_by_uid(uid)
        if order is not None:
            log.info("node grace over: replicas looked at again", order=d.object_key(order))
            self.mark_trouble(order)

    def on_model(self, kind: str, change: Change) -> None:
        what = d.model_change(kind, change.type, change.old, change.new)
        if what is None:
            return
        for key in sorted(self.by_model.get(d.catalog_key(kind, change.obj), set())):
            order = self.orders.get(key)
            if order is not None and not d.deleting(order) and self.mine(str(d.meta(order).get("uid"))):
                self.observe(order, kind, what)

    # ---------------------------------------------------------------- debounced signals

    def observe(self, order: d.Obj, kind: str, what: str) -> None:
        uid = str(d.meta(order).get("uid"))
        self.pending.setdefault(uid, d.Coalesced()).add(kind, what)
        self._schedule_flush(uid)

    def mark_scaling(self, order: d.Obj, force: bool = False) -> None:
        """Recompute the order's scaling observation after the debounce window (when it has an HPA,
        or had one)."""
        uid = str(d.meta(order).get("uid"))
        if not force and uid not in self.scaling_last and self._owned(inf.HPA, order) is None:
            return
        self.scaling_dirty.add(uid)
        self._schedule_flush(uid)

    def _schedule_flush(self, uid: str) -> None:
        if uid in self._flushes:
            return
        loop = asyncio.get_running_loop()
        self._flushes[uid] = loop.call_later(self.config.debounceSeconds, self.flush, uid)

    def flush(self, uid: str) -> None:
        self._flushes.pop(uid, None)
        order = self.order_by_uid(uid)
        coalesced = self.pending.pop(uid, None)
        dirty = uid in self.scaling_dirty
        self.scaling_dirty.discard(uid)
        troubled = uid in self.trouble_dirty
        self.trouble_dirty.discard(uid)
        if order is None or d.deleting(order):
            return
        ref = d.order_ref(order)
        if coalesced is not None and coalesced.changes:
            kind, what = coalesced.summary()
            self.outbox.put(signal_to(ref, OrderSignal.OBSERVED, [ObservedChange(what=what, kind=kind)]))
            log.info("order observed", order=ref.key, kind=kind, what=what)
        if troubled:
            memory = self.troubles.setdefault(uid, d.TroubleMemory())
            told = d.trouble_signal(self.trouble_of(order), memory, d.shows_trouble(order))
            if told is not None:
                self.outbox.put(signal_to(ref, REPLICA_TROUBLE, [told]))
                log.info("replica trouble", order=ref.key, reason=told.reason or "cleared", subject=told.subject)
        if dirty:
            observation = self.scaling_of(order)
            if observation is None:
                return
            if not d.scaling_news_now(order, observation):
                # Held while the order loads: the status write that ends the load marks it again.
                self.scaling_dirty.add(uid)
                return
            signature = observation.signature()
            if self.scaling_last.get(uid) == signature:
                return
            if observation.autoscalerFound:
                self.scaling_last[uid] = signature
            else:
                self.scaling_last.pop(uid, None)  # told once that it went away
            self.outbox.put(signal_to(ref, OrderSignal.SCALING_CHANGED, [observation]))

    def scaling_of(self, order: d.Obj) -> ScalingObservation | None:
        uid = str(d.meta(order).get("uid"))
        hpa = self._owned(inf.HPA, order)
        if hpa is None and uid not in self.scaling_last:
            return None
        statefulset = self._owned(inf.STATEFULSET, order)
        pods = self._order_pods(order, statefulset)
        constraints = ((order.get("status") or {}).get("constraints")) or {}
        priority = priority_value(
            constraints.get("priorityClassName"), self.informers[inf.PRIORITY_CLASS].cache.values()
        )
        return scaling_observation(hpa, pods, priority, order_uid=uid, statefulset=statefulset)

    # ---------------------------------------------------------------------------- health

    def probe_candidates(self) -> Iterator[tuple[OrderRef, d.Serving]]:
        for uid in list(self.my_orders):
            order = self.order_by_uid(uid)
            state = d.serving(order)
            if order is not None and state != d.Serving.NO:
                yield d.order_ref(order), state

    def serving_of(self, uid: str) -> d.Serving:
        return d.serving(self.order_by_uid(uid))

    def secret_max_age(self) -> float:
        """How old a Secret read may be: ``secret_check_seconds``, stretched so that reading every
        Secret this observer keeps stays within ``observer.secretReadsPerSecond``."""
        return d.secret_period(self.secret_check_seconds, len(self.secrets), self.config.secretReadsPerSecond)

    async def probe_spec(self, ref: OrderRef, fresh: bool = False) -> ProbeSpec:
        """What a probe of the order sends where. ``fresh``: the last probe's token was refused (401 or
        403), so a token older than ``secret_check_seconds`` is read again (a rotation reaches the
        probes then, however far the read budget stretched the period)."""
        order = self.order_by_uid(ref.uid) or {}
        service = self._owned(inf.SERVICE, order) if order else None
        target = probe_target(ref.name, ref.namespace, service, self.settings.health.probeTargetAnnotation)
        # The status says whether the order has a token; which Secret holds it is never read from the
        # status (a hint a forged run may have written): it is the order's own, named after the order.
        required = bool((order.get("status") or {}).get("authSecretName"))
        token = None
        if required and order:
            max_age = self.secret_check_seconds if fresh else self.secret_max_age()
            token = (await self.check_secret(order, ObjectNames(ref.name).auth_secret, max_age)).token
        served = d.served_name(self._owned(inf.STATEFULSET, order)) if order else None
        return ProbeSpec(target=target, served_name=served, token=token, token_required=required)

    def owned_secret_names(self, order: d.Obj) -> list[str]:
        """The Secrets the order owns, by the names its own name gives (never a name its status or a
        workflow says): ``{order}-auth`` when its status says it has a token, ``{order}-tls`` when its
        class copies a custom certificate."""
        names = ObjectNames(str(d.meta(order).get("name")))
        out = []
        if (order.get("status") or {}).get("authSecretName"):
            out.append(names.auth_secret)
        class_name = str((order.get("spec") or {}).get("inferenceServiceClassName") or "")
        cls = self.informers[inf.CLASS].get(class_name) or {}
        https = (((cls.get("spec") or {}).get("exposurePolicy") or {}).get("https")) or {}
        if https.get("mode") == HttpsMode.CUSTOM_CERTIFICATE:
            out.append(names.tls_secret)
        return out

    async def check_secret(self, order: d.Obj, name: str, max_age: float) -> SeenSecret:
        """Read one Secret the order owns by name, unless it was read less than ``max_age`` ago, and
        tell the order's workflow what an informer would have: the Secret deleted (also the first
        time it is found missing, so a deletion while no observer ran converges), or changed by
        someone else (``decisions.owned_change`` on its metadata: the writer of the data). A Secret of
        that name the order does not own is told nothing about (as no informer believed it; the
        worker's apply refuses it), its token read as the worker's first probe reads it. Nothing of a
        Secret's data but an auth Secret's token is kept, and that only for the probes."""
        meta = d.meta(order)
        namespace, uid = str(meta.get("namespace")), str(meta.get("uid"))
        key = f"{namespace}/{name}"
        seen = self.secrets.get(key)
        now = time.monotonic()
        if seen is not None and now - seen.read_at < max_age:
            return seen
        found = await asyncio.to_thread(self.read_secret, namespace, name)
        present = found is not None
        new = slim_metadata(found, inf.SECRET) if found is not None and d.owned_by(found, uid) else None
        is_auth = name == ObjectNames(str(meta.get("name"))).auth_secret
        token = token_from_secret(found) if is_auth else None
        del found
        self.secrets[key] = SeenSecret(now, present, new, token)
        if d.deleting(order) or not self.mine(uid):
            return self.secrets[key]
        what: str | None = None
        if not present and (seen is None or seen.present):
            what = f"Secret {key} deleted"
        elif new is not None and seen is not None and seen.metadata is not None:
            what = d.owned_change(inf.SECRET, d.MODIFIED, seen.metadata, new, self.ignored_annotations)
        if what is not None:
            log.info("owned Secret changed", order=d.object_key(order), what=what)
            self.observe(order, inf.SECRET, what)
        return self.secrets[key]

    async def secret_loop(self) -> None:
        """Every ``secret_max_age()`` (30 s, longer past the read budget): each of this observer's
        orders' Secrets read by name (one ``get`` each, one at a time, at most
        ``observer.secretReadsPerSecond``; those a probe read within half the period skipped), and what
        is remembered of orders gone forgotten."""
        await self.orders_synced.wait()
        while True:
            began = time.monotonic()
            period = self.secret_max_age()
            wanted: set[str] = set()
            for uid in list(self.my_orders):
                order = self.order_by_uid(uid)
                if order is None or d.deleting(order):
                    continue
                namespace = str(d.meta(order).get("namespace"))
                for name in self.owned_secret_names(order):
                    key = f"{namespace}/{name}"
                    wanted.add(key)
                    seen = self.secrets.get(key)
                    if seen is not None and time.monotonic() - seen.read_at < period / 2:
                        continue
                    await self._secret_read_turn()
                    try:
                        await self.check_secret(order, name, period / 2)
                    except Exception as err:  # the API server away: next round (the error's type only)
                        log.warning("reading an order's Secret failed", secret=key, error=type(err).__name__)
            for key in set(self.secrets) - wanted:
                self.secrets.pop(key, None)
            # The next round a period after this one began (a round paced by the budget took most of it).
            spent = time.monotonic() - began
            await asyncio.sleep(max(0.0, self.secret_max_age() * self._rng.uniform(0.9, 1.1) - spent))

    async def _secret_read_turn(self) -> None:
        """Wait for the secret loop's next read within ``observer.secretReadsPerSecond``."""
        rate = self.config.secretReadsPerSecond
        if rate <= 0:
            return
        now = time.monotonic()
        if self._next_secret_read > now:
            await asyncio.sleep(self._next_secret_read - now)
        self._next_secret_read = max(now, self._next_secret_read) + 1 / rate

    def report_health(self, ref: OrderRef, report: HealthReport) -> None:
        self.outbox.put(signal_to(ref, OrderSignal.HEALTH_CHANGED, [report]))

    # ----------------------------------------------------------------------------- run

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def resync_loop(self) -> None:
        await self.orders_synced.wait()
        period = self.config.resyncSeconds
        while True:
            try:
                await self.resync.run_once(self.listed_orders)
                self.prober.forget_reports()
                delay = period * self._rng.uniform(0.9, 1.1)
            except Exception as err:  # Temporal down: try again sooner, the outbox keeps the rest
                log.warning("resync failed", **_error_fields(err))
                delay = min(period, 30.0)
            try:
                await self.repair.run_once()
            except Exception as err:  # a visibility store without the attribute, Temporal away: next time
                log.warning("stuck-workflow repair failed", **_error_fields(err))
            await asyncio.sleep(delay)

    def repack_once(self, snapshot: InventorySnapshot | None = None) -> list[str]:
        """One repack pass (observer.repack): this shard's stranded orders asked to move onto a smaller
        place; then, on the inventory ``snapshot`` (the replica placer's: shard 0's), the shares whose
        moves free whole devices asked to move onto their targets. The keys asked, at most
        ``maxMovesPerPass``."""
        config = self.config.repack
        classes = repack.parsed_classes(self.informers[inf.CLASS].cache.values())
        mine = (o for o in self.orders.cache.values() if self.mine(str(d.meta(o).get("uid"))))
        asked = []
        for order in repack.repack_candidates(mine, classes, config.maxMovesPerPass):
            self.outbox.put(signal_to(d.order_ref(order), OrderSignal.MOVE, []))
            asked.append(d.object_key(order))
        if asked:
            REPACK_ASKED.inc(len(asked))
            log.info("repack: orders asked to move", orders=asked)
        room = config.maxMovesPerPass - len(asked)
        if snapshot is None:
            return asked
        self._count_freed(snapshot)
        if room <= 0:
            return asked
        # The placer's inventory holds every shard's claims: shard 0 (the placer's) asks every order.
        now = time.monotonic()
        # An order asked in the last passes is left out: its move is under way, or its plan missed the
        # target (no room on the target's node, say), and asking it again at once would ask the same.
        pause = REPACK_PASSES_BEFORE_ASKING_AGAIN * config.intervalSeconds
        self.repack_asked = {key: when for key, when in self.repack_asked.items() if now - when < pause}
        orders = {key: o for o in self.orders.cache.values() if (key := d.object_key(o)) not in self.repack_asked}
        moves, freed = repack.consolidating_moves(snapshot, orders.values(), classes, room)
        for move in moves:
            self.outbox.put(signal_to(d.order_ref(orders[move.holder]), OrderSignal.MOVE, [move.target]))
            self.repack_asked[move.holder] = now
            asked.append(move.holder)
        if moves:
            REPACK_CONSOLIDATING.inc(len(moves))
            REPACK_DEVICES_TO_FREE.inc(len(freed))
            lapses = time.monotonic() + REPACK_FREEING_SECONDS
            self.repack_freeing.update(dict.fromkeys(freed, lapses))
            log.info(
                "repack: shares asked to move so that whole devices come free",
                moves=[f"{m.holder}: {m.source} -> {m.target}" for m in moves],
                freed=list(freed),
            )
        return asked

    def _count_freed(self, snapshot: InventorySnapshot) -> None:
        """The devices asked to be freed that the inventory now shows empty are counted, once; an ask
        older than REPACK_FREEING_SECONDS is dropped (its moves were not made, or others took the device)."""
        if not self.repack_freeing:
            return
        now = time.monotonic()
        empty = {device.key for device in snapshot.devices if not device.allocations}
        for key, lapses in list(self.repack_freeing.items()):
            if key in empty:
                REPACK_DEVICES_FREED.inc()
                del self.repack_freeing[key]
            elif now > lapses:
                del self.repack_freeing[key]

    async def repack_loop(self) -> None:
        await self.orders_synced.wait()
        while True:
            await asyncio.sleep(self.config.repack.intervalSeconds * self._rng.uniform(0.9, 1.1))
            try:
                snapshot = None
                placer = self.placer
                if placer is not None and placer.informers.synced:
                    snapshot = await asyncio.to_thread(placer.informers.snapshot)
                self.repack_once(snapshot)
            except Exception as err:  # a pass that failed is done again by the next
                log.warning("repack pass failed", **_error_fields(err))

    @property
    def watches(self) -> list[ListWatch]:
        """The list+watch loops (their freshness: ``last_contact``, ``failing_since``), for /readyz."""
        return list(self._watches)

    def start_informers(self) -> asyncio.Queue[InformerItem]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[InformerItem] = asyncio.Queue()

        def deliver(item: InformerItem) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        self._watches = [ListWatch(r, deliver, self.watch_timeout_seconds) for r in self.resources]
        for watch in self._watches:
            watch.start()
        return queue

    async def start_placer(self) -> ReplicaPlacer:
        """The replica placer on informers of its own (the planner's kinds: devices, claims, nodes, pods)."""
        informers = await asyncio.to_thread(lambda: InventoryInformers.for_cluster(self.api).start())
        # Its watches are its own (not the observer's readiness: a placer not synced yet only places later).
        self.placer = ReplicaPlacer(self.api, informers, fence=self.fence)
        return self.placer

    async def run(self) -> None:
        queue = self.start_informers()
        if self.place_replicas:
            placer = await self.start_placer()
            self._spawn(placer.run(), "replica-placer")
        self._spawn(self.outbox.run(), "outbox")
        self._spawn(self.prober.run(), "prober")
        self._spawn(self.resync_loop(), "resync")
        self._spawn(self.secret_loop(), "secrets")
        if self.config.repack.enabled:
            self._spawn(self.repack_loop(), "repack")
        log.info(
            "observer started",
            task_queue=self.settings.temporal.taskQueue,
            shard=f"{self.config.shard}/{self.config.shards}",
            kinds=[r.kind for r in self.resources],
            release=self.fingerprint,
        )
        try:
            while True:
                self.handle(await queue.get())
                # Let the outbox and the probes run between the items of a long burst.
                if queue.empty():
                    continue
                await asyncio.sleep(0)
        finally:
            await self.stop()

    async def stop(self) -> None:
        for watch in self._watches:
            watch.stop()
        if self.placer is not None:
            self.placer.informers.stop()
        for handle in self._flushes.values():
            handle.cancel()
        self._flushes.clear()
        for _, recheck in self._rechecks.values():
            recheck.cancel()
        self._rechecks.clear()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*tasks, return_exceptions=True)


async def run_observer(client: Client, api: ApiClient, settings: ModuleSettings) -> None:
    await Observer(api, client, settings).run()


def _error_fields(err: Exception) -> dict[str, str | None]:
    """What a log line says of a failed Temporal call: the error's type and its gRPC status, never its text."""
    return {"error": type(err).__name__, "status": getattr(getattr(err, "status", None), "name", None)}
