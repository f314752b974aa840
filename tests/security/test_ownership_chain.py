"""inference_api.ownership: a label is believed only along a controller ownerReference chain to the order."""

from __future__ import annotations

from typing import Any

import pytest

from inference_api.ownership import MAX_HOPS, believed_order, by_uid, controller_reference, owned_by, owning_order

LABEL = "ai.deckhouse.io/inference-service"
NS = "team-a"


def ref(kind: str, name: str, uid: str, api_version: str = "apps/v1", controller: Any = True) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": controller}


def order_ref(name: str = "chat", uid: str = "order-uid") -> dict[str, Any]:
    return ref("InferenceService", name, uid, "ai.deckhouse.io/v1alpha1")


def obj(name: str, uid: str, *refs: dict[str, Any], label: str | None = "chat", namespace: str = NS) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid, "ownerReferences": list(refs)}
    if label is not None:
        meta["labels"] = {LABEL: label}
    return {"metadata": meta}


STS = obj("chat", "sts-uid", order_ref())
POD = obj("chat-0", "pod-uid", ref("StatefulSet", "chat", "sts-uid"))
CLAIM = obj("chat-0-gpu-x", "claim-uid", ref("Pod", "chat-0", "pod-uid", "v1"))
TEMPLATE = obj("chat-claim", "tpl-uid", order_ref())
OWNERS = by_uid(STS, POD)
ORDERS = {"order-uid": (NS, "chat")}


@pytest.mark.parametrize("thing", [TEMPLATE, STS, POD, CLAIM], ids=["template", "statefulset", "pod", "claim"])
def test_the_modules_objects_are_believed(thing: dict[str, Any]) -> None:
    assert believed_order(thing, LABEL, OWNERS) == "chat"
    assert believed_order(thing, LABEL, OWNERS, ORDERS) == "chat"
    assert owned_by(thing, "order-uid", OWNERS)
    owner = owning_order(thing, OWNERS)
    assert owner is not None
    assert (owner.namespace, owner.name, owner.uid) == (NS, "chat", "order-uid")


def test_a_label_without_an_owner_is_not_believed() -> None:
    forged = obj("chat-claim", "x", label="chat")
    assert believed_order(forged, LABEL) is None
    assert not owned_by(forged, "order-uid")


def test_no_label_no_order() -> None:
    assert believed_order(obj("chat-claim", "x", order_ref(), label=None), LABEL) is None


def test_the_label_must_name_the_order_the_chain_reaches() -> None:
    assert believed_order(obj("t", "x", order_ref("other", "other-uid"), label="chat"), LABEL) is None


def test_an_owner_reference_that_is_not_the_controller_is_not_followed() -> None:
    for controller in (False, None, "true"):
        thing = obj("t", "x", ref("InferenceService", "chat", "order-uid", "ai.deckhouse.io/v1alpha1", controller))
        assert believed_order(thing, LABEL) is None


def test_two_controllers_are_none() -> None:
    assert controller_reference(obj("t", "x", order_ref(), order_ref("chat", "u2"))) is None


def test_another_groups_inference_service_is_not_the_order() -> None:
    thing = obj("t", "x", ref("InferenceService", "chat", "order-uid", "serving.kserve.io/v1beta1"))
    assert believed_order(thing, LABEL) is None


def test_a_pod_of_an_unknown_statefulset_is_not_believed() -> None:
    assert believed_order(POD, LABEL) is None
    assert believed_order(POD, LABEL, by_uid(obj("chat", "sts-uid", label="chat"))) is None  # the tenant's own


def test_a_forged_pod_naming_the_orders_statefulset_by_name_but_not_uid() -> None:
    forged = obj("chat-9", "p9", ref("StatefulSet", "chat", "made-up-uid"))
    assert believed_order(forged, LABEL, OWNERS) is None


def test_an_owner_whose_name_or_namespace_differs_from_the_reference() -> None:
    assert believed_order(obj("chat-0", "p", ref("StatefulSet", "other", "sts-uid")), LABEL, OWNERS) is None
    elsewhere = obj("chat", "sts-uid", order_ref(), namespace="team-b")
    assert believed_order(POD, LABEL, by_uid(elsewhere)) is None


def test_an_order_uid_that_no_live_order_has() -> None:
    assert believed_order(TEMPLATE, LABEL, orders={}) is None
    assert believed_order(TEMPLATE, LABEL, orders={"order-uid": ("team-b", "chat")}) is None
    assert believed_order(TEMPLATE, LABEL, orders={"order-uid": (NS, "other")}) is None


def test_a_loop_ends() -> None:
    a = obj("a", "ua", ref("StatefulSet", "b", "ub"))
    b = obj("b", "ub", ref("StatefulSet", "a", "ua"))
    assert owning_order(a, by_uid(a, b)) is None


def test_a_chain_longer_than_the_limit_ends() -> None:
    chain = [obj("o0", "u0", order_ref())]
    for i in range(1, MAX_HOPS + 1):
        chain.append(obj(f"o{i}", f"u{i}", ref("StatefulSet", f"o{i - 1}", f"u{i - 1}")))
    owners = by_uid(*chain)
    assert owning_order(chain[MAX_HOPS - 1], owners) is not None
    assert owning_order(chain[MAX_HOPS], owners) is None


def test_malformed_objects_are_none() -> None:
    assert owning_order({}) is None
    assert owning_order({"metadata": None}) is None
    assert owning_order({"metadata": {"ownerReferences": [None, "x"]}}) is None
    assert (
        owning_order(
            obj("t", "x", {"kind": "InferenceService", "apiVersion": "ai.deckhouse.io/v1alpha1", "controller": True})
        )
        is None
    )
    assert not owned_by(TEMPLATE, "")
    assert by_uid({"metadata": {"name": "no-uid"}}) == {}
