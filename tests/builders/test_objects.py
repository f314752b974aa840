"""The whole set of an order's objects: names, labels, owners, apply order, secrets, storage class."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from activities.builders import (
    FIELD_MANAGER,
    DesiredObject,
    ObjectNames,
    auth_secret_name,
    build_auth_secret,
    desired_objects,
    new_token,
    settled_region_kept_message,
    storage_class_kept,
)
from activities.builders.common import parse_catalog_source, parse_quantity
from inference_api.types import EndpointType
from tests import factories as f

OWNER = {
    "apiVersion": "ai.deckhouse.io/v1alpha1",
    "kind": "InferenceService",
    "name": "support-llm",
    "uid": f.UID,
    "controller": True,
    "blockOwnerDeletion": True,
}


def _kinds(objects: list[DesiredObject]) -> list[tuple[str, str]]:
    return [(o.kind, o.name) for o in objects]


def test_external_token_cert_manager_objects_in_apply_order() -> None:
    objects = desired_objects(f.inputs(), auth_token=f.TOKEN)
    assert _kinds(objects) == [
        ("Secret", "support-llm-auth"),
        ("NetworkPolicy", "support-llm"),
        ("ResourceClaimTemplate", "support-llm-claim"),
        ("Service", "support-llm"),
        ("StatefulSet", "support-llm"),
        ("HorizontalPodAutoscaler", "support-llm"),
        ("Ingress", "support-llm"),
    ]
    assert [o.create_only for o in objects] == [True, False, False, False, False, False, False]
    assert all(o.namespace == "support" for o in objects)
    assert FIELD_MANAGER == "ai-inference"


def test_cluster_local_none_has_no_secret_no_ingress_no_hpa() -> None:
    objects = desired_objects(f.inputs(the_class=f.cluster_local_none()), auth_token=new_token())
    assert _kinds(objects) == [
        ("NetworkPolicy", "support-llm"),
        ("ResourceClaimTemplate", "support-llm-claim"),
        ("Service", "support-llm"),
        ("StatefulSet", "support-llm"),
    ]


def test_without_a_token_the_secret_is_left_out() -> None:
    objects = desired_objects(f.inputs())
    assert "Secret" not in [o.kind for o in objects]


def test_custom_certificate_copy_comes_before_the_ingress() -> None:
    the_class = f.service_class(
        exposurePolicy={
            "type": "External",
            "authentication": "None",
            "https": {"mode": "CustomCertificate", "customCertificate": {"secretName": "wildcard"}},
        }
    )
    marked = {"name": "wildcard", "labels": {"ai.deckhouse.io/custom-certificate": "true"}}
    source = {"data": {"tls.crt": "Qw==", "tls.key": "Sw=="}, "metadata": marked}
    objects = desired_objects(f.inputs(the_class=the_class), custom_certificate=source)
    assert _kinds(objects)[0] == ("Secret", "support-llm-tls")
    assert _kinds(objects)[-1] == ("Ingress", "support-llm")
    # A certificate handed in for a class that does not use one is ignored.
    objects = desired_objects(f.inputs(), custom_certificate=source)
    assert ("Secret", "support-llm-tls") not in _kinds(objects)


@pytest.mark.parametrize(
    "the_class",
    [f.external_token_certmanager(), f.cluster_local_none(), f.strict_class()],
    ids=["external-token", "cluster-local", "strict"],
)
def test_every_object_is_owned_labelled_and_named_after_the_order(the_class: object) -> None:
    objects = desired_objects(f.inputs(the_class=the_class), auth_token=f.TOKEN)  # type: ignore[arg-type]
    for obj in objects:
        meta = obj.body["metadata"]
        assert meta["ownerReferences"] == [OWNER], obj
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "ai-inference"
        assert meta["labels"]["app.kubernetes.io/name"] == "support-llm"
        assert meta["labels"]["ai.deckhouse.io/inference-service"] == "support-llm"
        assert meta["name"].startswith("support-llm")
        assert obj.body["apiVersion"] == obj.api_version
        assert obj.body["kind"] == obj.kind


def test_the_token_appears_only_in_the_secrets_data() -> None:
    objects = desired_objects(f.inputs(), auth_token=f.TOKEN)
    secret, *rest = objects
    assert base64.b64decode(secret.body["data"]["token"]).decode() == f.TOKEN
    assert secret.body["type"] == "Opaque"
    assert "stringData" not in secret.body
    for obj in rest:
        assert f.TOKEN not in json.dumps(obj.body)
    encoded = secret.body["data"]["token"]
    without_data = {k: v for k, v in secret.body.items() if k != "data"}
    assert f.TOKEN not in json.dumps(without_data)
    assert encoded not in json.dumps(without_data)
    # Logging a DesiredObject never prints a body.
    assert f.TOKEN not in repr(objects)
    assert encoded not in repr(objects)


def test_auth_secret_only_for_token_classes() -> None:
    assert build_auth_secret(f.inputs(the_class=f.cluster_local_none()), f.TOKEN) is None
    assert auth_secret_name(f.inputs(the_class=f.cluster_local_none())) is None
    assert auth_secret_name(f.inputs()) == "support-llm-auth"
    with pytest.raises(ValueError, match="must not be empty"):
        build_auth_secret(f.inputs(), "")


def test_new_token_is_random_and_header_safe() -> None:
    tokens = {new_token() for _ in range(50)}
    assert len(tokens) == 50
    for token in tokens:
        assert len(token) >= 43
        assert re.fullmatch(r"[A-Za-z0-9_-]+", token)


def test_names() -> None:
    names = ObjectNames("a")
    assert (names.statefulset, names.service, names.ingress, names.autoscaler) == ("a", "a", "a", "a")
    assert names.network_policy == "a"
    assert (names.auth_secret, names.tls_secret, names.claim_template) == ("a-auth", "a-tls", "a-claim")


def test_order_without_uid_cannot_own_anything() -> None:
    the_order = f.order()
    the_order.metadata.uid = None
    with pytest.raises(ValueError, match="uid"):
        f.inputs(the_order=the_order)


def test_storage_class_kept() -> None:
    def standing(storage_class: str | None) -> dict[str, Any]:
        spec: dict[str, Any] = {"resources": {"requests": {"storage": "40Gi"}}}
        if storage_class:
            spec["storageClassName"] = storage_class
        return {"spec": {"volumeClaimTemplates": [{"metadata": {"name": "model"}, "spec": spec}]}}

    new_class = f.external_token_certmanager(modelStorageClassName="new-ssd")
    assert storage_class_kept(standing("old-hdd"), new_class) == ("old-hdd", "new-ssd")
    assert storage_class_kept(standing(None), new_class) == (None, "new-ssd")
    assert storage_class_kept(standing("new-ssd"), new_class) is None
    assert storage_class_kept(None, new_class) is None
    assert storage_class_kept(standing("old-hdd"), f.external_token_certmanager()) is None
    message = settled_region_kept_message("old-hdd", "new-ssd")
    assert "old-hdd" in message
    assert "new-ssd" in message
    assert "delete" in message
    assert "default" in settled_region_kept_message(None, "new-ssd")


def test_standing_storage_class_is_kept_in_the_desired_statefulset() -> None:
    template = {"metadata": {"name": "model"}, "spec": {"storageClassName": "old-hdd"}}
    the_inputs = f.inputs(
        the_class=f.external_token_certmanager(modelStorageClassName="new-ssd"),
        standing_statefulset={"spec": {"volumeClaimTemplates": [template]}},
    )
    sts = next(o for o in desired_objects(the_inputs) if o.kind == "StatefulSet")
    assert sts.body["spec"]["volumeClaimTemplates"] == [template]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("40Gi", 40 * 2**30), ("40960Mi", 40 * 2**30), ("1k", 1000), ("500m", 0.5), ("2", 2), ("1e3", 1000)],
)
def test_parse_quantity(text: str, expected: float) -> None:
    assert parse_quantity(text) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("hf://Qwen/Qwen2.5-7B", ("Qwen/Qwen2.5-7B", None)),
        ("hf://Qwen/Qwen2.5-7B@v1", ("Qwen/Qwen2.5-7B", "v1")),
        ("https://huggingface.co/Qwen/Qwen2.5-7B/", ("Qwen/Qwen2.5-7B", None)),
        ("https://huggingface.co/Qwen/Qwen2.5-7B/tree/main", ("Qwen/Qwen2.5-7B", "main")),
        ("Qwen/Qwen2.5-7B", ("Qwen/Qwen2.5-7B", None)),
    ],
)
def test_parse_catalog_source(source: str, expected: tuple[str, str | None]) -> None:
    assert parse_catalog_source(source) == expected


_names = st.from_regex(r"[a-z][a-z0-9-]{0,20}[a-z0-9]", fullmatch=True)


@settings(max_examples=60, deadline=None)
@given(
    name=_names,
    namespace=_names,
    share=st.integers(1, 100),
    devices=st.integers(1, 8),
    volume=st.integers(1, 2000),
    endpoint=st.sampled_from(list(EndpointType)),
    klass=st.sampled_from(["external", "local", "strict"]),
)
def test_any_order_builds_deterministic_owned_objects_and_never_leaks_the_token(
    name: str, namespace: str, share: int, devices: int, volume: int, endpoint: EndpointType, klass: str
) -> None:
    the_class = {
        "external": f.external_token_certmanager,
        "local": f.cluster_local_none,
        "strict": f.strict_class,
    }[klass]()
    the_inputs = f.inputs(
        the_order=f.order(name=name, namespace=namespace),
        the_class=the_class,
        the_plan=f.plan(share=share, device_count=devices, volume_gib=volume, memory_request_mib=1000),
        endpoint_type=endpoint,
    )
    token = new_token()
    first = desired_objects(the_inputs, auth_token=token)
    second = desired_objects(the_inputs, auth_token=token)
    assert [json.dumps(o.body) for o in first] == [json.dumps(o.body) for o in second]
    for obj in first:
        assert obj.body["metadata"]["ownerReferences"][0]["uid"] == f.UID
        assert obj.body["metadata"]["namespace"] == namespace
        if obj.kind != "Secret":
            assert token not in json.dumps(obj.body)
    claim = next(o for o in first if o.kind == "ResourceClaimTemplate").body
    exactly = claim["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert ("capacity" in exactly) == (share < 100)
