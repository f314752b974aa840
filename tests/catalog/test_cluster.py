"""The catalog client against a real kube-apiserver: the Kubernetes transport and the REST fallback.

Uses the session fixtures of tests/fixtures/cluster.py (``local_cluster``, ``kube_admin``,
``make_namespace``): a real control plane with the stand-in Model / ClusterModel CRDs installed
from deploy/crds/stand-ins/.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes.client import ApiClient, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from activities.catalog import (
    PLURALS,
    CatalogPath,
    CatalogUnavailableError,
    KubernetesCatalogReader,
    lookup_model,
)
from devstack.cluster.launcher import LocalCluster
from devstack.standins.catalog_service import CatalogServiceProcess, free_port
from inference_api.catalog_types import CATALOG_GROUP, CATALOG_VERSION, ModelFacts
from inference_api.reasons import Reason
from inference_api.types import ModelKind, ModelRef, ModelScope
from tests.factories import E5_FACTS, QWEN_FACTS, QWEN_SOURCE, make_settings

pytestmark = pytest.mark.cluster


def _suffix() -> str:
    # The cluster is shared by the whole session: every object here gets a name of its own.
    return uuid.uuid4().hex[:6]


class Catalog:
    """Creates Model / ClusterModel objects (with status) as the ai-models module would."""

    def __init__(self, api: ApiClient) -> None:
        self.objects = CustomObjectsApi(api)
        self.created: list[tuple[ModelKind, str, str | None]] = []

    def create(
        self,
        kind: ModelKind,
        name: str,
        namespace: str | None = None,
        *,
        phase: str = "Ready",
        facts: ModelFacts | None = None,
        source: str | None = None,
    ) -> None:
        body: dict[str, Any] = {
            "apiVersion": f"{CATALOG_GROUP}/{CATALOG_VERSION}",
            "kind": kind.value,
            "metadata": {"name": name, **({"namespace": namespace} if namespace else {})},
            "spec": {"source": source} if source else {},
        }
        plural = PLURALS[kind]
        if namespace is None:
            self.objects.create_cluster_custom_object(CATALOG_GROUP, CATALOG_VERSION, plural, body)
        else:
            self.objects.create_namespaced_custom_object(CATALOG_GROUP, CATALOG_VERSION, namespace, plural, body)
        self.created.append((kind, name, namespace))
        self.set_status(kind, name, namespace, phase=phase, facts=facts)

    def set_status(
        self, kind: ModelKind, name: str, namespace: str | None, *, phase: str, facts: ModelFacts | None = None
    ) -> None:
        # status is a subresource: what a create carries there is dropped, so it is written apart.
        status: dict[str, Any] = {"phase": phase}
        if facts is not None:
            status["facts"] = facts.model_dump(mode="json", exclude_none=True)
        plural = PLURALS[kind]
        if namespace is None:
            self.objects.patch_cluster_custom_object_status(
                CATALOG_GROUP, CATALOG_VERSION, plural, name, {"status": status}
            )
        else:
            self.objects.patch_namespaced_custom_object_status(
                CATALOG_GROUP, CATALOG_VERSION, namespace, plural, name, {"status": status}
            )

    def cleanup(self) -> None:
        for kind, name, namespace in self.created:
            try:
                if namespace is None:
                    self.objects.delete_cluster_custom_object(CATALOG_GROUP, CATALOG_VERSION, PLURALS[kind], name)
                else:
                    self.objects.delete_namespaced_custom_object(
                        CATALOG_GROUP, CATALOG_VERSION, namespace, PLURALS[kind], name
                    )
            except ApiException as err:
                if err.status != 404:
                    raise


@pytest.fixture
def admin_api(kube_admin: ApiClient) -> ApiClient:
    return kube_admin


@pytest.fixture
def catalog(admin_api: ApiClient) -> Iterator[Catalog]:
    objects = Catalog(admin_api)
    yield objects
    objects.cleanup()


@pytest.fixture
def team_namespace(make_namespace: Callable[..., str]) -> str:
    return make_namespace("catalog")


async def test_kubernetes_transport_reads_a_ready_cluster_model(admin_api: ApiClient, catalog: Catalog) -> None:
    name = f"qwen-{_suffix()}"
    catalog.create(ModelKind.CLUSTER_MODEL, name, facts=QWEN_FACTS, source=QWEN_SOURCE)
    outcome = await lookup_model(
        ModelRef(kind=ModelKind.CLUSTER_MODEL, name=name),
        "support",
        make_settings(transport="Kubernetes"),
        KubernetesCatalogReader(admin_api),
    )
    assert outcome.ok
    assert outcome.answeredBy is CatalogPath.KUBERNETES
    assert outcome.resolved is not None
    assert outcome.resolved.scope is ModelScope.CLUSTER
    assert outcome.resolved.facts == QWEN_FACTS
    assert outcome.resolved.source == QWEN_SOURCE
    assert outcome.resolved.servedName == QWEN_FACTS.servedName


async def test_kubernetes_transport_model_in_the_orders_namespace(
    admin_api: ApiClient, catalog: Catalog, team_namespace: str
) -> None:
    name = f"e5-{_suffix()}"
    catalog.create(ModelKind.MODEL, name, team_namespace, facts=E5_FACTS)
    reader = KubernetesCatalogReader(admin_api)
    settings = make_settings(transport="Kubernetes")
    own = await lookup_model(ModelRef(kind=ModelKind.MODEL, name=name), team_namespace, settings, reader)
    named = await lookup_model(
        ModelRef(kind=ModelKind.MODEL, name=name, namespace=team_namespace), "other", settings, reader
    )
    elsewhere = await lookup_model(ModelRef(kind=ModelKind.MODEL, name=name), "default", settings, reader)
    for outcome in (own, named):
        assert outcome.ok
        assert outcome.resolved is not None
        assert outcome.resolved.scope is ModelScope.NAMESPACE
        assert outcome.resolved.servedName == name
        assert team_namespace not in outcome.resolved.model_dump_json()
    assert elsewhere.reason is Reason.MODEL_NOT_FOUND


async def test_kubernetes_transport_not_found(admin_api: ApiClient) -> None:
    outcome = await lookup_model(
        ModelRef(kind=ModelKind.CLUSTER_MODEL, name=f"absent-{_suffix()}"),
        "support",
        make_settings(transport="Kubernetes"),
        KubernetesCatalogReader(admin_api),
    )
    assert outcome.reason is Reason.MODEL_NOT_FOUND
    assert outcome.answeredBy is CatalogPath.KUBERNETES


async def test_not_ready_then_ready_on_the_object(admin_api: ApiClient, catalog: Catalog) -> None:
    name = f"warming-{_suffix()}"
    catalog.create(ModelKind.CLUSTER_MODEL, name, phase="Pending", facts=QWEN_FACTS)
    ref = ModelRef(kind=ModelKind.CLUSTER_MODEL, name=name)
    settings = make_settings(transport="Kubernetes", requeue=9)
    reader = KubernetesCatalogReader(admin_api)
    first = await lookup_model(ref, "support", settings, reader)
    assert first.reason is Reason.MODEL_NOT_READY
    assert first.requeueAfterSeconds == 9
    catalog.set_status(ModelKind.CLUSTER_MODEL, name, None, phase="Ready", facts=QWEN_FACTS)
    second = await lookup_model(ref, "support", settings, reader)
    assert second.ok


async def test_rest_absent_reads_the_object_from_the_api_server_in_the_same_call(
    admin_api: ApiClient, catalog: Catalog
) -> None:
    name = f"qwen-{_suffix()}"
    catalog.create(ModelKind.CLUSTER_MODEL, name, facts=QWEN_FACTS, source=QWEN_SOURCE)
    ref = ModelRef(kind=ModelKind.CLUSTER_MODEL, name=name)
    with CatalogServiceProcess([]) as service:  # knows nothing: a REST answer would be ModelNotFound
        settings = make_settings(base_url=service.base_url)
        via_rest = await lookup_model(ref, "support", settings, KubernetesCatalogReader(admin_api))
        assert via_rest.reason is Reason.MODEL_NOT_FOUND
        assert via_rest.answeredBy is CatalogPath.REST
        service.set_mode("fail")
        failing = await lookup_model(ref, "support", settings, KubernetesCatalogReader(admin_api))
        service.stop()
        stopped = await lookup_model(ref, "support", settings, KubernetesCatalogReader(admin_api))
    for outcome in (failing, stopped):
        assert outcome.ok
        assert outcome.answeredBy is CatalogPath.KUBERNETES
        assert outcome.restUnavailable is not None
        assert outcome.resolved is not None
        assert outcome.resolved.source == QWEN_SOURCE


async def test_forbidden_read_is_an_outage_not_a_verdict(
    local_cluster: LocalCluster, make_namespace: Callable[..., str], catalog: Catalog
) -> None:
    # ns-user has no rights in a namespace made without it: the API server answers 403.
    namespace = make_namespace("catalog-locked", users=())
    name = f"e5-{_suffix()}"
    catalog.create(ModelKind.MODEL, name, namespace, facts=E5_FACTS)
    settings = make_settings(base_url=f"http://127.0.0.1:{free_port()}", timeout=1)  # REST absent too
    with local_cluster.api_client("ns-user") as api, pytest.raises(CatalogUnavailableError, match="403"):
        await lookup_model(ModelRef(kind=ModelKind.MODEL, name=name), namespace, settings, KubernetesCatalogReader(api))
