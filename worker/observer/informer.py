"""Informers: list+watch of one kind each, a cache of it by key, and what changed.

A thread per kind lists (paged), then watches from the listing's resourceVersion with bookmarks;
an expired resourceVersion (410 Gone) or a broken watch relists. The official client blocks, so the
threads only fetch: they hand plain dicts (camelCase, as the API server sends them) to the event
loop, where :class:`Informer` keeps the cache and turns a listing or a watch event into
:class:`Change` s. The first listing is delivered as ``SYNC``; a relist delivers only what differs
from the cache (``ADDED``, ``MODIFIED``, ``DELETED``), so nothing missed between two watches is lost.

A kind of another module (``Resource.optional``: the catalog's Model/ClusterModel, cert-manager's
ClusterIssuer) may not be served at all: its CRD is not installed, and the API server answers its
list with 404. That is an answer, not a failure: the informer delivers an empty listing marked
``served=False`` (its cache empties: deleting a CRD deletes its objects), counts as fresh, and lists
again every ``absent_recheck_seconds``, so installing the module later is seen within that long.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import structlog
from kubernetes.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from activities.builders.claim import RESOURCE_API_VERSION
from activities.builders.common import LABEL_MANAGED_BY, LABEL_ORDER, MANAGED_BY
from activities.kube import watch_events
from inference_api.catalog_types import CATALOG_GROUP, CATALOG_VERSION
from inference_api.types import CLASSES, GROUP, ORDERS, VERSION
from worker.observer.decisions import ADDED, DELETED, MODIFIED, SYNC, Obj, object_key

log = structlog.get_logger(__name__)

ListFunction = Callable[..., Any]

ORDER = "InferenceService"
CLASS = "InferenceServiceClass"
STATEFULSET = "StatefulSet"
POD = "Pod"
SERVICE = "Service"
INGRESS = "Ingress"
NETWORK_POLICY = "NetworkPolicy"
SECRET = "Secret"
HPA = "HorizontalPodAutoscaler"
CLAIM_TEMPLATE = "ResourceClaimTemplate"
PRIORITY_CLASS = "PriorityClass"
DEVICE_CLASS = "DeviceClass"
STORAGE_CLASS = "StorageClass"
CLUSTER_ISSUER = "ClusterIssuer"
MODEL = "Model"
CLUSTER_MODEL = "ClusterModel"
NODE = "Node"
EVENT = "Event"

# The ``kind`` label of the event metric (the watcher's names for orders and classes kept).
KIND_LABELS = {
    ORDER: "order",
    CLASS: "class",
    STATEFULSET: "statefulset",
    POD: "pod",
    SERVICE: "service",
    INGRESS: "ingress",
    NETWORK_POLICY: "networkpolicy",
    SECRET: "secret",
    HPA: "hpa",
    CLAIM_TEMPLATE: "resourceclaimtemplate",
    PRIORITY_CLASS: "priorityclass",
    DEVICE_CLASS: "deviceclass",
    STORAGE_CLASS: "storageclass",
    CLUSTER_ISSUER: "clusterissuer",
    MODEL: "model",
    CLUSTER_MODEL: "clustermodel",
    NODE: "node",
    EVENT: "event",
}

# Objects an order owns (or, for Pods, its StatefulSet does) that the observer informs on: every one
# carries the module's labels. Not Secrets: no module identity may list or watch Secrets; the observer
# reads the Secrets an order owns by name (``Observer.check_secret``, docs/admin-guide.md).
OWNED_KINDS = (STATEFULSET, SERVICE, INGRESS, NETWORK_POLICY, HPA, CLAIM_TEMPLATE)
CATALOG_KINDS = (MODEL, CLUSTER_MODEL)
# What an InferenceServiceClass names, whose existence its Ready condition says (workflows/class_status.py):
# PriorityClasses (informed on for the orders' priority too), DeviceClasses, StorageClasses and
# cert-manager ClusterIssuers. The last three metadata-only: the observer needs their names only.
REFERENCE_KINDS = (PRIORITY_CLASS, DEVICE_CLASS, STORAGE_CLASS, CLUSTER_ISSUER)
# (API group, version, plural) of the kinds ``reference_resources`` informs on (the watcher's
# ClusterRole grants list and watch of each: deploy/charts/ai-inference/templates/watcher/rbac.yaml).
CERT_MANAGER_GROUP = "cert-manager.io"
_RESOURCE_GROUP, _RESOURCE_VERSION = RESOURCE_API_VERSION.split("/")
REFERENCE_APIS: dict[str, tuple[str, str, str]] = {
    DEVICE_CLASS: (_RESOURCE_GROUP, _RESOURCE_VERSION, "deviceclasses"),
    STORAGE_CLASS: ("storage.k8s.io", "v1", "storageclasses"),
    CLUSTER_ISSUER: (CERT_MANAGER_GROUP, "v1", "clusterissuers"),
}
# How often a kind that is not served (its CRD absent) is listed again.
ABSENT_RECHECK_SECONDS = 30.0
MODULE_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
# The Events the observer reads: the StatefulSet controller's refusals to create a pod (a ResourceQuota,
# an admission webhook). Events carry no labels: the field selector keeps the rest out.
FAILED_CREATE_SELECTOR = "involvedObject.kind=StatefulSet,reason=FailedCreate"

# The Accept headers of a metadata-only list and watch: the API server answers PartialObjectMetadataList
# (a list) and PartialObjectMetadata (each watch event's object): metadata only, never ``data``, and
# with no plain application/json to fall back to (406 rather than whole objects). Anyone may label a
# Secret with the module's labels, so the Secret informer asks for these: a tenant's 700 KB Secrets
# cost the observer a few hundred bytes each.
PARTIAL_METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
PARTIAL_METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"


@dataclass(frozen=True)
class Resource:
    """One kind to inform on: its list function (``watch=True`` makes it a watch), and selectors.

    ``metadata_only``: list and watch PartialObjectMetadata, and cache only what the observer reads
    of it (``slim_metadata``). ``optional``: a kind of another module that may not be served (404:
    an empty listing marked ``served=False``, listed again later; see the module's docstring)."""

    kind: str
    list_fn: ListFunction
    label_selector: str | None = None
    field_selector: str | None = None
    metadata_only: bool = False
    optional: bool = False


# Of a metadata-only object the cache keeps these fields as they are; the rest of the metadata
# (every label and annotation, the managed fields' field sets, finalizers) only as a digest.
_KEPT_METADATA = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp")
_KEPT_LABELS = (LABEL_MANAGED_BY, LABEL_ORDER)


def slim_metadata(obj: dict[str, Any], kind: str, api_version: str = "v1") -> dict[str, Any]:
    """What the observer keeps of a metadata-only object: its identity, the module's labels, its
    order owner references, who wrote it when (``managedFields`` without their field sets), and a
    digest of all its metadata but the resourceVersion (``metadataDigest``).

    Bounded whatever a tenant writes into the labels or annotations of a Secret it labels. The
    digest stands for the content in drift decisions: a write of the data changes the writer's
    managedFields entry, so the digest, and ``decisions.last_writer`` names who wrote."""
    metadata = obj.get("metadata") or {}
    kept: dict[str, Any] = {key: metadata[key] for key in _KEPT_METADATA if key in metadata}
    labels = metadata.get("labels") or {}
    kept["labels"] = {key: labels[key] for key in _KEPT_LABELS if key in labels}
    owners = [o for o in metadata.get("ownerReferences") or [] if o.get("kind") == "InferenceService"]
    if owners:
        kept["ownerReferences"] = owners
    kept["managedFields"] = [
        {k: entry[k] for k in ("manager", "operation", "time", "subresource") if k in entry}
        for entry in metadata.get("managedFields") or []
    ]
    rest = {k: v for k, v in metadata.items() if k != "resourceVersion"}
    digest = hashlib.sha256(json.dumps(rest, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return {"apiVersion": api_version, "kind": kind, "metadata": kept, "metadataDigest": digest}


def _custom(custom: CustomObjectsApi, group: str, version: str, plural: str) -> ListFunction:
    # /apis/<group>/<version>/<plural> lists a namespaced kind across namespaces, or a cluster-scoped one.
    def list_fn(**kwargs: Any) -> Any:
        return custom.list_cluster_custom_object(group, version, plural, **kwargs)

    return list_fn


def resources(api: ApiClient, catalog: bool) -> list[Resource]:
    """Everything the observer informs on; Model and ClusterModel only with the catalog enabled."""
    custom = CustomObjectsApi(api)
    core = CoreV1Api(api)
    resource_group, resource_version = RESOURCE_API_VERSION.split("/")
    out = [
        Resource(ORDER, _custom(custom, GROUP, VERSION, ORDERS)),
        Resource(CLASS, _custom(custom, GROUP, VERSION, CLASSES)),
        Resource(STATEFULSET, _custom(custom, "apps", "v1", "statefulsets"), MODULE_SELECTOR),
        Resource(POD, core.list_pod_for_all_namespaces, MODULE_SELECTOR),
        Resource(SERVICE, core.list_service_for_all_namespaces, MODULE_SELECTOR),
        Resource(INGRESS, _custom(custom, "networking.k8s.io", "v1", "ingresses"), MODULE_SELECTOR),
        Resource(NETWORK_POLICY, _custom(custom, "networking.k8s.io", "v1", "networkpolicies"), MODULE_SELECTOR),
        Resource(HPA, _custom(custom, "autoscaling", "v2", "horizontalpodautoscalers"), MODULE_SELECTOR),
        Resource(
            CLAIM_TEMPLATE, _custom(custom, resource_group, resource_version, "resourceclaimtemplates"), MODULE_SELECTOR
        ),
        Resource(PRIORITY_CLASS, _custom(custom, "scheduling.k8s.io", "v1", "priorityclasses")),
        Resource(NODE, core.list_node),
        Resource(EVENT, core.list_event_for_all_namespaces, field_selector=FAILED_CREATE_SELECTOR),
    ]
    if catalog:
        # ai-models may not be installed (its CRDs absent): optional, so the watcher is ready without it.
        out += [
            Resource(MODEL, _custom(custom, CATALOG_GROUP, CATALOG_VERSION, "models"), optional=True),
            Resource(CLUSTER_MODEL, _custom(custom, CATALOG_GROUP, CATALOG_VERSION, "clustermodels"), optional=True),
        ]
    return out


def reference_resources(api: ApiClient) -> list[Resource]:
    """The kinds a class names besides PriorityClasses (``resources`` has those), metadata-only:
    DeviceClasses, StorageClasses and, when cert-manager is installed, ClusterIssuers (optional)."""
    custom = CustomObjectsApi(api)
    return [
        Resource(kind, _custom(custom, *REFERENCE_APIS[kind]), metadata_only=True, optional=kind == CLUSTER_ISSUER)
        for kind in (DEVICE_CLASS, STORAGE_CLASS, CLUSTER_ISSUER)
    ]


# ------------------------------------------------------------------ the threads (fetch only)


@dataclass(frozen=True)
class Listed:
    """A whole listing of one kind (the first one, or a relist); ``served=False``: the API server does
    not serve the kind (an optional one whose CRD is absent), so there is nothing."""

    kind: str
    items: list[dict[str, Any]]
    served: bool = True


@dataclass(frozen=True)
class Watched:
    kind: str
    type: str  # ADDED | MODIFIED | DELETED
    obj: dict[str, Any]


InformerItem = Listed | Watched


def _selector(resource: Resource, watch: bool = False) -> dict[str, Any]:
    """The keyword arguments of a list (or a watch) call: selectors, and the metadata-only Accept header."""
    selectors = {"label_selector": resource.label_selector, "field_selector": resource.field_selector}
    out: dict[str, Any] = {name: value for name, value in selectors.items() if value}
    if resource.metadata_only:
        out["_headers"] = {"Accept": PARTIAL_METADATA if watch else PARTIAL_METADATA_LIST}
    return out


def _cached_form(resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
    return slim_metadata(obj, resource.kind) if resource.metadata_only else obj


def list_all(resource: Resource, page: int = 500, request_timeout: float = 60) -> tuple[list[dict[str, Any]], str]:
    """Every object (paged), each with its apiVersion and kind, and the listing's resourceVersion."""
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        response = resource.list_fn(
            limit=page, _continue=token, _preload_content=False, _request_timeout=request_timeout, **_selector(resource)
        )
        try:
            document = json.loads(response.data)
        finally:
            response.release_conn()
        api_version = document.get("apiVersion")
        kind = str(document.get("kind") or "").removesuffix("List") or resource.kind
        for item in document.get("items") or []:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
            items.append(_cached_form(resource, item))
        metadata = document.get("metadata") or {}
        token = metadata.get("continue") or None
        if token is None:
            return items, str(metadata.get("resourceVersion") or "")


class ListWatch:
    """The blocking list+watch loop of one kind, run in its own thread until ``stop()``."""

    def __init__(
        self,
        resource: Resource,
        deliver: Callable[[InformerItem], None],
        timeout_seconds: int = 300,
        max_backoff: float = 60,
        absent_recheck_seconds: float = ABSENT_RECHECK_SECONDS,
    ) -> None:
        self.resource = resource
        self.deliver = deliver
        self.timeout_seconds = timeout_seconds
        self.max_backoff = max_backoff
        # An optional kind not served: listed again this often; None until a listing said so.
        self.absent_recheck_seconds = min(absent_recheck_seconds, max(1.0, timeout_seconds / 2))
        self.served: bool | None = None
        self._stop = threading.Event()
        self._response: Any = None
        self.thread = threading.Thread(target=self.run, daemon=True, name=f"informer-{resource.kind}")
        # Freshness, for /readyz: when the API server last answered this loop (a list, a watch event or
        # bookmark, a watch that ended on its timeout), and since when it fails (None: it does not).
        self.last_contact: float | None = None
        self.failing_since: float | None = None
        self.failure: str | None = None

    def _contact(self) -> None:
        self.last_contact = time.monotonic()
        self.failing_since = None
        self.failure = None

    def _failed(self, what: str) -> None:
        if self.failing_since is None:
            self.failing_since = time.monotonic()
        self.failure = what

    def start(self) -> None:
        self.thread.start()

    def _not_served(self) -> None:
        """An optional kind answered 404: not served. An empty listing (once per change; fresh all the
        same), and another look after ``absent_recheck_seconds``."""
        self._contact()
        if self.served is not False:
            log.warning(
                "kind not served (its CRD is not installed): informing on nothing until it is",
                kind=self.resource.kind,
                recheck_seconds=self.absent_recheck_seconds,
            )
            self.served = False
            self.deliver(Listed(self.resource.kind, [], served=False))
        self._stop.wait(self.absent_recheck_seconds)

    def stop(self) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            # Unblocks the read of a watch in progress (already closed: nothing to unblock).
            with contextlib.suppress(Exception):
                response.shutdown()

    def _watch(self, resource_version: str) -> Iterator[dict[str, Any]]:
        response = self.resource.list_fn(
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=self.timeout_seconds,
            _preload_content=False,
            _request_timeout=(30, self.timeout_seconds + 30),
            **_selector(self.resource, watch=True),
        )
        self._response = response
        events = watch_events(response)
        try:
            for event in events:
                if self._stop.is_set():
                    return
                yield event
        finally:
            self._response = None
            events.close()

    def run(self) -> None:
        kind = self.resource.kind
        resource_version: str | None = None
        backoff = 1.0
        while not self._stop.is_set():
            try:
                if resource_version is None:
                    try:
                        items, resource_version = list_all(self.resource)
                    except ApiException as err:
                        if not (self.resource.optional and err.status == 404):
                            raise
                        self._not_served()
                        continue
                    self._contact()
                    if self.served is False:
                        log.info("kind served again: informing on it", kind=kind)
                    self.served = True
                    self.deliver(Listed(kind, items))
                for event in self._watch(resource_version):
                    self._contact()
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        raise ApiException(status=int(obj.get("code") or 500), reason=str(obj.get("reason") or ""))
                    resource_version = str((obj.get("metadata") or {}).get("resourceVersion") or resource_version)
                    if event.get("type") in (ADDED, MODIFIED, DELETED):
                        self.deliver(Watched(kind, str(event["type"]), _cached_form(self.resource, obj)))
                self._contact()
                backoff = 1.0
            except ApiException as err:
                if self._stop.is_set():
                    return
                if err.status == 410:
                    # The resourceVersion is too old: relist; the informer delivers what differs.
                    log.info("watch expired, relisting", kind=kind)
                    resource_version = None
                    continue
                self._failed(f"HTTP {err.status}")
                log.warning("list or watch failed, retrying", kind=kind, status=err.status, retry_in=backoff)
                resource_version = None
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff)
            except Exception as err:  # a network hiccup must not end the informer
                if self._stop.is_set():
                    return
                self._failed(type(err).__name__)
                log.warning("watch broke, retrying", kind=kind, error=type(err).__name__, retry_in=backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff)


# ----------------------------------------------------------------- the cache (event loop side)


@dataclass(frozen=True)
class Change:
    type: str  # SYNC | ADDED | MODIFIED | DELETED
    old: Obj | None
    new: Obj | None

    @property
    def obj(self) -> Obj:
        found = self.new if self.new is not None else self.old
        assert found is not None
        return found


def _rv(obj: Obj | None) -> str | None:
    return ((obj or {}).get("metadata") or {}).get("resourceVersion")


def _uid(obj: Obj | None) -> str | None:
    return ((obj or {}).get("metadata") or {}).get("uid")


def _replaced(old: Obj, new: Obj) -> list[Change]:
    """Same key: the same object changed, or (another uid) one deleted and another made in its place."""
    if _uid(old) != _uid(new):
        return [Change(DELETED, old, None), Change(ADDED, None, new)]
    return [Change(MODIFIED, old, new)]


class Informer:
    """The cache of one kind, by ``namespace/name`` (or ``name``), and what each delivery changed."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.cache: dict[str, Obj] = {}
        self.synced = False
        # False while the API server does not serve the kind (an optional one: its CRD absent).
        self.served = True

    def get(self, key: str) -> Obj | None:
        return self.cache.get(key)

    def listed(self, items: list[dict[str, Any]], served: bool = True) -> list[Change]:
        self.served = served
        fresh = {object_key(item): item for item in items}
        if not self.synced:
            self.synced = True
            self.cache = dict(fresh)
            return [Change(SYNC, None, item) for item in fresh.values()]
        changes: list[Change] = []
        for key, item in fresh.items():
            old = self.cache.get(key)
            if old is None:
                changes.append(Change(ADDED, None, item))
            elif _rv(old) != _rv(item):
                changes += _replaced(old, item)
        changes += [Change(DELETED, old, None) for key, old in self.cache.items() if key not in fresh]
        self.cache = dict(fresh)
        return changes

    def watched(self, event_type: str, obj: dict[str, Any]) -> list[Change]:
        key = object_key(obj)
        old = self.cache.get(key)
        if event_type == DELETED:
            self.cache.pop(key, None)
            return [Change(DELETED, old, obj)]
        if old is not None and _rv(old) == _rv(obj):
            return []
        self.cache[key] = obj
        return _replaced(old, obj) if old is not None else [Change(ADDED, None, obj)]
