"""The observer's repack: which serving orders to ask for a move made before it breaks (pure).

A plan is made once. An order planned onto a whole device because every share was taken at that moment
keeps the device after the shares free up: stranded capacity (docs/planner.md). With ``observer.repack``
enabled, every ``intervalSeconds`` the observer asks such orders (``OrderSignal.MOVE``) to plan again
beside what they hold; the workflow moves only to a place that takes less of a device, and the apply
only within the class's update policy (``activities/builders/move.py``).

A candidate is an order that:
- serves (Ready=True, phase Ready) and is not being deleted or moved already (WorkloadReady=WorkloadMoving);
- holds a whole device per replica (``status.resolved.sharePercent`` 100);
- has a class that could give it less: an acceleratorPolicy that allows Shared and a share below 100;
- has a class whose update policy allows the move: ``moves: MakeBeforeBreak``, ``strategy: RollingUpdate``
  and a fixed replica count (an autoscaled order's HPA owns its replicas).

The planner decides whether a smaller place has room; this only keeps the asking to the orders that
could move at all.

Consolidating moves (``consolidating_moves``): shares on devices that are partly used. Plans are made
once, so when orders go, the shares left are spread over devices each partly used, and no order of a
whole device (nor a large share) fits on any of them. The repack runs ``planner.repack.propose_repack``
on the inventory the replica placer sees (devices, every claim's allocation, every planned place) and
asks each share it would move (``OrderSignal.MOVE`` with its target, ``node/device``) to plan beside
what it holds with the target ranked first; the workflow moves only when the plan lands on the target.
A movable share is an order that serves (as above), holds less than a whole device, and whose class
allows the move (as above); one allocation of the order in all (one replica on one device).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from activities.builders.move import move_allowed
from inference_api.reasons import Reason
from inference_api.types import (
    ConditionType,
    InferenceServiceClass,
    Phase,
    SharingMode,
)
from planner.inventory import InventorySnapshot
from planner.moves import Move
from planner.repack import propose_repack
from planner.scaling import autoscaled

Obj = Mapping[str, Any]


def could_share(cls: InferenceServiceClass) -> bool:
    """The class's acceleratorPolicy admits a Shared placement below a whole device."""
    policy = cls.spec.acceleratorPolicy
    if policy is None:
        return False  # absent: one whole, dedicated device per replica
    if policy.allowedSharingModes is not None and SharingMode.SHARED not in policy.allowedSharingModes:
        return False
    return (policy.minSharePercent or 1) < 100


def _conditions(order: Obj) -> dict[str, Obj]:
    return {str(c.get("type")): c for c in ((order.get("status") or {}).get("conditions") or [])}


def _serving_still(order: Obj, cls: InferenceServiceClass | None) -> bool:
    """The order serves and nothing else is under way: a class, phase Ready, Ready=True, not being
    deleted, not moving already (WorkloadReady=WorkloadMoving)."""
    meta = order.get("metadata") or {}
    status = order.get("status") or {}
    if cls is None or meta.get("deletionTimestamp") or status.get("phase") != Phase.READY.value:
        return False
    conditions = _conditions(order)
    if (conditions.get(ConditionType.READY.value) or {}).get("status") != "True":
        return False
    return (conditions.get(ConditionType.WORKLOAD_READY.value) or {}).get("reason") != Reason.WORKLOAD_MOVING.value


def _share_of(order: Obj) -> object:
    return ((order.get("status") or {}).get("resolved") or {}).get("sharePercent")


def _class_of(order: Obj, classes: Mapping[str, InferenceServiceClass]) -> InferenceServiceClass | None:
    return classes.get(str((order.get("spec") or {}).get("inferenceServiceClassName") or ""))


def stranded(order: Obj, cls: InferenceServiceClass | None) -> bool:
    """Is ``order`` a candidate for a move (see the module's docstring)?"""
    if cls is None or not _serving_still(order, cls) or _share_of(order) != 100:
        return False
    return could_share(cls) and move_allowed(cls, autoscaled=autoscaled(cls), held=False)


def parsed_classes(classes: Iterable[Obj]) -> dict[str, InferenceServiceClass]:
    """The classes by name, those that parse (one that does not is not the repack's to judge)."""
    out: dict[str, InferenceServiceClass] = {}
    for obj in classes:
        try:
            cls = InferenceServiceClass.model_validate(obj)
        except ValidationError:
            continue
        if cls.metadata.name:
            out[cls.metadata.name] = cls
    return out


def repack_candidates(orders: Iterable[Obj], classes: Mapping[str, InferenceServiceClass], limit: int) -> list[Obj]:
    """At most ``limit`` candidates, in a stable order (namespace/name), for one pass."""

    def key(order: Obj) -> tuple[str, str]:
        meta = order.get("metadata") or {}
        return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))

    found = [o for o in sorted(orders, key=key) if stranded(o, _class_of(o, classes))]
    return found[:limit]


def movable_share(order: Obj, cls: InferenceServiceClass | None) -> bool:
    """May the order's share be moved onto another device (see the module's docstring)?"""
    share = _share_of(order)
    if cls is None or not _serving_still(order, cls) or not isinstance(share, int) or not 0 < share < 100:
        return False
    return move_allowed(cls, autoscaled=autoscaled(cls), held=False)


def consolidating_moves(
    snapshot: InventorySnapshot, orders: Iterable[Obj], classes: Mapping[str, InferenceServiceClass], limit: int
) -> tuple[tuple[Move, ...], tuple[str, ...]]:
    """At most ``limit`` moves of ``orders``' shares that free whole devices (each ``Move``'s holder is the
    order, namespace/name), and the devices they free. Only ``orders`` move (this shard's); the
    snapshot's other holders stay where they are."""
    movable: set[str] = set()
    for order in orders:
        if movable_share(order, _class_of(order, classes)):
            meta = order.get("metadata") or {}
            movable.add(f"{meta.get('namespace')}/{meta.get('name')}")
    if not movable:
        return (), ()
    proposal = propose_repack(snapshot, movable.__contains__, max_moves=limit)
    return proposal.moves, proposal.freed
