"""The planner service's inventory, kept by informers instead of read on every plan.

``ai-inference planner`` hands :class:`InventoryInformers` to ``planner.service.create_app``: one
list+watch loop (:class:`worker.observer.informer.ListWatch`: paged list, watch from its
resourceVersion with bookmarks, relist on 410 Gone, backoff on errors) per kind the snapshot is built
from — DeviceClasses, ResourceSlices, ResourceClaims, PhysicalGPUs (when the gpu module's CRD is
there) and the Pods carrying the order label (a claim's holder when the claim does not name it). Each
delivery updates a cache (:class:`worker.observer.informer.Informer`) and bumps a version; a plan reads
the snapshot, rebuilt by ``activities.inventory.build_snapshot`` only when something changed since the
last plan. So a plan costs the API server nothing, and what changed (a slice, a claim allocated) is
seen by the next plan as soon as its watch event arrived.

:meth:`InventoryInformers.view` gives the snapshot with the order claims seen in the same state
(:func:`order_claims`: each order replica's claim, allocated or not, with its device class, count and
memory request), from which the service's bookings learn when a plan's claims are allocated
(``planner.bookings``).

Ready (the service's ``/readyz``) once every kind has been listed once; before that a plan answers
503 (the caller retries), never a plan made on half an inventory.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, cast

import structlog
from kubernetes.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from activities.builders.claim import MEMORY_CAPACITY
from activities.builders.common import LABEL_ORDER
from activities.inventory import RESOURCE_GROUP, RESOURCE_VERSION, Obj, build_snapshot
from inference_api.gpu_types import GPU_GROUP, GPU_PLURAL, GPU_VERSION
from planner.bookings import OrderClaim
from planner.inventory import GPU_DRIVER, InventorySnapshot
from planner.quantity import Quantity, QuantityError
from worker.observer.informer import Informer, InformerItem, Listed, ListWatch, Resource

log = structlog.get_logger(__name__)

DEVICE_CLASS = "DeviceClass"
RESOURCE_SLICE = "ResourceSlice"
RESOURCE_CLAIM = "ResourceClaim"
PHYSICAL_GPU = "PhysicalGPU"
ORDER_POD = "Pod"


class InventoryNotSyncedError(RuntimeError):
    """A plan asked before every kind was listed once (the service answers 503)."""

    status = 503
    reason = "inventory not synced yet"


def _custom(custom: CustomObjectsApi, group: str, version: str, plural: str) -> Callable[..., Any]:
    def list_fn(**kwargs: Any) -> Any:
        return custom.list_cluster_custom_object(group, version, plural, **kwargs)

    return list_fn


def inventory_resources(api: ApiClient, physical_gpus: bool = True) -> list[Resource]:
    custom = CustomObjectsApi(api)
    out = [
        Resource(DEVICE_CLASS, _custom(custom, RESOURCE_GROUP, RESOURCE_VERSION, "deviceclasses")),
        Resource(RESOURCE_SLICE, _custom(custom, RESOURCE_GROUP, RESOURCE_VERSION, "resourceslices")),
        Resource(RESOURCE_CLAIM, _custom(custom, RESOURCE_GROUP, RESOURCE_VERSION, "resourceclaims")),
        Resource(ORDER_POD, CoreV1Api(api).list_pod_for_all_namespaces, LABEL_ORDER),
    ]
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
    """The order a claim belongs to: its order label, else a pod owning or reserving it that carries one."""
    meta = claim.get("metadata") or {}
    order = (meta.get("labels") or {}).get(LABEL_ORDER)
    if order:
        return str(order)
    namespace = meta.get("namespace", "")
    pods = [ref.get("name", "") for ref in meta.get("ownerReferences") or [] if ref.get("kind") == "Pod"]
    pods += [
        ref.get("name", "")
        for ref in (claim.get("status") or {}).get("reservedFor") or []
        if ref.get("resource") == "pods" and not ref.get("apiGroup")
    ]
    return next((order_pods[(namespace, p)] for p in pods if (namespace, p) in order_pods), None)


def order_claim(claim: Obj, order_pods: Mapping[tuple[str, str], str]) -> OrderClaim | None:
    """An order replica's claim as the bookings count it; None for a claim of no order, one being
    deleted, or one not of the shape the order's ResourceClaimTemplate writes (one request, exactly)."""
    meta = claim.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return None
    order = _order_of(claim, order_pods)
    if order is None:
        return None
    requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []
    if len(requests) != 1:
        return None
    exactly = requests[0].get("exactly") or {}
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


def order_claims(claims: Iterable[Obj], order_pods: Mapping[tuple[str, str], str]) -> list[OrderClaim]:
    return [found for claim in claims if (found := order_claim(claim, order_pods)) is not None]


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
        for kind in (DEVICE_CLASS, RESOURCE_SLICE, RESOURCE_CLAIM, PHYSICAL_GPU, ORDER_POD):
            if kind not in self.informers:
                # A kind not watched (no PhysicalGPU CRD here) is empty, and synced as such.
                self.informers[kind] = Informer(kind)
                self.informers[kind].synced = True
        self.watch_timeout_seconds = watch_timeout_seconds
        self.version = 0
        self.deliveries = 0
        self._lock = threading.Lock()
        self._built: tuple[int, InventorySnapshot, list[OrderClaim]] | None = None
        self._watches: list[ListWatch] = []

    @classmethod
    def for_cluster(cls, api: ApiClient, **kwargs: Any) -> InventoryInformers:
        return cls(inventory_resources(api, physical_gpus_served(api)), **kwargs)

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
        with self._lock:
            informer = self.informers[item.kind]
            changes = informer.listed(item.items) if isinstance(item, Listed) else informer.watched(item.type, item.obj)
            self.deliveries += 1
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

    def view(self) -> tuple[InventorySnapshot, Sequence[OrderClaim]]:
        """The inventory now and the order claims of the same state (both rebuilt only when a delivery
        changed something since the last call)."""
        with self._lock:
            if not self.synced:
                raise InventoryNotSyncedError("the inventory informers have not listed every kind yet")
            if self._built is not None and self._built[0] == self.version:
                return self._built[1], self._built[2]
            version = self.version
            classes = cast(list[Obj], list(self.informers[DEVICE_CLASS].cache.values()))
            slices = cast(list[Obj], list(self.informers[RESOURCE_SLICE].cache.values()))
            claims = cast(list[Obj], list(self.informers[RESOURCE_CLAIM].cache.values()))
            gpus = cast(list[Obj], list(self.informers[PHYSICAL_GPU].cache.values()))
            pods = cast(list[Obj], list(self.informers[ORDER_POD].cache.values()))
        order_pods: dict[tuple[str, str], str] = {}
        for pod in pods:
            meta = pod.get("metadata") or {}
            order = (meta.get("labels") or {}).get(LABEL_ORDER)
            if order:
                order_pods[(meta.get("namespace", ""), meta.get("name", ""))] = order
        snapshot = build_snapshot(classes, slices, claims, gpus, order_pods, drivers=self.drivers)
        claimed = order_claims(claims, order_pods)
        with self._lock:
            if self._built is None or self._built[0] < version:
                self._built = (version, snapshot, claimed)
        return snapshot, claimed
