"""The planner service's inventory, kept by informers instead of read on every plan.

``ai-inference planner`` hands :class:`InventoryInformers` to ``planner.service.create_app``: one
list+watch loop (:class:`worker.observer.informer.ListWatch`: paged list, watch from its
resourceVersion with bookmarks, relist on 410 Gone, backoff on errors) per kind the snapshot is built
from — DeviceClasses, ResourceSlices, ResourceClaims, PhysicalGPUs (when the gpu module's CRD is
there), the Nodes and every Pod (what the pods bound to a node request of its CPU and memory, and a
claim's holder when the claim does not name it: the pods carrying the order label; both kept slim,
``slim_node``/``slim_pod``, and a pod's status or a node's heartbeat rebuilds nothing). Each
delivery updates a cache (:class:`worker.observer.informer.Informer`) and bumps a version; a plan reads
the snapshot, rebuilt by ``activities.inventory.build_snapshot`` (nodes by ``build_nodes``, as the
worker's in-process path judges them) only when something changed since the last plan, and then
deriving again only the objects whose resourceVersion changed (``activities.inventory.Memo``: what
each object derives is kept by its version between builds). So a plan
costs the API server nothing, and what changed (a slice, a claim allocated, a taint, a pod bound) is
seen by the next plan as soon as its watch event arrived.

:meth:`InventoryInformers.view` gives the snapshot with the order claims seen in the same state
(:func:`order_claims`: each order replica's claim, allocated or not, with its device class, count and
memory request), from which the service's bookings learn when a plan's claims are allocated
(``planner.bookings``).

Ready (the service's ``/readyz``) once every kind has been listed once; before that a plan answers
503 (the caller retries), never a plan made on half an inventory.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, cast

import structlog
from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from activities.builders.claim import (
    ANNOTATION_PLANNED_PLACEMENTS,
    MEMORY_CAPACITY,
    request_alternatives,
    waits_for_placement,
)
from activities.builders.common import LABEL_ORDER
from activities.inventory import (
    RESOURCE_GROUP,
    RESOURCE_VERSION,
    Memo,
    Obj,
    build_nodes,
    build_snapshot,
    claim_order,
    memoized,
    order_pod_names,
    template_order,
)
from inference_api.gpu_types import GPU_GROUP, GPU_PLURAL, GPU_VERSION
from planner.bookings import OrderClaim
from planner.inventory import GPU_DRIVER, InventorySnapshot
from planner.quantity import Quantity, QuantityError
from worker.observer.decisions import MODIFIED
from worker.observer.informer import Informer, InformerItem, Listed, ListWatch, Resource, Watched

log = structlog.get_logger(__name__)

DEVICE_CLASS = "DeviceClass"
RESOURCE_SLICE = "ResourceSlice"
RESOURCE_CLAIM = "ResourceClaim"
PHYSICAL_GPU = "PhysicalGPU"
ORDER_POD = "Pod"
NODE = "Node"
CLAIM_TEMPLATE = "ResourceClaimTemplate"
# The orders' StatefulSets: a pod's order label is believed only through its controller, one of them.
STATEFULSET = "StatefulSet"


class InventoryNotSyncedError(RuntimeError):
    """A plan asked before every kind was listed once (the service answers 503)."""

    status = 503
    reason = "inventory not synced yet"


def _custom(custom: CustomObjectsApi, group: str, version: str, plural: str) -> Callable[..., Any]:
    def list_fn(**kwargs: Any) -> Any:
        return custom.list_cluster_custom_object(group, version, plural, **kwargs)

    return list_fn


def inventory_resources(api: ApiClient, physical_gpus: bool = True, judge_nodes: bool = True) -> list[Resource]:
    """The kinds the snapshot is built from. ``judge_nodes``: the Nodes too, and every pod (what the
    pods bound to a node request of it), not only the order's."""
    custom = CustomObjectsApi(api)
    core = CoreV1Api(api)
    out = [
        Resource(DEVICE_CLASS, _custom(custom, RESOURCE_GROUP, RESOURCE_VERSION, "deviceclasses")),
        Resource(RESOURCE_SLICE, _custom(custom, RESOURCE_GROUP, RESOURCE_VERSION, "resourceslices")),
        Resource(RESOURCE_CLAIM, _custom(custom, RESOURCE_GROUP, RESOURCE_VERSION, "resourceclaims")),
        # A pinned order's template reserves its planned placements (activities.inventory.planned_reservations).
        Resource(
            CLAIM_TEMPLATE, _custom(custom, RESOURCE_GROUP, RESOURCE_VERSION, "resourceclaimtemplates"), LABEL_ORDER
        ),
        Resource(ORDER_POD, core.list_pod_for_all_namespaces, None if judge_nodes else LABEL_ORDER),
        Resource(STATEFULSET, AppsV1Api(api).list_stateful_set_for_all_namespaces, LABEL_ORDER),
    ]
    if judge_nodes:
        out.append(Resource(NODE, core.list_node))
    if physical_gpus:
        out.append(Resource(PHYSICAL_GPU, _custom(custom, GPU_GROUP, GPU_VERSION, GPU_PLURAL)))
    return out


def physical_gpus_served(api: ApiClient, timeout: float = 10) -> bool:
    """Whether the gpu module's PhysicalGPU kind is served (no CRD: the slices alone describe devices)."""
    try:
        CustomObjectsApi(api).list_cluster_custom_object(
            GPU_GROUP, GPU_VERSION, GPU_PLURAL, limit=1, _request_timeout=timeout
        )
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


def _order_of(claim: Obj, order_pods: Mapping[tuple[str, str], str]) -> str | None:
    """The order a claim belongs to (``activities.inventory.claim_order``: given to an order's pod, or
    reserved for one; a tenant's own label on it is not believed)."""
    return claim_order(claim, order_pods)


def order_claim(claim: Obj, order_pods: Mapping[tuple[str, str], str]) -> OrderClaim | None:
    """An order replica's claim as the bookings count it; None for a claim of no order, one being
    deleted, or one not of the shape the order's ResourceClaimTemplate writes (one request: ``exactly``,
    or a steered order's ``firstAvailable``, whose alternatives share class, count and capacity)."""
    meta = claim.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return None
    order = _order_of(claim, order_pods)
    if order is None:
        return None
    requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []
    if len(requests) != 1:
        return None
    exactly = request_alternatives(requests[0])[0]
    device_class = exactly.get("deviceClassName")
    if not device_class:
        return None
    memory: int | None = None
    raw = ((exactly.get("capacity") or {}).get("requests") or {}).get(MEMORY_CAPACITY)
    if raw is not None:
        try:
            memory = Quantity.parse(str(raw)).mib()
        except QuantityError:
            return None
    return OrderClaim(
        holder=f"{meta.get('namespace', '')}/{order}",
        name=str(meta.get("name", "")),
        deviceClass=str(device_class),
        deviceCount=int(exactly.get("count") or 1),
        memoryMiB=memory,
        allocated=bool((claim.get("status") or {}).get("allocation")),
    )


def order_claims(
    claims: Iterable[Obj], order_pods: Mapping[tuple[str, str], str], memo: Memo | None = None
) -> list[OrderClaim]:
    """Each claim's :func:`order_claim`; ``memo``: kept by the claim's version and its order."""
    if memo is None:
        return [found for claim in claims if (found := order_claim(claim, order_pods)) is not None]
    out = []
    for claim in claims:
        found = memoized(memo, "order_claim", claim, lambda c: order_claim(c, order_pods), _order_of(claim, order_pods))
        if found is not None:
            out.append(found)
    return out


def _planned_count(template: Obj) -> tuple[str, int] | None:
    """(holder, planned placements with devices) of a pinned order's template; None: it reserves nothing."""
    meta = template.get("metadata") or {}
    order = template_order(template)
    raw = (meta.get("annotations") or {}).get(ANNOTATION_PLANNED_PLACEMENTS)
    if not order or raw is None or meta.get("deletionTimestamp"):
        return None
    try:
        count = sum(len(p["devices"]) > 0 for p in json.loads(raw))
    except (ValueError, KeyError, TypeError):
        return None
    return f"{meta.get('namespace', '')}/{order}", count


def with_reservations(claims: list[OrderClaim], templates: Iterable[Obj], memo: Memo | None = None) -> list[OrderClaim]:
    """The order claims as the bookings count them when pinned orders' templates reserve their planned
    placements on the snapshot (``activities.inventory.planned_reservations``): each planned placement
    counts as a settled replica (the snapshot holds it, allocated or reserved), and an unallocated claim
    of such an order is not reserved a second time. ``memo``: each template is read once per
    resourceVersion."""
    reserved: dict[str, int] = {}
    for template in templates:
        found = memoized(memo, "planned_count", template, _planned_count)
        if found is None:
            continue
        holder, count = found
        reserved[holder] = reserved.get(holder, 0) + count
    if not reserved:
        return claims
    kept = [c for c in claims if c.allocated or c.holder not in reserved]
    for holder, count in sorted(reserved.items()):
        kept += [
            OrderClaim(holder=holder, name=f"planned#{i}", deviceClass="", allocated=True, reserved=True)
            for i in range(count)
        ]
    return kept


# What the planner reads of a Pod and a Node; the cache keeps only this (every pod of the cluster is
# watched when nodes are judged), and a delivery that changes none of it changes no snapshot.
_KEPT_POD_SPEC = ("nodeName", "overhead")


_GATED_POD_SPEC = ("schedulingGates", "tolerations", "nodeSelector")


def _requests_only(containers: Iterable[Obj] | None) -> list[Obj]:
    return [{"resources": {"requests": ((c.get("resources") or {}).get("requests")) or {}}} for c in containers or []]


def slim_pod(pod: Obj) -> Obj:
    """A Pod as the planner reads it: who it is, the order label, its node, its containers' requests
    (and overhead), its phase and the names of the claims it was given."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    labels = meta.get("labels") or {}
    return {
        "metadata": {
            **{
                k: meta[k]
                for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp")
                if k in meta
            },
            "labels": {LABEL_ORDER: labels[LABEL_ORDER]} if LABEL_ORDER in labels else {},
            **_controller_only(meta),
        },
        "spec": {
            **{k: spec[k] for k in _KEPT_POD_SPEC if spec.get(k)},
            "containers": _requests_only(spec.get("containers")),
            "initContainers": _requests_only(spec.get("initContainers")),
            # A replica waiting for the replica placer (worker.observer.replica_placer): its gates and
            # what the placer judges its node by.
            **({k: spec[k] for k in _GATED_POD_SPEC if spec.get(k)} if waits_for_placement(spec) else {}),
        },
        "status": {
            "phase": status.get("phase"),
            # The claims the resourceclaim controller gave it: what makes a claim an order's.
            **({"resourceClaimStatuses": given} if (given := _given_claims(status)) else {}),
        },
    }


def _given_claims(status: Mapping[str, Any]) -> list[Obj]:
    return [
        {"resourceClaimName": g["resourceClaimName"]}
        for g in status.get("resourceClaimStatuses") or []
        if isinstance(g, Mapping) and g.get("resourceClaimName")
    ]


def _controller_only(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The controller ownerReference alone (what the ownership check follows), if any."""
    refs = [r for r in meta.get("ownerReferences") or [] if r.get("controller") is True]
    return {"ownerReferences": refs} if refs else {}


def slim_statefulset(statefulset: Obj) -> Obj:
    """An order's StatefulSet as the planner reads it: who it is and its controller (the order)."""
    meta = statefulset.get("metadata") or {}
    return {
        "metadata": {
            **{k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta},
            **_controller_only(meta),
        }
    }


def slim_node(node: Obj) -> Obj:
    """A Node as the planner reads it: name, labels, taints, cordon, allocatable, and its Ready
    condition's status alone (not its heartbeat times: a heartbeat leaves the slim node unchanged)."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    ready = [
        {"type": "Ready", "status": c.get("status")} for c in status.get("conditions") or [] if c.get("type") == "Ready"
    ]
    return {
        "metadata": {
            **{k: meta[k] for k in ("name", "uid", "resourceVersion") if k in meta},
            "labels": dict(meta.get("labels") or {}),
        },
        "spec": {"taints": spec.get("taints") or [], "unschedulable": bool(spec.get("unschedulable"))},
        "status": {"allocatable": dict(status.get("allocatable") or {}), "conditions": ready},
    }


_SLIM: dict[str, Callable[[Obj], Obj]] = {ORDER_POD: slim_pod, NODE: slim_node, STATEFULSET: slim_statefulset}


def _without_version(obj: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    if obj is None:
        return None
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "resourceVersion"}
    return {**obj, "metadata": meta}


class InventoryInformers:
    """The inventory as informers see it; call it (``inventory()``) for the current snapshot."""

    def __init__(
        self,
        resources: list[Resource],
        *,
        drivers: Collection[str] = (GPU_DRIVER,),
        watch_timeout_seconds: int = 300,
    ) -> None:
        self.resources = resources
        self.drivers = tuple(drivers)
        self.informers = {r.kind: Informer(r.kind) for r in resources}
        self.judge_nodes = any(r.kind == NODE for r in resources)
        for kind in KINDS:
            if kind not in self.informers:
                # A kind not watched (no PhysicalGPU CRD here) is empty, and synced as such.
                self.informers[kind] = Informer(kind)
                self.informers[kind].synced = True
        self.watch_timeout_seconds = watch_timeout_seconds
        self.version = 0
        self.deliveries = 0
        self._lock = threading.Lock()
        # One build at a time (the memo is the builds'); deliveries take ``_lock`` alone.
        self._building = threading.Lock()
        self.memo = Memo()
        self._built: tuple[int, InventorySnapshot, list[OrderClaim]] | None = None
        self._watches: list[ListWatch] = []

    @classmethod
    def for_cluster(cls, api: ApiClient, *, judge_nodes: bool = True, **kwargs: Any) -> InventoryInformers:
        return cls(inventory_resources(api, physical_gpus_served(api), judge_nodes), **kwargs)

    # --------------------------------------------------------------------------- running

    def start(self) -> InventoryInformers:
        self._watches = [ListWatch(r, self.deliver, self.watch_timeout_seconds) for r in self.resources]
        for watch in self._watches:
            watch.start()
        log.info("planner inventory informers started", kinds=[r.kind for r in self.resources])
        return self

    def stop(self) -> None:
        for watch in self._watches:
            watch.stop()

    @property
    def watches(self) -> list[ListWatch]:
        return list(self._watches)

    def deliver(self, item: InformerItem) -> None:
        """From a list+watch thread: the cache takes the listing or the event."""
        slim = _SLIM.get(item.kind)
        if slim is not None:
            item = (
                Listed(item.kind, [slim(obj) for obj in item.items])
                if isinstance(item, Listed)
                else Watched(item.kind, item.type, slim(item.obj))
            )
        with self._lock:
            informer = self.informers[item.kind]
            changes = informer.listed(item.items) if isinstance(item, Listed) else informer.watched(item.type, item.obj)
            self.deliveries += 1
            if slim is not None:
                # A pod's status or a node's heartbeat changes nothing the planner reads.
                changes = [
                    c for c in changes if c.type != MODIFIED or _without_version(c.old) != _without_version(c.new)
                ]
            if changes:
                self.version += 1

    # ---------------------------------------------------------------------------- reading

    @property
    def synced(self) -> bool:
        return all(informer.synced for informer in self.informers.values())

    def ready(self) -> bool:
        return self.synced

    def __call__(self) -> InventorySnapshot:
        return self.snapshot()

    def snapshot(self) -> InventorySnapshot:
        """The inventory now (rebuilt only when a delivery changed something since the last call)."""
        return self.view()[0]

    def objects(self) -> dict[str, list[Obj]]:
        """Every kind's cached objects now (the lists are the caller's)."""
        with self._lock:
            return self._objects()

    def _objects(self) -> dict[str, list[Obj]]:
        out = {kind: cast(list[Obj], list(self.informers[kind].cache.values())) for kind in KINDS}
        if not self.judge_nodes:
            del out[NODE]
        return out

    def view(self) -> tuple[InventorySnapshot, Sequence[OrderClaim]]:
        """The inventory now and the order claims of the same state (both rebuilt only when a delivery
        changed something since the last call; what each object derives is kept by its version in
        ``self.memo``, so a rebuild derives the objects that changed alone)."""
        with self._building:
            with self._lock:
                if not self.synced:
                    raise InventoryNotSyncedError("the inventory informers have not listed every kind yet")
                if self._built is not None and self._built[0] == self.version:
                    return self._built[1], self._built[2]
                version = self.version
                objects = self._objects()
            snapshot, claimed = build_view(objects, self.drivers, self.memo)
            self.memo.sweep()
            with self._lock:
                if self._built is None or self._built[0] < version:
                    self._built = (version, snapshot, claimed)
            return snapshot, claimed


KINDS = (DEVICE_CLASS, RESOURCE_SLICE, RESOURCE_CLAIM, PHYSICAL_GPU, ORDER_POD, NODE, CLAIM_TEMPLATE, STATEFULSET)


def build_view(
    objects: Mapping[str, list[Obj]], drivers: Collection[str] = (GPU_DRIVER,), memo: Memo | None = None
) -> tuple[InventorySnapshot, list[OrderClaim]]:
    """The snapshot and the order claims from every kind's objects (``objects``: kind → objects; no
    ``Node`` kind: nodes are not judged). Pure; ``memo`` (:class:`activities.inventory.Memo`): what an
    earlier build derived of an object of the same version is taken from it, with the same result."""
    pods = objects.get(ORDER_POD, [])
    nodes = objects.get(NODE)
    templates = objects.get(CLAIM_TEMPLATE, [])
    claims = objects.get(RESOURCE_CLAIM, [])
    order_pods = order_pod_names(pods, objects.get(STATEFULSET, []))
    snapshot = build_snapshot(
        objects.get(DEVICE_CLASS, []),
        objects.get(RESOURCE_SLICE, []),
        claims,
        objects.get(PHYSICAL_GPU, []),
        order_pods,
        drivers=drivers,
        nodes=build_nodes(nodes, pods, memo) if nodes is not None else None,
        claim_templates=templates,
        memo=memo,
    )
    claimed = with_reservations(order_claims(claims, order_pods, memo), templates, memo)
    return snapshot, claimed
