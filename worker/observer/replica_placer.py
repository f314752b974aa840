"""The replica placer: every replica of a steered (autoscaled) order on a device the module chose.

A steered order's pods are made behind the scheduling gate ``ai.deckhouse.io/replica-placement``
(``activities.builders.claim.REPLICA_PLACEMENT_GATE``); the resourceclaim controller makes each pod's
claim from the order's template at once, and the scheduler touches neither while the gate stands. The
placer (the leading observer's, shard 0) looks at the gated pods every ``interval`` seconds from the
planner's informers (``worker.observer.inventory.InventoryInformers``: the same snapshot the planner
service plans on — devices, every claim's allocation, every pinned or steered order's planned places,
nodes and their pods), and for each replica of an order (the pod's controller chain reaches the order:
``activities.inventory.order_pod_names``; a pod a tenant made with the gate is no order's and waits):

1. decides its device (``activities.replica_placement.place_replica``: the order's planned place first,
   then the tightest fit; never another order's planned place);
2. writes the claim's ``status.allocation`` on it (an update conditioned on the claim's
   resourceVersion: a claim changed meanwhile is looked at again next pass);
3. removes the gate (a JSON patch tested against the pod's uid); the scheduler binds the pod to the
   node the allocation names and reserves the claim for it.

No device with room for the replica its order's plan placed (a planned place of the order is not allocated
yet: the planner saw room there): the gate goes and the allocator decides, as before the gate (its
`ClaimNotAllocatable` makes the order plan again). No device with room for a replica the autoscaler
added: the pod keeps its gate and says so in its status (``ai.deckhouse.io/ReplicaPlaced``
False, ``NoPlace``, with the reason), which the scaling watch counts as unschedulable
(``activities.scaling.pod_is_unschedulable``), so preemption can make room as for a pod the scheduler
refused; the next pass places it once room is there. Level-triggered: a pass reads what the
informers hold, so a pod missed (a failed write, a restart, a new leader) is placed by the next.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog
from kubernetes.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from activities.builders.claim import ANNOTATION_PLANNED_PLACEMENTS, REPLICA_PLACEMENT_GATE, waits_for_placement
from activities.inventory import claim_order, order_pod_names
from activities.replica_placement import (
    NoPlace,
    ReplicaPlacement,
    UnreadableClaimError,
    allocation_status,
    memory_of,
    place_replica,
    replica_request,
)
from activities.scaling import NO_PLACE, REPLICA_PLACED
from planner.inventory import DeviceAllocation, InventorySnapshot
from worker.observer.inventory import CLAIM_TEMPLATE, ORDER_POD, RESOURCE_CLAIM, STATEFULSET, InventoryInformers
from worker.observer.metrics import REPLICAS_PLACED

log = structlog.get_logger(__name__)

Obj = Mapping[str, Any]
RESOURCE_GROUP = "resource.k8s.io"
RESOURCE_VERSION = "v1"
# On a placed replica's pod: where the placer put it (JSON: node, devices, request), for whoever reads it
# back beside the claim's allocation (the benchmark, the tests, an administrator).
ANNOTATION_REPLICA_PLACEMENT = "ai.deckhouse.io/replica-placement"
# An allocation written is counted on the snapshot until the informer shows it (or this long).
WRITTEN_TTL_SECONDS = 30.0


def planned_places(template: Obj | None) -> list[tuple[str, str]]:
    """The (node, device) of every planned placement the order's template records."""
    if template is None:
        return []
    raw = ((template.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_PLANNED_PLACEMENTS)
    if raw is None:
        return []
    try:
        return [(str(p["node"]), str(name)) for p in json.loads(raw) for name in p["devices"]]
    except (ValueError, KeyError, TypeError):
        return []


@dataclass
class PassReport:
    placed: list[str] = field(default_factory=list)  # namespace/pod
    ungated: list[str] = field(default_factory=list)
    waiting: dict[str, str] = field(default_factory=dict)  # namespace/pod -> why


class ReplicaPlacer:
    def __init__(
        self,
        api: ApiClient,
        informers: InventoryInformers,
        *,
        fence: Callable[[], bool] | None = None,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.core = CoreV1Api(api)
        self.custom = CustomObjectsApi(api)
        self.informers = informers
        self.fence = fence
        self.interval = interval
        self.clock = clock
        # (namespace, claim) -> (when, [(device key, allocation)]): written, not yet seen by the informer.
        self.written: dict[tuple[str, str], tuple[float, list[tuple[str, DeviceAllocation]]]] = {}
        # pod uid -> the NoPlace message last written on it.
        self.no_place: dict[str, str] = {}

    async def run(self) -> None:
        log.info("replica placer started", gate=REPLICA_PLACEMENT_GATE)
        while True:
            try:
                if self.informers.ready() and (self.fence is None or self.fence()):
                    report = await asyncio.to_thread(self.pass_once)
                    if report.placed or report.ungated:
                        log.debug(
                            "replica placer pass",
                            placed=len(report.placed),
                            ungated=len(report.ungated),
                            waiting=len(report.waiting),
                        )
            except Exception as err:  # a pass that failed is done again by the next
                log.warning("replica placer pass failed", error=type(err).__name__, detail=str(err)[:200])
            await asyncio.sleep(self.interval)

    # ------------------------------------------------------------------------------ one pass

    def pass_once(self) -> PassReport:
        report = PassReport()
        objects = self.informers.objects()
        pods = objects.get(ORDER_POD, [])
        waiting = sorted(
            (
                p
                for p in pods
                if waits_for_placement(p.get("spec") or {}) and not (p.get("metadata") or {}).get("deletionTimestamp")
            ),
            key=lambda p: ((p["metadata"].get("namespace", "")), p["metadata"].get("name", "")),
        )
        claims = {
            (c["metadata"].get("namespace", ""), c["metadata"].get("name", "")): c for c in objects[RESOURCE_CLAIM]
        }
        self._forget_seen(claims)
        if not waiting:
            return report
        order_pods = order_pod_names(pods, objects.get(STATEFULSET, []))
        templates = {
            (t["metadata"].get("namespace", ""), t["metadata"].get("name", "")): t for t in objects[CLAIM_TEMPLATE]
        }
        # Each order's allocated claims (an order's planned places not allocated yet are lent to its replicas).
        allocated_of: dict[str, int] = {}
        for (ns, _), c in claims.items():
            if (c.get("status") or {}).get("allocation") and (owner := claim_order(c, order_pods)) is not None:
                allocated_of[f"{ns}/{owner}"] = allocated_of.get(f"{ns}/{owner}", 0) + 1
        snapshot: InventorySnapshot | None = None
        for pod in waiting:
            meta = pod["metadata"]
            namespace, name = meta.get("namespace", ""), meta.get("name", "")
            where = f"{namespace}/{name}"
            order = order_pods.get((namespace, name))
            if order is None:
                report.waiting[where] = "not an order's replica"
                continue
            given = [g["resourceClaimName"] for g in (pod.get("status") or {}).get("resourceClaimStatuses") or []]
            claim = claims.get((namespace, given[0])) if given else None
            if claim is None:
                report.waiting[where] = "its claim is not made yet"
                continue
            key = (namespace, claim["metadata"]["name"])
            if (claim.get("status") or {}).get("allocation") or key in self.written:
                if self._ungate(pod):
                    report.ungated.append(where)
                continue
            template = templates.get((namespace, f"{order}-claim"))
            if _made_before(pod, template):
                # A new plan replaced the template since the claim was made from it: the observer deletes
                # the pod (decisions.pods_with_stale_claims) and the StatefulSet makes it again.
                report.waiting[where] = "its claim was made from a claim template replaced since"
                continue
            if snapshot is None:
                snapshot = self._with_written(self.informers.snapshot())
            holder = f"{namespace}/{order}"
            preferred = planned_places(template)
            allocated = allocated_of.get(holder, 0) + sum(
                1 for _, entries in self.written.values() if entries and entries[0][1].holder == holder
            )
            try:
                request = replica_request(claim, pod, holder, preferred, max(0, len(preferred) - allocated))
            except UnreadableClaimError as err:
                report.waiting[where] = str(err)
                continue
            placement = place_replica(snapshot, request)
            if isinstance(placement, NoPlace):
                if request.lend > 0:
                    # The replica its order's plan placed (a planned place of the order not allocated yet):
                    # the planner saw room there. Left to the allocator (the template's `planned`, then
                    # `any`), as before the gate: if it cannot allocate it either, the replica says
                    # ClaimNotAllocatable and the order plans again (the stale-claim repair remakes it).
                    log.info("replica left to the scheduler", pod=name, namespace=namespace, why=placement.message)
                    REPLICAS_PLACED.labels("deferred").inc()
                    if self._ungate(pod):
                        report.ungated.append(where)
                    continue
                report.waiting[where] = placement.message
                if self._say_no_place(pod, placement.message):
                    REPLICAS_PLACED.labels("no_place").inc()
                continue
            if not self._allocate(claim, placement, memory_of(placement, request)):
                report.waiting[where] = "the claim changed; looked at again next pass"
                REPLICAS_PLACED.labels("conflict").inc()
                continue
            REPLICAS_PLACED.labels("placed").inc()
            entries = [(p.device.key, p.allocation) for p in placement.picks]
            self.written[key] = (self.clock(), entries)
            snapshot = _with_allocations(snapshot, entries)
            log.info(
                "replica placed",
                order=holder,
                pod=name,
                claim=key[1],
                node=placement.node,
                devices=list(placement.devices),
                request=placement.request,
            )
            report.placed.append(where)
            if self._ungate(pod, placement):
                report.ungated.append(where)
            if meta.get("uid") in self.no_place:
                self._say_placed(pod)
        return report

    # ----------------------------------------------------------------------------- writes

    def _allocate(self, claim: Obj, placement: ReplicaPlacement, memory: Any) -> bool:
        meta = claim["metadata"]
        share_ids = [str(uuid.uuid4()) for _ in placement.picks]
        body = {
            **claim,
            "apiVersion": f"{RESOURCE_GROUP}/{RESOURCE_VERSION}",
            "kind": "ResourceClaim",
            "status": {**(claim.get("status") or {}), **allocation_status(placement, memory, share_ids)},
        }
        try:
            self.custom.replace_namespaced_custom_object_status(
                RESOURCE_GROUP, RESOURCE_VERSION, meta["namespace"], "resourceclaims", meta["name"], body
            )
        except ApiException as err:
            log.info("replica claim not allocated", claim=meta["name"], namespace=meta["namespace"], status=err.status)
            return False
        return True

    def _ungate(self, pod: Obj, placement: ReplicaPlacement | None = None) -> bool:
        """Remove the gate (tested against the pod's uid); with ``placement``, record it on the pod in the
        same patch (``ai.deckhouse.io/replica-placement``: node, devices, the request met)."""
        meta = pod["metadata"]
        rest = [
            g for g in (pod.get("spec") or {}).get("schedulingGates") or [] if g.get("name") != REPLICA_PLACEMENT_GATE
        ]
        patch = [
            {"op": "test", "path": "/metadata/uid", "value": meta.get("uid")},
            {"op": "replace", "path": "/spec/schedulingGates", "value": rest},
        ]
        if placement is not None:
            record = {"node": placement.node, "devices": list(placement.devices), "request": placement.request}
            path = "/metadata/annotations/" + ANNOTATION_REPLICA_PLACEMENT.replace("~", "~0").replace("/", "~1")
            patch.append({"op": "add", "path": path, "value": json.dumps(record, separators=(",", ":"))})
        try:
            self.core.patch_namespaced_pod(meta["name"], meta["namespace"], patch)
        except ApiException as err:
            if err.status not in (404, 409, 422):
                log.info("replica gate not removed", pod=meta["name"], namespace=meta["namespace"], status=err.status)
            return False
        return True

    def _condition(self, pod: Obj, status: str, reason: str, message: str) -> None:
        meta = pod["metadata"]
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "status": {
                "conditions": [
                    {
                        "type": REPLICA_PLACED,
                        "status": status,
                        "reason": reason,
                        "message": message,
                        "lastTransitionTime": now,
                    }
                ]
            }
        }
        try:
            self.core.patch_namespaced_pod_status(meta["name"], meta["namespace"], body)
        except ApiException as err:
            log.info("replica condition not written", pod=meta["name"], namespace=meta["namespace"], status=err.status)

    def _say_no_place(self, pod: Obj, message: str) -> bool:
        """Say it on the pod once per message; whether it was said now."""
        uid = str(pod["metadata"].get("uid"))
        if self.no_place.get(uid) == message:
            return False
        self._condition(pod, "False", NO_PLACE, message)
        self.no_place[uid] = message
        log.info(
            "replica waits for room",
            pod=pod["metadata"].get("name"),
            namespace=pod["metadata"].get("namespace"),
            why=message,
        )
        return True

    def _say_placed(self, pod: Obj) -> None:
        self._condition(pod, "True", "Placed", "the replica placer allocated its claim")
        self.no_place.pop(str(pod["metadata"].get("uid")), None)

    # ----------------------------------------------------------------------- bookkeeping

    def _forget_seen(self, claims: Mapping[tuple[str, str], Obj]) -> None:
        now = self.clock()
        for key, (when, _) in list(self.written.items()):
            claim = claims.get(key)
            if claim is None or (claim.get("status") or {}).get("allocation") or now - when > WRITTEN_TTL_SECONDS:
                del self.written[key]

    def _with_written(self, snapshot: InventorySnapshot) -> InventorySnapshot:
        entries = [entry for _, written in self.written.values() for entry in written]
        return _with_allocations(snapshot, entries) if entries else snapshot


def _made_before(pod: Obj, template: Obj | None) -> bool:
    """Was the pod (so its claim) made before the order's current claim template?"""
    made = str((pod.get("metadata") or {}).get("creationTimestamp") or "")
    replaced = str(((template or {}).get("metadata") or {}).get("creationTimestamp") or "")
    # RFC 3339 UTC timestamps of one API server compare as strings.
    return bool(made and replaced and made < replaced)


def _with_allocations(
    snapshot: InventorySnapshot, entries: Sequence[tuple[str, DeviceAllocation]]
) -> InventorySnapshot:
    """The snapshot with ``entries`` (device key, allocation) added to their devices, as the informers
    will show them once they see the writes: each allocation of an order takes the place of one of the
    order's reservations (``planned_reservations``: a planned place no claim of the order is allocated
    on yet) — the one on its own device, else one elsewhere (an allocation on another device gives a
    planned place back). Added beside the reservation, the order was counted twice on its planned
    device until the informer caught up, the device looked full to the next replica planned there, and
    that replica went to ``any`` onto another order's planned place."""
    devices = list(snapshot.devices)
    index = {d.key: i for i, d in enumerate(devices)}

    def take_reservation(at: int, holder: str) -> bool:
        held = devices[at].allocations
        for j, a in enumerate(held):
            if a.reserved and a.holder == holder:
                devices[at] = devices[at].model_copy(update={"allocations": [*held[:j], *held[j + 1 :]]})
                return True
        return False

    for device_key, allocation in entries:
        at = index.get(device_key)
        if at is None:
            continue
        if not take_reservation(at, allocation.holder):
            for other in range(len(devices)):
                if other != at and take_reservation(other, allocation.holder):
                    break
        devices[at] = devices[at].model_copy(update={"allocations": [*devices[at].allocations, allocation]})
    return snapshot.model_copy(update={"devices": devices})


__all__ = ["PassReport", "ReplicaPlacer", "planned_places"]
