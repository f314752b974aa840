"""The observer's ownership checks (worker/observer/decisions.py): an object is an order's by uid only."""

from __future__ import annotations

from typing import Any

from worker.observer import decisions as d

UID = "0b6a7f5e-1111-4c3a-9d2e-5f0c1a2b3c4d"


def obj(owner_uid: str | None, labelled: bool = True, controller: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "support-llm", "namespace": "support"}
    if labelled:
        meta["labels"] = {"ai.deckhouse.io/inference-service": "support-llm"}
    if owner_uid is not None:
        meta["ownerReferences"] = [
            {"kind": "InferenceService", "name": "support-llm", "uid": owner_uid, "controller": controller}
        ]
    return {"metadata": meta}


def test_owned_by_needs_the_controller_uid() -> None:
    assert d.owned_by(obj(UID), UID)
    assert not d.owned_by(obj(None), UID), "labels alone made an object the order's"
    assert not d.owned_by(obj("another"), UID)
    assert not d.owned_by(obj(UID, controller=False), UID)
    assert not d.owned_by(obj(None), "")


def test_a_labelled_object_without_an_order_owner_claims_an_order() -> None:
    assert d.claims_an_order(obj(None))
    assert not d.claims_an_order(obj(UID))
    assert not d.claims_an_order(obj(None, labelled=False))
