"""The observer's ownership checks (worker/observer/decisions.py): an object is an order's by uid only."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.client import Client

from activities.builders.common import LABEL_MANAGED_BY, LABEL_ORDER, MANAGED_BY
from inference_api.observation import OrderSignal
from tests.observer import test_dispatch as dispatch
from worker.observer import decisions as d
from worker.observer import informer as inf
from worker.observer.informer import Listed, Watched

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


# ------------------------------------------------------------------ the observer's dispatch, in process


@pytest.mark.temporal
async def test_a_decoy_with_the_modules_labels_signals_nothing(temporal_client: Client) -> None:
    obs = dispatch.observer(temporal_client)
    decoy_hpa = dispatch.hpa("u-chat", desired=3)
    decoy_hpa["metadata"].pop("ownerReferences")
    obs.handle(Listed(inf.PRIORITY_CLASS, [{"metadata": {"name": "high"}, "value": 1000}]))
    obs.handle(Listed(inf.HPA, [decoy_hpa]))
    obs.handle(Listed(inf.CLASS, [{"metadata": {"name": "default-llm", "generation": 1, "resourceVersion": "1"}}]))
    obs.handle(Listed(inf.ORDER, [dispatch.order("chat", "u-chat", constraints={"priorityClassName": "high"})]))
    await dispatch.settle()
    first = dispatch.sent(obs)
    assert first == {("chat", OrderSignal.SPEC_CHANGED): [1]}, "a decoy HPA was read as the order's scaling"

    decoy_service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "chat",
            "namespace": "team",
            "resourceVersion": "5",
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_ORDER: "chat"},
        },
    }
    obs.handle(Listed(inf.SERVICE, [decoy_service]))
    obs.handle(Watched(inf.SERVICE, d.DELETED, decoy_service))
    await dispatch.settle()
    assert dispatch.sent(obs) == {}, "a decoy's deletion was taken for the order's"
