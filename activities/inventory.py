"""The Kubernetes inventory adapter: the cluster's GPUs, DeviceClasses and allocations as an InventorySnapshot.

Read on every plan (the planner judges what is taken *now*):

* **DeviceClasses** (``resource.k8s.io/v1``): name and the CEL expressions of ``spec.selectors``.
* **ResourceSlices**: every device the GPU driver publishes, with every attribute and capacity as
  DRA shows them to CEL (``productName``, ``hardwareFamily``, ``memoryGiB``, ``placement``,
  ``migProfile``, ``sharingMode``, ``shareable``, … and ``allowMultipleAllocations``). Only the
  newest generation of each pool counts, as for the scheduler.
* **PhysicalGPUs** (``gpu.deckhouse.io/v1alpha1``, cluster-scoped): the gpu module's own view. They
  fill facts a slice leaves out (product, family, a whole device's memory) and name the whole device a
  MIG partition is cut from; where both speak, the slice wins (the scheduler allocates against it) and
  the disagreement is logged.
* **ResourceClaims** of every namespace: ``status.allocation.devices.results`` become the devices'
  allocations, with ``consumedCapacity`` (``gpu.deckhouse.io/memory``, ``gpu.deckhouse.io/sharePercent``)
  for a share of a device that allows multiple allocations, the whole device otherwise.

Each allocation is given a **holder** so that a replan does not count an order's own claim against it:
``<namespace>/<order>`` when a pod that owns or reserves the claim is the order's; ``<namespace>/<claim
name>`` otherwise. A label is a hint (anyone who may write an object may write its labels): a pod is
the order's only when its controller chain reaches the order (pod → the order's StatefulSet → the
order, ``inference_api.ownership``), and a claim template reserves planned placements only when it
is the order's own (``{order}-claim``, controlled by the order). The planner client sends
``holder = <namespace>/<order>`` (``OrderRef.key``), so the two meet.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping
from fractions import Fraction
from typing import Any, TypeVar

import structlog
from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from activities.builders.claim import ANNOTATION_PLANNED_PLACEMENTS, MEMORY_CAPACITY, request_alternatives
from activities.builders.common import LABEL_ORDER
from inference_api.gpu_types import GPU_GROUP, GPU_PLURAL, GPU_VERSION
from inference_api.ownership import believed_order, by_uid
from inference_api.types import PlacementType
from planner.inventory import (
    GPU_DRIVER,
    AttributeValue,
    CapacityRange,
    CapacityRequestPolicy,
    Device,
    DeviceAllocation,
    DeviceClass,
    InventorySnapshot,
    Node,
    Taint,
)
from planner.quantity import MIB, Quantity, QuantityError, is_quantity
from planner.share import consumed_capacity

log = structlog.get_logger(__name__)

RESOURCE_GROUP = "resource.k8s.io"
RESOURCE_VERSION = "v1"
PAGE_SIZE = 500

# Attributes and capacities the typed fields of a Device come from (bare names, the driver's domain).
MEMORY = "memory"
SHARE_PERCENT = "sharePercent"

Obj = dict[str, Any]

_NODES_UNREADABLE_LOGGED = False

_T = TypeVar("_T")
_MISSING: Any = object()


class Memo:
    """What the builders derive of each object (a claim's allocation results, a pod's requests, a
    template's planned placements, a node's allocatable, the devices of the slices), kept between
    builds by the object's identity and ``metadata.resourceVersion``, so that a rebuild after one
    object changed derives that object alone. Passed to the pure builders by a caller that rebuilds
    often (the planner service's informers); without one they derive everything.

    Each build keeps what it used: :meth:`sweep` (after a build) drops every entry the build did not
    ask for (an object deleted, or replaced by a new resourceVersion), so the memo holds what one
    build derives, never more. An object without a resourceVersion is derived every time."""

    def __init__(self) -> None:
        self._kept: dict[Hashable, Any] = {}
        self._used: dict[Hashable, Any] = {}
        # Derivations run (a memo miss, or an object with no version): what a test counts.
        self.derived = 0

    def get(self, key: Hashable | None, derive: Callable[[], _T]) -> _T:
        if key is None:
            self.derived += 1
            return derive()
        value = self._used.get(key, _MISSING)
        if value is _MISSING:
            value = self._kept.pop(key, _MISSING)
            if value is _MISSING:
                value = derive()
                self.derived += 1
            self._used[key] = value
        return value

    def sweep(self) -> None:
        """End of a build: keep what it used, drop the rest."""
        self._kept = self._used
        self._used = {}

    def __len__(self) -> int:
        return len(self._kept) + len(self._used)

    def keys(self) -> set[Hashable]:
        return set(self._kept) | set(self._used)


def object_version(obj: Obj) -> tuple[str, str, str, str] | None:
    """(namespace, name, uid, resourceVersion) of an API object; None without a resourceVersion."""
    meta = obj.get("metadata") or {}
    rv = meta.get("resourceVersion")
    if not rv:
        return None
    return (meta.get("namespace") or "", meta.get("name") or "", meta.get("uid") or "", rv)


def memoized(memo: Memo | None, what: str, obj: Obj, derive: Callable[[Obj], _T], *extra: Hashable) -> _T:
    """``derive(obj)``, kept in ``memo`` (when one is given) by ``what``, the object's version and ``extra``."""
    if memo is None:
        return derive(obj)
    version = object_version(obj)
    return memo.get(None if version is None else (what, version, *extra), lambda: derive(obj))


# ------------------------------------------------------------------------------ reads


def _list_cluster(
    custom: CustomObjectsApi, group: str, version: str, plural: str, timeout: float | None
) -> Iterator[Obj]:
    """Every object of a resource, all namespaces, page by page (plain dicts: no model round-trip)."""
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"limit": PAGE_SIZE}
        if token:
            kwargs["_continue"] = token
        if timeout is not None:
            kwargs["_request_timeout"] = timeout
        page = custom.list_cluster_custom_object(group, version, plural, **kwargs)
        yield from page.get("items") or []
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return


def _order_pods(api: ApiClient, timeout: float | None) -> dict[tuple[str, str], str]:
    """(namespace, pod) → order name, for the orders' pods (the order label, believed along the
    controller chain through the orders' StatefulSets). Empty when pods are not readable."""
    kwargs: dict[str, Any] = {"label_selector": LABEL_ORDER, "_preload_content": False}
    if timeout is not None:
        kwargs["_request_timeout"] = timeout
    try:
        response = CoreV1Api(api).list_pod_for_all_namespaces(**kwargs)
        statefulsets = AppsV1Api(api).list_stateful_set_for_all_namespaces(**kwargs)
    except ApiException as err:
        if err.status in (401, 403, 404):
            log.debug("pods not readable: claims keep their own name", status=err.status)
            return {}
        raise
    return order_pod_names(
        json.loads(response.data).get("items") or [], json.loads(statefulsets.data).get("items") or []
    )


def order_pod_names(pods: Iterable[Obj], statefulsets: Iterable[Obj] = ()) -> dict[tuple[str, str], str]:
    """(namespace, pod) → order name, for the pods that are an order's: the order label, believed only
    when the pod's controller chain reaches that order through one of ``statefulsets``
    (``inference_api.ownership.believed_order``; a pod labelled by anyone else is no order's).

    And (namespace, ``claim/<name>``) → order name for each ResourceClaim such a pod was given
    (``claim_key``): its ``status.resourceClaimStatuses``, which the resourceclaim controller writes
    and no tenant can. That, not a claim's own label or ownerReferences (a tenant may write both on a
    claim of their own), is what makes a claim an order's."""
    owners = by_uid(*statefulsets)
    out: dict[tuple[str, str], str] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        order = believed_order(pod, LABEL_ORDER, owners)
        if order:
            namespace = meta.get("namespace", "")
            out[(namespace, meta.get("name", ""))] = order
            for given in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
                if isinstance(given, dict) and given.get("resourceClaimName"):
                    out[claim_key(namespace, str(given["resourceClaimName"]))] = order
    return out


def claim_key(namespace: str, claim: str) -> tuple[str, str]:
    """The key of a claim in :func:`order_pod_names` (a pod's name has no ``/``: no pod shares it)."""
    return (namespace, f"claim/{claim}")


def template_order(template: Obj) -> str | None:
    """The order a ResourceClaimTemplate is the claim template of: the order label, believed only on the
    order's own template (named ``{order}-claim``, its controller the order)."""
    order = believed_order(template, LABEL_ORDER)
    if order is None or (template.get("metadata") or {}).get("name") != f"{order}-claim":
        return None
    return order


def read_inventory(
    api: ApiClient,
    *,
    drivers: Collection[str] = (GPU_DRIVER,),
    timeout: float | None = None,
    judge_nodes: bool = True,
) -> InventorySnapshot:
    """The cluster's inventory as the planner judges it: devices of ``drivers``, every DeviceClass,
    what allocated ResourceClaims hold and (``judge_nodes``) the nodes with what their pods request.
    ``timeout`` bounds each API call (seconds)."""
    custom = CustomObjectsApi(api)
    classes = list(_list_cluster(custom, RESOURCE_GROUP, RESOURCE_VERSION, "deviceclasses", timeout))
    slices = list(_list_cluster(custom, RESOURCE_GROUP, RESOURCE_VERSION, "resourceslices", timeout))
    claims = list(_list_cluster(custom, RESOURCE_GROUP, RESOURCE_VERSION, "resourceclaims", timeout))
    try:
        gpus = list(_list_cluster(custom, GPU_GROUP, GPU_VERSION, GPU_PLURAL, timeout))
    except ApiException as err:
        if err.status != 404:
            raise
        gpus = []  # no gpu module (or its CRD) here: the slices alone describe the devices
    pods: dict[tuple[str, str], str] | None = None
    if any(_needs_pods(c, drivers) for c in claims):
        pods = _order_pods(api, timeout)
    nodes = _read_nodes(api, timeout) if judge_nodes else None
    templates = list(_list_cluster(custom, RESOURCE_GROUP, RESOURCE_VERSION, "resourceclaimtemplates", timeout))
    return build_snapshot(
        classes, slices, claims, gpus, pods or {}, drivers=drivers, nodes=nodes, claim_templates=templates
    )


def _read_nodes(api: ApiClient, timeout: float | None) -> list[Node] | None:
    """The nodes as the scheduler judges them, from Nodes and the pods bound to them; None (nodes
    not judged) when either cannot be read (the role lacks them)."""
    kwargs: dict[str, Any] = {"_preload_content": False}
    if timeout is not None:
        kwargs["_request_timeout"] = timeout
    core = CoreV1Api(api)
    try:
        nodes = json.loads(core.list_node(**kwargs).data).get("items") or []
        running = "status.phase!=Succeeded,status.phase!=Failed"
        pods = json.loads(core.list_pod_for_all_namespaces(field_selector=running, **kwargs).data).get("items") or []
    except ApiException as err:
        if err.status in (401, 403, 404):
            global _NODES_UNREADABLE_LOGGED
            if not _NODES_UNREADABLE_LOGGED:  # once a process: every plan reads them
                log.warning("nodes or pods not readable: the planner does not judge nodes", status=err.status)
                _NODES_UNREADABLE_LOGGED = True
            return None
        raise
    return build_nodes(nodes, pods)


# ----------------------------------------------------------------------- pure mapping


def build_snapshot(
    device_classes: list[Obj],
    resource_slices: list[Obj],
    resource_claims: list[Obj],
    physical_gpus: list[Obj],
    order_pods: Mapping[tuple[str, str], str],
    *,
    drivers: Collection[str] = (GPU_DRIVER,),
    nodes: list[Node] | None = None,
    claim_templates: Collection[Obj] = (),
    memo: Memo | None = None,
) -> InventorySnapshot:
    """The snapshot from the objects as the API server returns them (plain dicts). Pure. ``nodes``
    (``build_nodes``): None, nodes are not judged. ``claim_templates``: a pinned order's template
    reserves each planned placement no claim of the order is allocated on yet (``planned_reservations``).
    ``memo``: what was derived of each object by an earlier build is taken from it (:class:`Memo`)."""
    classes = [_device_class(obj) for obj in sorted(device_classes, key=lambda o: o["metadata"]["name"])]
    base, by_pool = _fleet(resource_slices, physical_gpus, drivers, memo)
    allocations = _allocations(resource_claims, order_pods, drivers, memo)

    # Every device a list of its own (a caller may append allocations to a snapshot's device; the
    # memo's devices are shared by every build).
    devices = [d.model_copy(update={"allocations": []}) for d in base]
    for key, held in allocations.items():
        index = by_pool.get(key)
        if index is None:
            continue  # allocated on a device no current slice publishes (a pool being replaced)
        device = devices[index]
        devices[index] = device.model_copy(update={"allocations": [_held_allocation(device, h, memo) for h in held]})
    by_key = {d.key: i for i, d in enumerate(devices)}
    for reserved in planned_reservations(claim_templates, devices, memo=memo):
        i = by_key[reserved.key]
        devices[i] = devices[i].model_copy(update={"allocations": [*devices[i].allocations, reserved.allocation]})
    return InventorySnapshot(devices=devices, deviceClasses=classes, nodes=nodes)


def _fleet(
    resource_slices: list[Obj], physical_gpus: list[Obj], drivers: Collection[str], memo: Memo | None
) -> tuple[list[Device], dict[tuple[str, str, str], int]]:
    """The devices the slices publish, with nothing allocated, and each one's index by (driver, pool,
    device); kept in ``memo`` while no slice and no PhysicalGPU changed."""

    def derive() -> tuple[list[Device], dict[tuple[str, str, str], int]]:
        raw_devices = list(_slice_devices(resource_slices, drivers))
        gpus = _index_gpus(physical_gpus)
        devices: list[Device] = []
        by_pool: dict[tuple[str, str, str], int] = {}
        seen: set[tuple[str, str]] = set()
        for raw in raw_devices:
            device = _device(raw, gpus)
            if (device.node, device.name) in seen:
                log.warning("device published twice; the second is ignored", node=device.node, device=device.name)
                continue
            seen.add((device.node, device.name))
            by_pool[(raw.driver, raw.pool, raw.name)] = len(devices)
            devices.append(device)
        return _with_parents(devices, raw_devices, gpus), by_pool

    if memo is None:
        return derive()
    versions = [object_version(o) for o in (*resource_slices, *physical_gpus)]
    if any(v is None for v in versions):
        return memo.get(None, derive)
    key = ("fleet", tuple(sorted(versions[: len(resource_slices)])), tuple(sorted(versions[len(resource_slices) :])))  # type: ignore[type-var]
    return memo.get((*key, tuple(sorted(drivers))), derive)


class Reserved:
    """A planned placement of a pinned order that no claim of the order is allocated on yet."""

    __slots__ = ("allocation", "deviceClass", "key")

    def __init__(self, key: str, allocation: DeviceAllocation, device_class: str) -> None:
        self.key = key
        self.allocation = allocation
        self.deviceClass = device_class


def planned_reservations(templates: Collection[Obj], devices: list[Device], memo: Memo | None = None) -> list[Reserved]:
    """What pinned orders' planned placements hold before their claims are allocated. Pure.

    A pinned order's ResourceClaimTemplate names each replica's planned node and devices (the
    annotation ``ai.deckhouse.io/planned-placements``) and selects only them, so the capacity is its
    own whether the replica runs yet or not (a replica the autoscaler starts later lands there): each
    planned device that does not already hold as many of the order's allocations as the plan put
    there holds one more, as a claim from the template would (its memory request on a shareable
    device, else the whole device), with the order as holder (a replan counts it as its own).
    ``memo``: each template's annotation is parsed once per resourceVersion (:class:`Memo`)."""
    by_key = {d.key: d for d in devices}
    # Each holder's allocations wherever they are, counted once (not once per template).
    anywhere_of: dict[str, int] = {}
    for d in devices:
        for a in d.allocations:
            anywhere_of[a.holder] = anywhere_of.get(a.holder, 0) + 1
    out: list[Reserved] = []
    for template in sorted(templates, key=lambda t: (t["metadata"].get("namespace", ""), t["metadata"]["name"])):
        parsed = memoized(memo, "planned", template, _planned)
        if parsed is None:
            continue
        holder, planned, memory, device_class = parsed
        wanted: dict[str, int] = {}
        for node, name in planned:
            wanted[f"{node}/{name}"] = wanted.get(f"{node}/{name}", 0) + 1
        have = {key: sum(1 for a in by_key[key].allocations if a.holder == holder) for key in wanted if key in by_key}
        # Replicas not allocated yet: the order's allocations wherever they are (a steered order's
        # replica the allocator put on another device of the kind took the place of a planned one: the
        # planned place is given back, as the allocation says), each on a planned device with fewer of
        # them than planned (the allocator may have stacked two replicas where the plan spread them).
        anywhere = anywhere_of.get(holder, 0)
        remaining = max(0, len(planned) - max(anywhere, sum(have.values())))
        for key, count in wanted.items():
            device = by_key.get(key)
            if device is None:
                continue
            for _ in range(min(remaining, count - have[key])):
                remaining -= 1
                held = template_allocation(device, holder, memory).model_copy(update={"reserved": True})
                out.append(Reserved(key, held, device_class))
    return out


# A template's planned placements as planned_reservations reads them: (holder, [(node, device)], the
# memory request, the device class); None: the template reserves nothing.
Planned = tuple[str, list[tuple[str, str]], Quantity | None, str]


def _planned(template: Obj) -> Planned | None:
    meta = template.get("metadata") or {}
    raw = (meta.get("annotations") or {}).get(ANNOTATION_PLANNED_PLACEMENTS)
    order = template_order(template)
    if raw is None or not order or meta.get("deletionTimestamp"):
        return None
    try:
        planned = [(str(p["node"]), str(name)) for p in json.loads(raw) for name in p["devices"]]
    except (ValueError, KeyError, TypeError):
        return None
    requests = (((template.get("spec") or {}).get("spec") or {}).get("devices") or {}).get("requests") or []
    # Pinned: the one exact request; steered (firstAvailable): the planned subrequest, first.
    exactly = request_alternatives(requests[0])[0] if len(requests) == 1 else {}
    memory_raw = ((exactly.get("capacity") or {}).get("requests") or {}).get(MEMORY_CAPACITY)
    memory = Quantity.parse(str(memory_raw)) if memory_raw is not None and is_quantity(str(memory_raw)) else None
    return f"{meta.get('namespace', '')}/{order}", planned, memory, str(exactly.get("deviceClassName", ""))


def template_allocation(device: Device, holder: str, memory: Quantity | None) -> DeviceAllocation:
    """What a claim from an order's template would hold of ``device``, as the DRA allocator computes it
    (KEP-5075): on a device that allows multiple allocations, its memory request rounded by the
    device's requestPolicy and its share capacity's default (no claim requests one); the whole device
    otherwise (or when the request would not be allowed there)."""
    if memory is None or not device.allowMultipleAllocations or device.memoryMiB is None:
        return DeviceAllocation(holder=holder)
    consumed = consumed_capacity(memory.value, Fraction(device.memoryMiB * MIB), device.capacity_policy(MEMORY))
    if consumed is None:
        return DeviceAllocation(holder=holder)
    share_capacity = device.capacity.get(SHARE_PERCENT) or device.capacity.get(f"{device.driver}/{SHARE_PERCENT}")
    share = (
        consumed_capacity(None, Quantity.of(share_capacity).value, device.capacity_policy(SHARE_PERCENT))
        if share_capacity is not None
        else None
    )
    return DeviceAllocation(
        holder=holder,
        sharePercent=min(100, max(0, math.ceil(share))) if share is not None else 0,
        memoryMiB=math.ceil(consumed / MIB),
    )


def build_nodes(nodes: list[Obj], pods: list[Obj], memo: Memo | None = None) -> list[Node]:
    """Nodes as the scheduler judges them (NodeResourcesFit, TaintToleration, NodeUnschedulable, and
    whether the node is Ready):
    allocatable CPU, memory and pods; what the pods bound there and not finished request (the larger
    of the containers' sum and the largest init container, plus the pod overhead); taints; cordon;
    labels. Pure. ``memo``: each pod's requests and each node's allocatable are parsed once per
    resourceVersion (:class:`Memo`)."""
    requested: dict[str, list[int]] = {}
    for pod in pods:
        spec = pod.get("spec") or {}
        node = spec.get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        cpu, memory = memoized(memo, "requests", pod, _pod_requests)
        held = requested.setdefault(node, [0, 0, 0])
        held[0] += cpu
        held[1] += memory
        held[2] += 1
    out = []
    for obj in sorted(nodes, key=lambda o: o["metadata"]["name"]):
        name = obj["metadata"]["name"]
        spec = obj.get("spec") or {}
        cpu, memory, count = requested.get(name, [0, 0, 0])
        cpu_milli, memory_mib, pod_count = memoized(memo, "allocatable", obj, _allocatable)
        out.append(
            Node(
                name=name,
                cpuMilli=cpu_milli,
                memoryMiB=memory_mib,
                pods=pod_count,
                requestedCpuMilli=cpu,
                requestedMemoryMiB=memory,
                podCount=count,
                taints=[
                    Taint(key=t.get("key", ""), value=t.get("value"), effect=t.get("effect", ""))
                    for t in spec.get("taints") or []
                ],
                unschedulable=bool(spec.get("unschedulable")),
                ready=_node_ready(obj),
                labels=dict((obj.get("metadata") or {}).get("labels") or {}),
            )
        )
    return out


def _pod_requests(pod: Obj) -> tuple[int, int]:
    return pod_requests(pod.get("spec") or {})


def _allocatable(node: Obj) -> tuple[int | None, int | None, int | None]:
    """A node's allocatable (CPU milli, memory MiB, pods)."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return _milli(allocatable.get("cpu")), _node_mib(allocatable.get("memory")), _count(allocatable.get("pods"))


def _node_ready(node: Obj) -> bool:
    """The node's Ready condition is True (a node with no conditions at all, as a test's bare Node
    object, counts as Ready: nothing says otherwise)."""
    conditions = (node.get("status") or {}).get("conditions")
    if not conditions:
        return True
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def pod_requests(spec: Obj) -> tuple[int, int]:
    """(CPU milli, memory MiB) a pod requests of its node, as the scheduler sums them."""

    def of(container: Obj) -> tuple[int, int]:
        requests = ((container.get("resources") or {}).get("requests")) or {}
        return _milli(requests.get("cpu")) or 0, _node_mib(requests.get("memory"), up=True) or 0

    main = [of(c) for c in spec.get("containers") or []]
    init = [of(c) for c in spec.get("initContainers") or []]
    cpu = max(sum(c for c, _ in main), max((c for c, _ in init), default=0))
    memory = max(sum(m for _, m in main), max((m for _, m in init), default=0))
    overhead = spec.get("overhead") or {}
    return cpu + (_milli(overhead.get("cpu")) or 0), memory + (_node_mib(overhead.get("memory"), up=True) or 0)


def _quantity(raw: object) -> Quantity | None:
    if raw is None:
        return None
    try:
        return Quantity.of(str(raw))
    except (QuantityError, ValueError):
        return None


def _milli(raw: object) -> int | None:
    q = _quantity(raw)
    return None if q is None else math.ceil(q.value * 1000)


def _node_mib(raw: object, *, up: bool = False) -> int | None:
    """MiB of a memory quantity: allocatable rounds down, a request up (so a fit is never overstated)."""
    q = _quantity(raw)
    if q is None:
        return None
    return math.ceil(q.value / MIB) if up else math.floor(q.value / MIB)


def _count(raw: object) -> int | None:
    q = _quantity(raw)
    return None if q is None else int(q.value)


def _device_class(obj: Obj) -> DeviceClass:
    selectors = []
    for selector in (obj.get("spec") or {}).get("selectors") or []:
        expression = (selector.get("cel") or {}).get("expression")
        if expression is not None:
            selectors.append(str(expression))
    return DeviceClass(name=obj["metadata"]["name"], selectors=selectors)


class _RawDevice:
    """One device entry of a ResourceSlice, with where it lives."""

    __slots__ = ("attributes", "capacity", "driver", "entry", "name", "node", "policies", "pool")

    def __init__(self, driver: str, pool: str, node: str, entry: Obj) -> None:
        self.driver = driver
        self.pool = pool
        self.node = node
        self.entry = entry
        self.name: str = entry["name"]
        self.attributes: dict[str, AttributeValue] = {
            name: value
            for name, raw in (entry.get("attributes") or {}).items()
            if (value := _attribute(raw)) is not None
        }
        self.capacity: dict[str, str] = {
            name: str(raw["value"]) for name, raw in (entry.get("capacity") or {}).items() if "value" in (raw or {})
        }
        self.policies: dict[str, CapacityRequestPolicy] = {}
        for name, raw in (entry.get("capacity") or {}).items():
            policy = _request_policy(name, (raw or {}).get("requestPolicy"), entry["name"], node)
            if policy is not None:
                self.policies[name] = policy

    def attribute(self, bare: str) -> AttributeValue | None:
        value = self.attributes.get(bare)
        return value if value is not None else self.attributes.get(f"{self.driver}/{bare}")

    def capacity_of(self, bare: str) -> str | None:
        return self.capacity.get(bare) or self.capacity.get(f"{self.driver}/{bare}")


def _request_policy(name: str, raw: Obj | None, device: str, node: str) -> CapacityRequestPolicy | None:
    """A capacity's ``requestPolicy`` (KEP-5075) as published; one the planner cannot read is logged and
    left out (the API server validated it, so only a newer field can do that)."""
    if not raw:
        return None
    valid_range = raw.get("validRange")
    try:
        return CapacityRequestPolicy(
            default=str(raw["default"]) if raw.get("default") is not None else None,
            validValues=tuple(str(v) for v in raw.get("validValues") or ()),
            validRange=CapacityRange(
                min=str(valid_range["min"]),
                max=str(valid_range["max"]) if valid_range.get("max") is not None else None,
                step=str(valid_range["step"]) if valid_range.get("step") is not None else None,
            )
            if valid_range and valid_range.get("min") is not None
            else None,
        )
    except (ValueError, KeyError, TypeError) as exc:
        log.warning(
            "capacity requestPolicy not understood; ignored", capacity=name, device=device, node=node, error=str(exc)
        )
        return None


def _attribute(raw: Obj | None) -> AttributeValue | None:
    """A DeviceAttribute's value: exactly one of bool, int, string, version (a string to CEL here)."""
    if not raw:
        return None
    for kind in ("bool", "int", "string", "version"):
        if kind in raw and raw[kind] is not None:
            value = raw[kind]
            if kind == "bool":
                return bool(value)
            if kind == "int":
                return int(value)
            return str(value)
    return None


def _slice_devices(slices: list[Obj], drivers: Collection[str]) -> Iterator[_RawDevice]:
    # Only the newest generation of a pool is current; older slices are on their way out.
    newest: dict[tuple[str, str], int] = {}
    for s in slices:
        spec = s.get("spec") or {}
        pool = spec.get("pool") or {}
        key = (spec.get("driver", ""), pool.get("name", ""))
        newest[key] = max(newest.get(key, 0), int(pool.get("generation") or 0))
    for s in sorted(slices, key=lambda o: o["metadata"]["name"]):
        spec = s.get("spec") or {}
        driver = spec.get("driver", "")
        if driver not in drivers:
            continue
        pool = spec.get("pool") or {}
        pool_name = pool.get("name", "")
        if int(pool.get("generation") or 0) < newest[(driver, pool_name)]:
            continue
        for entry in spec.get("devices") or []:
            # A device names its node itself under per-device node selection; else the slice does;
            # a network-attached pool has no node, and its pool name stands in for one.
            node = entry.get("nodeName") or spec.get("nodeName") or pool_name
            yield _RawDevice(driver, pool_name, node, entry)


def _index_gpus(gpus: list[Obj]) -> dict[tuple[str, ...], tuple[str, Obj]]:
    """PhysicalGPU (name, status) by ("name", name) and by ("index", node, index)."""
    out: dict[tuple[str, ...], tuple[str, Obj]] = {}
    for gpu in gpus:
        status = gpu.get("status") or {}
        if not status:
            continue  # not observed yet
        name = gpu["metadata"]["name"]
        out[("name", name)] = (name, status)
        if status.get("nodeName") is not None and status.get("index") is not None:
            out[("index", str(status["nodeName"]), str(status["index"]))] = (name, status)
    return out


GpuIndex = Mapping[tuple[str, ...], tuple[str, Obj]]


def _physical_gpu(raw: _RawDevice, gpus: GpuIndex) -> tuple[str | None, Obj | None]:
    """The PhysicalGPU a device belongs to (name, status): by its ``physicalGPU`` attribute, else by node
    and ``index``. Without a PhysicalGPU, the attribute alone still names the silicon (no status)."""
    name = raw.attribute("physicalGPU")
    if isinstance(name, str) and ("name", name) in gpus:
        return gpus[("name", name)]
    index = raw.attribute("index")
    if index is not None and not isinstance(index, bool):
        found = gpus.get(("index", raw.node, str(index)))
        if found is not None:
            return found
    return (name if isinstance(name, str) else None), None


def _mib(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return Quantity.parse(text).mib()
    except QuantityError:
        return None


def _device(raw: _RawDevice, gpus: GpuIndex) -> Device:
    _, gpu = _physical_gpu(raw, gpus)
    mig_profile = raw.attribute("migProfile")
    placement_text = raw.attribute("placement")
    try:
        placement = PlacementType(str(placement_text)) if placement_text is not None else None
    except ValueError:
        placement = None
    if placement is None:
        placement = PlacementType.PARTITION if mig_profile else PlacementType.WHOLE_DEVICE

    product = raw.attribute("productName")
    family = raw.attribute("hardwareFamily")
    memory_mib = _mib(raw.capacity_of(MEMORY))
    if memory_mib is None:
        memory_gib = raw.attribute("memoryGiB")
        if isinstance(memory_gib, int) and not isinstance(memory_gib, bool):
            memory_mib = memory_gib * 1024
    if gpu is not None:
        _confirm(raw, "productName", product, gpu.get("productName"))
        _confirm(raw, "hardwareFamily", family, gpu.get("hardwareFamily"))
        product = product if product is not None else gpu.get("productName")
        family = family if family is not None else gpu.get("hardwareFamily")
        if placement == PlacementType.WHOLE_DEVICE:
            _confirm(raw, "memoryMiB", memory_mib, gpu.get("memoryMiB"))
            if memory_mib is None and gpu.get("memoryMiB") is not None:
                memory_mib = int(gpu["memoryMiB"])

    return Device(
        name=raw.name,
        node=raw.node,
        pool=raw.pool,
        driver=raw.driver,
        productName=str(product) if product is not None else None,
        memoryMiB=memory_mib,
        hardwareFamily=str(family) if family is not None else None,
        placement=placement,
        migProfile=str(mig_profile) if mig_profile is not None else None,
        allowMultipleAllocations=bool(raw.entry.get("allowMultipleAllocations")),
        # Everything the slice publishes, so selectors see exactly what the DRA allocator sees.
        attributes=dict(raw.attributes),
        capacity=dict(raw.capacity),
        capacityPolicies=dict(raw.policies),
    )


def _confirm(raw: _RawDevice, what: str, published: object, observed: object) -> None:
    if published is not None and observed is not None and published != observed:
        log.warning(
            "ResourceSlice and PhysicalGPU disagree; the slice is used",
            node=raw.node,
            device=raw.name,
            field=what,
            slice=published,
            physical_gpu=observed,
        )


def _with_parents(devices: list[Device], raws: list[_RawDevice], gpus: GpuIndex) -> list[Device]:
    """A partition's ``parentDevice``: the whole device of its node cut from the same physical GPU."""
    physical: dict[tuple[str, str], str] = {}
    for raw in raws:
        key, _ = _physical_gpu(raw, gpus)
        if key is not None:
            physical[(raw.node, raw.name)] = key
    whole: dict[tuple[str, str], str] = {}
    for d in devices:
        key = physical.get((d.node, d.name))
        if key is not None and d.placement == PlacementType.WHOLE_DEVICE:
            whole[(d.node, key)] = d.name
    out = []
    for d in devices:
        key = physical.get((d.node, d.name))
        parent = whole.get((d.node, key)) if key is not None else None
        if d.placement == PlacementType.PARTITION and parent is not None and d.parentDevice is None:
            d = d.model_copy(update={"parentDevice": parent})
        out.append(d)
    return out


# ------------------------------------------------------------------------ allocations


class _Held:
    __slots__ = ("consumed", "holder", "source")

    def __init__(self, holder: str, consumed: dict[str, str], source: Hashable | None = None) -> None:
        self.holder = holder
        self.consumed = consumed
        # The claim's version, the device and the result's index (None: not memoized).
        self.source = source


def _needs_pods(claim: Obj, drivers: Collection[str]) -> bool:
    """Whether the claim holds a device of ``drivers``: its holder is learnt from the pods."""
    results = ((((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")) or []
    return any(r.get("driver") in drivers for r in results)


def claim_order(claim: Obj, order_pods: Mapping[tuple[str, str], str]) -> str | None:
    """The order whose replica a claim is, from ``order_pods`` (:func:`order_pod_names`): a claim an
    order's pod was given (its ``resourceClaimStatuses``), else one that reserves it for such a pod
    (``status.reservedFor``, written by the scheduler). Never the claim's own order label or owner
    references alone: whoever may create a claim in a namespace may write those."""
    meta = claim.get("metadata") or {}
    namespace = meta.get("namespace", "")
    given = order_pods.get(claim_key(namespace, str(meta.get("name", ""))))
    if given:
        return given
    for ref in (claim.get("status") or {}).get("reservedFor") or []:
        if ref.get("resource") == "pods" and not ref.get("apiGroup"):
            order = order_pods.get((namespace, ref.get("name", "")))
            if order:
                return order
    return None


def claim_holder(claim: Obj, order_pods: Mapping[tuple[str, str], str]) -> str:
    """``<namespace>/<order>`` for an order's claim (:func:`claim_order`), else ``<namespace>/<claim>``."""
    meta = claim.get("metadata") or {}
    namespace = meta.get("namespace", "")
    order = claim_order(claim, order_pods)
    return f"{namespace}/{order or meta.get('name', '')}"


def _allocations(
    claims: list[Obj], order_pods: Mapping[tuple[str, str], str], drivers: Collection[str], memo: Memo | None = None
) -> dict[tuple[str, str, str], list[_Held]]:
    """(driver, pool, device) → what each allocated claim holds there."""
    out: dict[tuple[str, str, str], list[_Held]] = {}
    for claim in sorted(claims, key=lambda c: (c["metadata"].get("namespace", ""), c["metadata"].get("name", ""))):
        results = memoized(memo, "results", claim, lambda c: _claim_results(c, drivers), *sorted(drivers))
        if not results:
            continue
        holder = claim_holder(claim, order_pods)
        version = object_version(claim) if memo is not None else None
        for i, (key, consumed) in enumerate(results):
            out.setdefault(key, []).append(_Held(holder, consumed, None if version is None else (version, key, i)))
    return out


def _claim_results(claim: Obj, drivers: Collection[str]) -> list[tuple[tuple[str, str, str], dict[str, str]]]:
    """What an allocated claim holds: ((driver, pool, device), consumed capacity) of each result of ``drivers``."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    out = []
    for result in (allocation.get("devices") or {}).get("results") or []:
        if result.get("driver") not in drivers or result.get("adminAccess"):
            continue  # admin access observes a device without taking any of it
        consumed = {str(k): str(v) for k, v in (result.get("consumedCapacity") or {}).items()}
        out.append(((result["driver"], result.get("pool", ""), result.get("device", "")), consumed))
    return out


def _held_allocation(device: Device, held: _Held, memo: Memo | None) -> DeviceAllocation:
    """``_allocation``, kept in ``memo`` by the claim's version, the result and what of the device it reads."""
    if memo is None or held.source is None:
        return _allocation(device, held)
    key = ("allocation", held.source, held.holder, device.driver, device.allowMultipleAllocations)
    return memo.get(key, lambda: _allocation(device, held))


def _allocation(device: Device, held: _Held) -> DeviceAllocation:
    """What one claim holds of a device: its consumed capacity on a shareable device, else all of it."""

    def consumed(bare: str) -> Quantity | None:
        text = held.consumed.get(f"{device.driver}/{bare}") or held.consumed.get(bare)
        if text is None:
            return None
        try:
            return Quantity.parse(text)
        except QuantityError:
            return None

    if not device.allowMultipleAllocations:
        return DeviceAllocation(holder=held.holder)
    memory = consumed(MEMORY)
    share = consumed(SHARE_PERCENT)
    if memory is None and share is None:
        # A shared device with no consumed capacity recorded: nothing says how much, so all of it.
        return DeviceAllocation(holder=held.holder)
    memory_mib = math.ceil(memory.value / MIB) if memory is not None else None
    share_percent = min(100, max(0, math.ceil(share.value))) if share is not None else 0
    return DeviceAllocation(holder=held.holder, sharePercent=share_percent, memoryMiB=memory_mib)
