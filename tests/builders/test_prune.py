"""Desired state: what an order no longer wants is pruned, and only what the module made for it."""

from __future__ import annotations

from typing import Any

from activities.builders import desired_objects
from activities.builders.common import ANNOTATION_PRUNED_FOR, LABEL_MANAGED_BY, LABEL_ORDER, MANAGED_BY, ObjectNames
from activities.builders.objects import (
    OWNED_KINDS,
    possible_names,
    pruned_set_digest,
    unwanted_objects,
    wanted_names,
    wanted_set_digest,
    with_annotation,
)
from tests import factories as f


def standing(
    kind: str, name: str, *, uid: str = f.UID, order: str = "support-llm", ours: bool = True
) -> dict[str, Any]:
    labels = {LABEL_ORDER: order, LABEL_MANAGED_BY: MANAGED_BY} if ours else {"app": "mine"}
    return {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {
            "name": name,
            "labels": labels,
            "ownerReferences": [{"uid": uid, "controller": True, "kind": "InferenceService", "name": order}],
        },
    }


def test_external_to_cluster_local_prunes_the_ingress_and_keeps_the_rest() -> None:
    external = f.inputs(the_class=f.external_token_certmanager())
    was = {(d.kind, d.name) for d in desired_objects(external, auth_token=f.TOKEN)}
    assert ("Ingress", "support-llm") in was
    local = f.inputs(the_class=f.cluster_local_none())
    wanted = wanted_names(desired_objects(local), local.service_class, local.names)
    objects = [standing(kind, name) for kind, name in sorted(was)]
    pruned = {(kind, name) for _, kind, name in unwanted_objects(objects, wanted, "support-llm", f.UID)}
    # ClusterLocal + no authentication: the Ingress and the auth Secret go, the workload stays.
    assert ("Ingress", "support-llm") in pruned
    assert ("Secret", "support-llm-auth") in pruned
    assert ("StatefulSet", "support-llm") not in pruned
    assert ("Service", "support-llm") not in pruned


def test_the_auth_secret_stays_wanted_while_the_class_asks_for_a_token() -> None:
    inputs = f.inputs(the_class=f.external_token_certmanager())
    # The Secret exists already: desired_objects leaves it out (never rewritten), yet it is wanted.
    desired = desired_objects(inputs, auth_token=None)
    assert ("Secret", "support-llm-auth") not in {(d.kind, d.name) for d in desired}
    wanted = wanted_names(desired, inputs.service_class, inputs.names)
    assert unwanted_objects([standing("Secret", "support-llm-auth")], wanted, "support-llm", f.UID) == []


def test_only_what_the_module_made_for_this_order_is_ever_pruned() -> None:
    wanted: set[tuple[str, str]] = set()
    users_secret = standing("Secret", "hf-token", ours=False)
    other_order = standing("Ingress", "other", order="other")
    earlier_order_same_name = standing("Ingress", "support-llm", uid="another-uid")
    ours = standing("Ingress", "support-llm")
    pruned = unwanted_objects([users_secret, other_order, earlier_order_same_name, ours], wanted, "support-llm", f.UID)
    assert pruned == [("v1", "Ingress", "support-llm")]


def test_every_kind_an_order_can_own_is_listed_for_pruning() -> None:
    from activities.builders.objects import OWNED_KINDS

    marked = {"metadata": {"labels": {"ai.deckhouse.io/custom-certificate": "true"}}}
    certificate = {"data": {"tls.crt": "Qw==", "tls.key": "Sw=="}} | marked
    custom = f.service_class(
        exposurePolicy={
            "type": "External",
            "authentication": "Token",
            "https": {"mode": "CustomCertificate", "customCertificate": {"secretName": "wildcard"}},
        },
        scalingPolicy={"minReplicas": 1, "maxReplicas": 2},
    )
    built = {
        (d.api_version, d.kind)
        for the_class in (f.external_token_certmanager(), f.cluster_local_none(), custom)
        for d in desired_objects(f.inputs(the_class=the_class), auth_token=f.TOKEN, custom_certificate=certificate)
    }
    assert ("networking.k8s.io/v1", "NetworkPolicy") in built
    assert built == set(OWNED_KINDS)


def test_the_wanted_set_digest_is_the_set_and_the_release() -> None:
    wanted = {("Service", "support-llm"), ("Ingress", "support-llm"), ("Secret", "support-llm-auth")}
    digest = wanted_set_digest(wanted, "release-a")
    assert digest == wanted_set_digest(set(sorted(wanted, reverse=True)), "release-a")  # a set: order is no matter
    assert digest != wanted_set_digest(wanted - {("Ingress", "support-llm")}, "release-a")  # a kind gone
    assert digest != wanted_set_digest({("Service", "support-llm-2"), *wanted}, "release-a")  # a name more
    assert digest != wanted_set_digest(wanted, "release-b")  # an upgrade prunes once
    # Kind and name are kept apart: a name that ends like another kind does not collide.
    assert wanted_set_digest({("Service", "a/b")}, "r") != wanted_set_digest({("Service/a", "b")}, "r")


def test_the_recorded_digest_is_read_from_the_statefulset() -> None:
    statefulset = {"metadata": {"annotations": {ANNOTATION_PRUNED_FOR: "abc123"}}}
    assert pruned_set_digest(statefulset) == "abc123"
    assert pruned_set_digest({"metadata": {"annotations": {}}}) is None
    assert pruned_set_digest({"metadata": {}}) is None
    assert pruned_set_digest(None) is None


def test_every_name_an_order_can_own_is_a_possible_name() -> None:
    """The first apply's prune reads these names only: every kind listed for pruning has its names, and
    every object the builders make for an order, under any class, is among them."""
    possible = possible_names(ObjectNames("support-llm"))
    assert {kind for kind, _ in possible} == {kind for _, kind in OWNED_KINDS}
    for cls in (f.external_token_certmanager(), f.cluster_local_none()):
        for wanted in desired_objects(f.inputs(the_class=cls), auth_token=f.TOKEN):
            owned = (wanted.api_version, wanted.kind) in OWNED_KINDS
            assert (wanted.kind, wanted.name) in possible or not owned, (wanted.kind, wanted.name)


def test_an_annotation_is_added_to_a_copy() -> None:
    body: dict[str, Any] = {"kind": "StatefulSet", "metadata": {"name": "x", "annotations": {"a": "1"}}, "spec": {}}
    out = with_annotation(body, "b", "2")
    assert out["metadata"]["annotations"] == {"a": "1", "b": "2"}
    assert body["metadata"]["annotations"] == {"a": "1"}  # the built object is left as built
    assert with_annotation({"metadata": {}}, "b", "2")["metadata"] == {"annotations": {"b": "2"}}
