"""Whether an object really is an order's: the controller ownerReference chain, not a label. Pure.

A label (``ai.deckhouse.io/inference-service``) says which order an object claims to belong to; it is
a hint, since anyone who may write the object may write it (the chart's marks guard refuses that to
everyone but the module, and readers do not rely on the guard alone). An object is believed to be an
order's only when its chain of *controller* ownerReferences reaches that order:

* a ResourceClaimTemplate, a StatefulSet, a Service, ... → the InferenceService itself;
* a pod → its StatefulSet → the InferenceService;
* a ResourceClaim made from the order's template → its pod → the StatefulSet → the InferenceService.

Each intermediate owner must be one of ``owners`` (the objects the reader has: uid → object as the API
server returns it) with the uid and name its reference names, in the same namespace; the chain ends at
an ``ai.deckhouse.io`` InferenceService reference whose name is the one the label gives. With
``orders`` (uid → (namespace, name) of the orders that exist), that reference's uid must be a live
order's too: an ownerReference is written by whoever writes the object, and the API server does not
check its uid. A chain longer than :data:`MAX_HOPS`, a loop, a reference that is not the controller, a
missing owner: not the order's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from inference_api.types import GROUP

ORDER_KIND = "InferenceService"
# claim → pod → StatefulSet → order: three hops; one to spare.
MAX_HOPS = 4

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class OrderOwner:
    """The order a controller chain reaches."""

    namespace: str
    name: str
    uid: str


def _meta(obj: Obj) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def controller_reference(obj: Obj) -> Mapping[str, Any] | None:
    """The ownerReference with ``controller: true`` (the API server allows at most one), or None."""
    refs = _meta(obj).get("ownerReferences") or []
    controllers = [r for r in refs if isinstance(r, Mapping) and r.get("controller") is True]
    return controllers[0] if len(controllers) == 1 else None


def _is_order_reference(ref: Mapping[str, Any]) -> bool:
    group = str(ref.get("apiVersion") or "").partition("/")[0]
    return ref.get("kind") == ORDER_KIND and group == GROUP


def owning_order(obj: Obj, owners: Mapping[str, Obj] | None = None) -> OrderOwner | None:
    """The order the controller chain of ``obj`` reaches through ``owners`` (uid → object); None if none."""
    owners = owners or {}
    namespace = str(_meta(obj).get("namespace") or "")
    current = obj
    seen: set[str] = set()
    for _ in range(MAX_HOPS):
        ref = controller_reference(current)
        if ref is None:
            return None
        uid, name = str(ref.get("uid") or ""), str(ref.get("name") or "")
        if not uid or not name or uid in seen:
            return None
        seen.add(uid)
        if _is_order_reference(ref):
            return OrderOwner(namespace=namespace, name=name, uid=uid)
        owner = owners.get(uid)
        if owner is None:
            return None
        meta = _meta(owner)
        if meta.get("uid") != uid or meta.get("name") != name or str(meta.get("namespace") or "") != namespace:
            return None
        current = owner
    return None


def believed_order(
    obj: Obj,
    label: str,
    owners: Mapping[str, Obj] | None = None,
    orders: Mapping[str, tuple[str, str]] | None = None,
) -> str | None:
    """The order name the object's ``label`` gives, when its controller chain reaches that order (and,
    with ``orders``, a live order of that uid, namespace and name); None otherwise."""
    claimed = (_meta(obj).get("labels") or {}).get(label)
    if not claimed:
        return None
    owner = owning_order(obj, owners)
    if owner is None or owner.name != claimed:
        return None
    if orders is not None and orders.get(owner.uid) != (owner.namespace, owner.name):
        return None
    return owner.name


def owned_by(obj: Obj, order_uid: str, owners: Mapping[str, Obj] | None = None) -> bool:
    """Does the controller chain of ``obj`` reach the order of uid ``order_uid``?"""
    owner = owning_order(obj, owners)
    return owner is not None and bool(order_uid) and owner.uid == order_uid


def by_uid(*objects: Obj) -> dict[str, Obj]:
    """uid → object, for ``owners`` (objects without a uid are left out)."""
    return {str(uid): o for o in objects if (uid := _meta(o).get("uid"))}
