"""What the worker's informer cache of orders and classes may answer, and when a read is a GET.

The worker lists and watches every InferenceService and InferenceServiceClass (``worker.order_cache``);
the activities read the order and its class from that cache, as a controller-runtime reconciler
reads from its informers, instead of a GET each time (eight GETs of the order an order in the
200-order benchmark). A cache is behind the API server by the time a watch event takes to arrive, so
each read says how fresh it must be, from what the run or the write already knows, and the cache
answers only when it is at least that fresh; otherwise the read is a GET, as before:

- an order: the cached object has the order's uid (another uid: deleted and made again, or not yet
  seen), a generation no older than the newest the run was told of, and says it is being deleted when
  the run was told so; absence is never believed (the order may be new to the watch) — a GET says;
- a class: the cached class has exactly the generation the run holds or was told of (0 or unknown: a
  GET: 0 is also what a run told of a deletion holds); a run's first read of its class, before it holds
  or was told of any generation, takes the cached class as it is (an edit the watch has not delivered
  yet reaches the run as a ``class_changed`` signal after it, and the run reads again).

The decisions here are pure; the cache itself is the worker's (``worker.order_cache``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from prometheus_client import Counter

CACHE_READS = Counter(
    "ai_inference_order_cache_reads",
    "Reads of an order or a class by the worker's activities: answered by the informer cache (hit), or by a "
    "GET because the cache was not synced, did not hold it, or was behind what the run knew (miss)",
    ["kind", "result"],
)


class OrderCacheView(Protocol):
    """The worker's informer cache as the activities read it (plain dicts as the API server sends them)."""

    def synced(self) -> bool: ...

    def order(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def order_class(self, name: str) -> dict[str, Any] | None: ...


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def order_fresh_enough(obj: Mapping[str, Any] | None, uid: str, generation: int | None, deleting: bool = False) -> bool:
    """Whether the cached order ``obj`` answers a read that must see ``uid`` at ``generation`` or later
    (None: the reader knows nothing, so only the API server answers), being deleted if ``deleting``."""
    if obj is None or generation is None:
        return False
    meta = _meta(obj)
    if meta.get("uid") != uid:
        return False
    if int(meta.get("generation") or 0) < generation:
        return False
    return not (deleting and not meta.get("deletionTimestamp"))


def class_fresh_enough(obj: Mapping[str, Any] | None, generation: int | None, first_read: bool = False) -> bool:
    """Whether the cached class ``obj`` answers a read that must see exactly ``generation``, or, for a
    run's ``first_read`` of its class, any generation (absence is still asked of the API server)."""
    if obj is None:
        return False
    if first_read:
        return True
    if not generation:
        return False
    return int(_meta(obj).get("generation") or 0) == generation
