"""The planner service's inventory view, memoized by each object's version: equal to a fresh build
after any sequence of changes, deriving only what changed, and holding nothing of deleted objects."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

import activities.inventory as inventory
from activities.builders.common import LABEL_ORDER
from activities.inventory import Memo, object_version
from benchmarks.planner_view import bump, informer_state, loaded, order_objects, shared_h100s
from worker.observer.informer import Watched
from worker.observer.inventory import (
    CLAIM_TEMPLATE,
    NODE,
    ORDER_POD,
    RESOURCE_CLAIM,
    RESOURCE_SLICE,
    InventoryInformers,
    build_view,
)


def fresh(informers: InventoryInformers) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """What a build from scratch (no memo) makes of the informers' objects now, as model dumps."""
    snapshot, claims = build_view(informers.objects(), informers.drivers)
    return snapshot.model_dump(), [vars(c) for c in claims]


def viewed(informers: InventoryInformers) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    snapshot, claims = informers.view()
    return snapshot.model_dump(), [vars(c) for c in claims]


def changed(obj: dict[str, Any], **update: Any) -> dict[str, Any]:
    """A deep copy of ``obj`` with a new resourceVersion and ``update`` applied (path "a.b" → value)."""
    out = bump(copy.deepcopy(obj))
    for path, value in update.items():
        target = out
        *parents, last = path.split("__")
        for part in parents:
            target = target.setdefault(part, {})
        target[last] = value
    return out


@pytest.fixture
def informers() -> InventoryInformers:
    return loaded(informer_state(90))  # 3 H100 nodes: 12 shared cards


def test_the_view_equals_a_fresh_build_after_adds_updates_and_deletes(informers: InventoryInformers) -> None:
    assert viewed(informers) == fresh(informers)

    def one(kind: str, i: int = 0) -> dict[str, Any]:
        return sorted(informers.objects()[kind], key=lambda o: o["metadata"]["name"])[i]

    places = shared_h100s(informers.objects()[RESOURCE_SLICE])
    added = order_objects(100, *places[3])
    # A claim with no order label: its holder is learnt from the pod reserving it (order 100's).
    del added[RESOURCE_CLAIM]["metadata"]["labels"]
    # A template planned on a device its claim is not allocated on: it reserves that place.
    added[CLAIM_TEMPLATE]["metadata"]["annotations"]["ai.deckhouse.io/planned-placements"] = json.dumps(
        [{"node": places[5][0], "devices": [places[5][1]]}, {"node": places[6][0], "devices": [places[6][1]]}]
    )
    node = one(NODE)
    steps: list[tuple[str, str, dict[str, Any]]] = [
        *((kind, "ADDED", obj) for kind, obj in added.items()),
        # The pod names another order: the unlabelled claim's holder changes with it.
        (ORDER_POD, "MODIFIED", changed(added[ORDER_POD], metadata__labels={LABEL_ORDER: "other"})),
        # A claim moved to another device and its consumed memory changed.
        (
            RESOURCE_CLAIM,
            "MODIFIED",
            changed(
                one(RESOURCE_CLAIM, 1),
                status__allocation={
                    "devices": {
                        "results": [
                            {
                                "request": "gpu",
                                "driver": "gpu.deckhouse.io",
                                "pool": places[7][0],
                                "device": places[7][1],
                                "consumedCapacity": {"gpu.deckhouse.io/memory": "10Gi"},
                            }
                        ]
                    }
                },
            ),
        ),
        # A claim being deleted, then deleted; an unallocated claim.
        (RESOURCE_CLAIM, "MODIFIED", changed(one(RESOURCE_CLAIM, 2), metadata__deletionTimestamp="t")),
        (RESOURCE_CLAIM, "DELETED", one(RESOURCE_CLAIM, 3)),
        (RESOURCE_CLAIM, "MODIFIED", changed(one(RESOURCE_CLAIM, 4), status={})),
        # A pod finished; a pod's requests changed; a pod deleted.
        (ORDER_POD, "MODIFIED", changed(one(ORDER_POD, 1), status={"phase": "Succeeded"})),
        (
            ORDER_POD,
            "MODIFIED",
            changed(one(ORDER_POD, 2), spec__containers=[{"resources": {"requests": {"cpu": "7", "memory": "3Gi"}}}]),
        ),
        (ORDER_POD, "DELETED", one(ORDER_POD, 3)),
        # A template's placements changed; one deleted; one whose annotation is not JSON.
        (
            CLAIM_TEMPLATE,
            "MODIFIED",
            changed(
                one(CLAIM_TEMPLATE, 1),
                metadata__annotations={
                    "ai.deckhouse.io/planned-placements": json.dumps(
                        [{"node": places[9][0], "devices": [places[9][1]]}]
                    )
                },
            ),
        ),
        (CLAIM_TEMPLATE, "DELETED", one(CLAIM_TEMPLATE, 4)),
        (
            CLAIM_TEMPLATE,
            "MODIFIED",
            changed(one(CLAIM_TEMPLATE, 5), metadata__annotations={"ai.deckhouse.io/planned-placements": "{"}),
        ),
        # A node's allocatable and taints changed; a node deleted and added back.
        (
            NODE,
            "MODIFIED",
            changed(node, status__allocatable={"cpu": "3", "memory": "5Gi", "pods": "7"}),
        ),
        (NODE, "MODIFIED", changed(one(NODE, 1), spec__taints=[{"key": "k", "effect": "NoSchedule"}])),
        (NODE, "DELETED", one(NODE, 2)),
        (NODE, "ADDED", changed(one(NODE, 2), metadata__uid="new")),
        # A slice gone: its devices, and what was allocated on them, leave the snapshot.
        (RESOURCE_SLICE, "DELETED", one(RESOURCE_SLICE, 0)),
    ]
    for kind, event, obj in steps:
        informers.deliver(Watched(kind, event, obj))
        assert viewed(informers) == fresh(informers), (kind, event, obj["metadata"]["name"])
        # The memo holds what one build derives: no more entries than a memo filled from scratch.
        scratch = Memo()
        build_view(informers.objects(), informers.drivers, scratch)
        assert informers.memo.keys() == scratch.keys()


def test_an_unchanged_object_is_not_derived_again(
    informers: InventoryInformers, monkeypatch: pytest.MonkeyPatch
) -> None:
    informers.view()
    calls: list[str] = []

    def counted(name: str) -> Callable[..., Any]:
        real = getattr(inventory, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return real(*args, **kwargs)

        return call

    for name in ("pod_requests", "_planned", "_claim_results", "_allocatable", "_device", "_allocation"):
        monkeypatch.setattr(inventory, name, counted(name))
    derived = informers.memo.derived
    claim = sorted(informers.objects()[RESOURCE_CLAIM], key=lambda o: o["metadata"]["name"])[0]
    informers.deliver(Watched(RESOURCE_CLAIM, "MODIFIED", bump(claim)))
    informers.view()
    # The changed claim alone: its results, its allocation, its order claim.
    assert sorted(calls) == ["_allocation", "_claim_results"]
    assert informers.memo.derived - derived == 3
    calls.clear()
    pod = informers.objects()[ORDER_POD][0]
    informers.deliver(Watched(ORDER_POD, "MODIFIED", changed(pod, status={"phase": "Succeeded"})))
    informers.view()
    assert calls == []  # a finished pod holds nothing: its requests are not even read


def test_a_deleted_objects_memo_entries_are_dropped(informers: InventoryInformers) -> None:
    informers.view()
    before = len(informers.memo)
    places = shared_h100s(informers.objects()[RESOURCE_SLICE])
    added = order_objects(99, *places[0])
    for kind, obj in added.items():
        informers.deliver(Watched(kind, "ADDED", obj))
    informers.view()
    versions = {object_version(obj) for obj in added.values()}

    def held() -> set[Any]:
        keys = informers.memo.keys()
        return {part for key in keys if isinstance(key, tuple) for part in key} & versions

    assert held() == versions
    assert len(informers.memo) > before
    for kind, obj in added.items():
        informers.deliver(Watched(kind, "DELETED", obj))
    informers.view()
    assert held() == set()
    assert len(informers.memo) == before


def test_the_memo_keeps_what_a_build_used() -> None:
    memo = Memo()
    assert memo.get("a", lambda: 1) == 1
    assert memo.get("a", lambda: 2) == 1  # the same build
    memo.sweep()
    assert memo.get("a", lambda: 3) == 1  # the next build: kept
    assert memo.get("b", lambda: 4) == 4
    memo.sweep()
    memo.sweep()  # a build that used nothing
    assert len(memo) == 0
    assert memo.get(None, lambda: 5) == 5  # no version: derived, not kept
    assert len(memo) == 0
    assert memo.derived == 3
