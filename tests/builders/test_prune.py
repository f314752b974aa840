"""Desired state: what an order no longer wants is pruned, and only what the module made for it."""

from __future__ import annotations

from typing import Any

from activities.builders import desired_objects
from activities.builders.common import LABEL_MANAGED_BY, LABEL_ORDER, MANAGED_BY
from activities.builders.objects import unwanted_objects, wanted_names
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
