"""The same CRD fixtures, judged by the real API server: what the CEL library said, the server says."""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

import pytest
from kubernetes.client import ApiClient, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from devstack.cluster.launcher import LocalCluster
from inference_api.types import GROUP, VERSION
from tests.crd.cases import ALL_CASES, HF, PRUNED_ORDER_FIELDS, Case, order

pytestmark = pytest.mark.cluster


def _create(api: CustomObjectsApi, case: Case, namespace: str) -> Any:
    body = copy.deepcopy(case.body)
    body["metadata"]["name"] = f"{case.id[:40]}-{uuid.uuid4().hex[:5]}"
    if case.kind == "InferenceService":
        return api.create_namespaced_custom_object(GROUP, VERSION, namespace, "inferenceservices", body)
    return api.create_cluster_custom_object(GROUP, VERSION, "inferenceserviceclasses", body)


@pytest.fixture(scope="module")
def crd_namespace(local_cluster: LocalCluster) -> str:
    return local_cluster.create_namespace(f"crd-fixtures-{uuid.uuid4().hex[:5]}", users=())


@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.id)
def test_api_server_judges_the_fixture(kube_admin: ApiClient, crd_namespace: str, case: Case) -> None:
    api = CustomObjectsApi(kube_admin)
    if case.error is None:
        created = _create(api, case, crd_namespace)
        assert created["metadata"]["uid"]
        return
    with pytest.raises(ApiException) as refused:
        _create(api, case, crd_namespace)
    assert refused.value.status == 422
    message = json.loads(refused.value.body or "{}")["message"]
    assert case.error in message, message


def test_fields_of_an_older_cut_are_pruned(kube_admin: ApiClient, crd_namespace: str) -> None:
    api = CustomObjectsApi(kube_admin)
    body = order(HF, **PRUNED_ORDER_FIELDS)
    body["metadata"]["name"] = f"pruned-{uuid.uuid4().hex[:5]}"
    created: Any = api.create_namespaced_custom_object(GROUP, VERSION, crd_namespace, "inferenceservices", body)
    assert set(created["spec"]) == {"inferenceServiceClassName", "model"}


def test_fields_of_an_older_cut_are_refused_under_strict_validation(kube_admin: ApiClient, crd_namespace: str) -> None:
    api = CustomObjectsApi(kube_admin)
    body = order(HF, **PRUNED_ORDER_FIELDS)
    body["metadata"]["name"] = f"strict-{uuid.uuid4().hex[:5]}"
    with pytest.raises(ApiException) as refused:
        api.create_namespaced_custom_object(
            GROUP, VERSION, crd_namespace, "inferenceservices", body, field_validation="Strict"
        )
    message = json.loads(refused.value.body or "{}")["message"]
    for name in PRUNED_ORDER_FIELDS:
        assert f'unknown field "spec.{name}"' in message, message


@pytest.mark.parametrize(
    ("name", "refusal"),
    [
        ("qwen2.5-chat", "it names the order's Service, which must be an RFC 1035 label"),
        ("a" * 53, "must be at most 52 characters"),
        ("9b-chat", "must start with a letter"),
    ],
)
def test_api_server_refuses_order_names_that_cannot_name_its_objects(
    kube_admin: ApiClient, crd_namespace: str, name: str, refusal: str
) -> None:
    api = CustomObjectsApi(kube_admin)
    body = order(HF)
    body["metadata"]["name"] = name
    with pytest.raises(ApiException) as refused:
        api.create_namespaced_custom_object(GROUP, VERSION, crd_namespace, "inferenceservices", body)
    assert refused.value.status == 422
    message = json.loads(refused.value.body or "{}")["message"]
    assert refusal in message, message


def test_api_server_accepts_the_longest_order_name(kube_admin: ApiClient, crd_namespace: str) -> None:
    api = CustomObjectsApi(kube_admin)
    body = order(HF)
    body["metadata"]["name"] = f"n{uuid.uuid4().hex[:5]}".ljust(52, "x")
    created: Any = api.create_namespaced_custom_object(GROUP, VERSION, crd_namespace, "inferenceservices", body)
    assert len(created["metadata"]["name"]) == 52
