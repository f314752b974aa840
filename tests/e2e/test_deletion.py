"""Deleting an order: garbage collection takes what it owns, the user's own Secret stays.

A gated Hugging Face order on the default e2e class (External + Token + CertManager, an HPA)
owns its auth Secret, ResourceClaimTemplate, Service, StatefulSet, HorizontalPodAutoscaler and
Ingress, all through ``ownerReferences``. The ``hf-token`` Secret it reads the model token from
belongs to the user: the order names it, never owns it, so it outlives the order untouched.
Along the way, the endpoint's bearer token must not appear in any Event of the namespace.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from activities.kube import Applier
from inference_api.payloads import order_workflow_id
from inference_api.types import GROUP, VERSION
from tests.e2e.stand import Stand

pytestmark = [pytest.mark.cluster, pytest.mark.temporal]

ORDER = "gated-llm"
GATED_REPO = "meta-llama/Llama-3.2-1B-Instruct"

# (apiVersion, kind, name) of everything the order owns.
OWNED: list[tuple[str, str, str]] = [
    ("v1", "Secret", f"{ORDER}-auth"),
    ("resource.k8s.io/v1", "ResourceClaimTemplate", f"{ORDER}-claim"),
    ("v1", "Service", ORDER),
    ("apps/v1", "StatefulSet", ORDER),
    ("autoscaling/v2", "HorizontalPodAutoscaler", ORDER),
    ("networking.k8s.io/v1", "Ingress", ORDER),
]


def _events_text(stand: Stand) -> str:
    """Every Event of the namespace, whole (reason, message, annotations, source), as JSON."""
    events = stand.core.list_namespaced_event(stand.namespace).items
    return json.dumps([stand.api.sanitize_for_serialization(e) for e in events])


def _assert_token_in_no_event(stand: Stand, token: str) -> None:
    text = _events_text(stand)
    assert ORDER in text, "no Event of the order was read: the check would prove nothing"
    assert token not in text
    assert base64.b64encode(token.encode()).decode() not in text


async def test_deleting_the_order_garbage_collects_what_it_owns_and_keeps_the_users_secret(stand: Stand) -> None:
    hf_value = f"hf_e2e_{uuid.uuid4().hex}"
    hf_data = {"token": base64.b64encode(hf_value.encode()).decode()}
    stand.core.create_namespaced_secret(
        stand.namespace,
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token"}, "type": "Opaque", "data": hf_data},
    )
    created = stand.create_order(
        ORDER,
        {"src": "HuggingFace", "ref": {"name": GATED_REPO}, "authSecretRef": {"name": "hf-token", "key": "token"}},
    )
    uid = created["metadata"]["uid"]
    await stand.until_phase(ORDER, "Ready")

    applier = Applier(stand.api)

    def get(api_version: str, kind: str, name: str) -> dict[str, Any] | None:
        return applier.get(api_version, kind, name, stand.namespace)

    # Everything is there and owned by the order; the user's Secret is not.
    for api_version, kind, name in OWNED:
        obj = get(api_version, kind, name)
        assert obj is not None, f"{kind} {name} missing"
        assert [o["uid"] for o in obj["metadata"].get("ownerReferences") or []] == [uid], f"{kind} {name}"
    users = stand.core.read_namespaced_secret("hf-token", stand.namespace)
    assert not users.metadata.owner_references

    # The endpoint token, read as the administrator, is in no Event of the namespace.
    auth_name = stand.status(ORDER)["authSecretName"]
    auth = stand.core.read_namespaced_secret(auth_name, stand.namespace)
    token = base64.b64decode(auth.data["token"]).decode()
    assert token
    _assert_token_in_no_event(stand, token)

    # Delete: the workflow's teardown runs, then garbage collection takes every owned object.
    handle = stand.client.get_workflow_handle(order_workflow_id(stand.namespace, ORDER, uid))
    stand.custom.delete_namespaced_custom_object(GROUP, VERSION, stand.namespace, "inferenceservices", ORDER)
    assert await asyncio.wait_for(handle.result(), 60) == "deleted"
    await stand.until(lambda: stand.order(ORDER) is None, what="order gone")

    def remaining() -> list[str]:
        return [f"{kind}/{name}" for api_version, kind, name in OWNED if get(api_version, kind, name) is not None]

    await stand.until(lambda: not remaining(), timeout=90, what=lambda: f"owned objects gone (left: {remaining()})")

    # The user's Hugging Face Secret outlives the order, its data unchanged.
    try:
        kept = stand.core.read_namespaced_secret("hf-token", stand.namespace)
    except ApiException as err:  # pragma: no cover - the failure this test exists for
        raise AssertionError(f"the user's hf-token Secret was deleted with the order (HTTP {err.status})") from err
    assert kept.data == hf_data
    assert kept.type == "Opaque"
    assert not kept.metadata.owner_references
    assert kept.metadata.deletion_timestamp is None

    # Nor did the token reach an Event during the teardown.
    _assert_token_in_no_event(stand, token)
