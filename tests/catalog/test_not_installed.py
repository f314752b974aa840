"""catalog.mode Enabled on a cluster without the ai-models module: the lookup names the missing module
(CatalogNotInstalled) and the order looks again, rather than "no such model" (ModelNotFound)."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from kubernetes.client.exceptions import ApiException

from activities.catalog import (
    CatalogNotInstalledError,
    CatalogPath,
    CatalogReadError,
    KubernetesCatalogReader,
    lookup_model,
    model_resolution,
)
from inference_api.catalog_types import CATALOG_GROUP, CATALOG_VERSION
from inference_api.reasons import Reason
from inference_api.types import ModelKind, ModelRef
from tests.factories import make_settings

QWEN = ModelRef(kind=ModelKind.CLUSTER_MODEL, name="qwen")
E5 = ModelRef(kind=ModelKind.MODEL, name="e5-large")


class NotInstalledReader:
    def __init__(self) -> None:
        self.calls = 0

    def read_model(self, kind: ModelKind, name: str, namespace: str | None) -> Mapping[str, Any] | None:
        self.calls += 1
        raise CatalogNotInstalledError(f"{CATALOG_GROUP}/{CATALOG_VERSION} is not served")


def refuse_connection(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


@pytest.mark.parametrize("ref", [QWEN, E5])
async def test_the_kubernetes_transport_names_the_missing_module_and_looks_again(ref: ModelRef) -> None:
    reader = NotInstalledReader()
    settings = make_settings(transport="Kubernetes", requeue=45)
    outcome = await lookup_model(ref, "team-a", settings, reader)
    assert reader.calls == 1
    assert outcome.reason is Reason.CATALOG_NOT_INSTALLED
    assert outcome.requeueAfterSeconds == 45
    assert outcome.answeredBy is CatalogPath.KUBERNETES
    assert outcome.message.startswith(
        "the ai-models module is not installed: its Model and ClusterModel kinds are not served "
        "(ai-models.deckhouse.io/v1alpha1)"
    )
    where = ' in namespace "team-a"' if ref.kind is ModelKind.MODEL else ""
    assert f'{ref.kind} "{ref.name}"{where} cannot be looked up' in outcome.message
    assert "looks again in 45s" in outcome.message
    assert "src: HuggingFace" in outcome.message
    resolution = model_resolution(outcome, ref)
    assert resolution.refusal is Reason.CATALOG_NOT_INSTALLED
    assert resolution.retryAfterSeconds == 45


async def test_rest_unavailable_then_no_catalog_kinds_is_not_installed_rather_than_not_found() -> None:
    async with httpx.AsyncClient(transport=httpx.MockTransport(refuse_connection)) as client:
        outcome = await lookup_model(QWEN, "team-a", make_settings(), NotInstalledReader(), http_client=client)
    assert outcome.reason is Reason.CATALOG_NOT_INSTALLED
    assert outcome.restUnavailable is not None
    assert "connection refused" in outcome.restUnavailable
    assert outcome.requeueAfterSeconds == 30


class FakeCustomObjects:
    """The two calls KubernetesCatalogReader makes: a get of one object, and discovery."""

    def __init__(self, object_status: int, discovery: int | list[str]) -> None:
        self.object_status = object_status
        self.discovery = discovery

    def get_cluster_custom_object(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        raise ApiException(status=self.object_status, reason="x")

    get_namespaced_custom_object = get_cluster_custom_object

    def get_api_resources(self, group: str, version: str, **kwargs: Any) -> Any:
        assert (group, version) == (CATALOG_GROUP, CATALOG_VERSION)
        if isinstance(self.discovery, int):
            raise ApiException(status=self.discovery, reason="x")
        return SimpleNamespace(resources=[SimpleNamespace(name=n) for n in self.discovery])


def reader_over(api: FakeCustomObjects) -> KubernetesCatalogReader:
    reader = KubernetesCatalogReader.__new__(KubernetesCatalogReader)
    reader._api = api
    reader._timeout = 1
    return reader


@pytest.mark.parametrize("kind", [ModelKind.CLUSTER_MODEL, ModelKind.MODEL])
def test_a_404_is_a_missing_model_only_where_discovery_serves_the_kind(kind: ModelKind) -> None:
    served = reader_over(FakeCustomObjects(404, ["models", "clustermodels", "models/status"]))
    assert served.read_model(kind, "qwen", "team-a") is None
    # The group is not served at all (its CRDs absent), or served without this kind.
    for discovery in (404, ["models/status"]):
        with pytest.raises(CatalogNotInstalledError):
            reader_over(FakeCustomObjects(404, discovery)).read_model(kind, "qwen", "team-a")
    # Discovery itself failing otherwise is an outage, not a verdict.
    with pytest.raises(CatalogReadError):
        reader_over(FakeCustomObjects(404, 503)).read_model(kind, "qwen", "team-a")
    with pytest.raises(CatalogReadError):
        reader_over(FakeCustomObjects(403, ["models", "clustermodels"])).read_model(kind, "qwen", "team-a")
