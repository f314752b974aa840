"""The catalog client against the stand-in lookup service over real HTTP (a separate process)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from activities.catalog import CatalogPath, lookup_model
from devstack.standins.catalog_service import CatalogServiceProcess, StandInModel
from inference_api.reasons import Reason
from inference_api.settings import ModuleSettings
from inference_api.types import ModelKind, ModelRef, ModelScope
from tests.catalog.fakes import ExplodingReader, FakeReader
from tests.factories import E5_FACTS, QWEN_FACTS, QWEN_SOURCE, catalog_object, make_settings

QWEN = ModelRef(kind=ModelKind.CLUSTER_MODEL, name="qwen2-5-32b-instruct-awq")
E5 = ModelRef(kind=ModelKind.MODEL, name="e5-large")


@pytest.fixture(scope="module")
def catalog_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CatalogServiceProcess]:
    # A fixtures file on disk: the same path `python -m devstack.standins.catalog_service --fixtures` takes.
    fixtures = tmp_path_factory.mktemp("catalog") / "models.yaml"
    fixtures.write_text(
        yaml.safe_dump(
            {
                "models": [
                    {
                        "kind": "ClusterModel",
                        "name": QWEN.name,
                        "ready": True,
                        "source": QWEN_SOURCE,
                        "facts": QWEN_FACTS.model_dump(mode="json", exclude_none=True),
                    },
                    {
                        "kind": "Model",
                        "name": E5.name,
                        "namespace": "team-a",
                        "ready": True,
                        "facts": E5_FACTS.model_dump(mode="json", exclude_none=True),
                    },
                ]
            }
        )
    )
    with CatalogServiceProcess(fixtures) as service:
        yield service


@pytest.fixture
def service(catalog_service: CatalogServiceProcess) -> Iterator[CatalogServiceProcess]:
    """The module's service, running and answering normally at the start of every test."""
    catalog_service.start()
    catalog_service.set_mode("ok")
    yield catalog_service
    catalog_service.start()
    catalog_service.set_mode("ok")


def settings_for(
    service: CatalogServiceProcess,
    *,
    mode: str = "Enabled",
    transport: str = "Rest",
    timeout: float = 2.0,
    requeue: float = 30,
) -> ModuleSettings:
    return make_settings(base_url=service.base_url, mode=mode, transport=transport, timeout=timeout, requeue=requeue)


async def test_rest_answers_cluster_model_and_model(service: CatalogServiceProcess) -> None:
    before = service.lookups()
    settings = settings_for(service)
    qwen = await lookup_model(QWEN, "support", settings, ExplodingReader())
    e5 = await lookup_model(E5, "team-a", settings, ExplodingReader())
    assert service.lookups() == before + 2
    assert qwen.ok
    assert qwen.answeredBy is CatalogPath.REST
    assert qwen.resolved is not None
    assert qwen.resolved.scope is ModelScope.CLUSTER
    assert qwen.resolved.facts == QWEN_FACTS
    assert qwen.resolved.servedName == "Qwen/Qwen2.5-32B-Instruct-AWQ"
    assert qwen.resolved.source == QWEN_SOURCE
    assert e5.ok
    assert e5.answeredBy is CatalogPath.REST
    assert e5.resolved is not None
    assert e5.resolved.scope is ModelScope.NAMESPACE
    assert e5.resolved.servedName == "e5-large"


async def test_rest_not_found(service: CatalogServiceProcess) -> None:
    settings = settings_for(service)
    missing = await lookup_model(
        ModelRef(kind=ModelKind.CLUSTER_MODEL, name="nope"), "support", settings, ExplodingReader()
    )
    # The Model exists in team-a; an order in another namespace without ref.namespace does not see it.
    elsewhere = await lookup_model(E5, "support", settings, ExplodingReader())
    for outcome in (missing, elsewhere):
        assert outcome.reason is Reason.MODEL_NOT_FOUND
        assert outcome.answeredBy is CatalogPath.REST


async def test_stopped_service_the_object_is_read_in_the_same_call(
    service: CatalogServiceProcess, fake_reader: FakeReader
) -> None:
    settings = settings_for(service)
    service.stop()
    outcome = await lookup_model(QWEN, "support", settings, fake_reader)
    assert outcome.ok
    assert outcome.answeredBy is CatalogPath.KUBERNETES
    assert outcome.restUnavailable is not None
    assert "ConnectError" in outcome.restUnavailable
    assert fake_reader.calls == [(ModelKind.CLUSTER_MODEL, QWEN.name, None)]
    # Back on the same port: the next lookup is REST's again.
    service.start()
    again = await lookup_model(QWEN, "support", settings, ExplodingReader())
    assert again.answeredBy is CatalogPath.REST


async def test_failing_service_5xx_the_object_is_read_in_the_same_call(
    service: CatalogServiceProcess, fake_reader: FakeReader
) -> None:
    service.set_mode("fail", fail_status=502)
    before = service.lookups()
    outcome = await lookup_model(E5, "team-a", settings_for(service), fake_reader)
    assert service.lookups() == before + 1
    assert outcome.ok
    assert outcome.answeredBy is CatalogPath.KUBERNETES
    assert outcome.restUnavailable == "HTTP 502"
    assert fake_reader.calls == [(ModelKind.MODEL, E5.name, "team-a")]


async def test_slow_service_times_out_and_the_object_is_read_in_the_same_call(
    service: CatalogServiceProcess, fake_reader: FakeReader
) -> None:
    service.set_mode("slow", delay_seconds=5)
    loop = asyncio.get_running_loop()
    started = loop.time()
    outcome = await lookup_model(QWEN, "support", settings_for(service, timeout=0.3), fake_reader)
    assert loop.time() - started < 2.5
    assert outcome.ok
    assert outcome.answeredBy is CatalogPath.KUBERNETES
    assert outcome.restUnavailable is not None
    assert "time" in outcome.restUnavailable.lower()
    assert fake_reader.calls == [(ModelKind.CLUSTER_MODEL, QWEN.name, None)]


async def test_kubernetes_transport_never_calls_rest(service: CatalogServiceProcess, fake_reader: FakeReader) -> None:
    before = service.lookups()
    outcome = await lookup_model(QWEN, "support", settings_for(service, transport="Kubernetes"), fake_reader)
    assert outcome.ok
    assert outcome.answeredBy is CatalogPath.KUBERNETES
    assert service.lookups() == before


async def test_catalog_off_never_calls_rest(service: CatalogServiceProcess) -> None:
    before = service.lookups()
    outcome = await lookup_model(QWEN, "support", settings_for(service, mode="None"), None)
    assert outcome.reason is Reason.CATALOG_DISABLED
    assert service.lookups() == before


async def test_not_ready_then_marked_ready_resolves_on_the_next_lookup(service: CatalogServiceProcess) -> None:
    ref = ModelRef(kind=ModelKind.CLUSTER_MODEL, name="llama-warming-up")
    service.put_model(ModelKind.CLUSTER_MODEL, ref.name, ready=False, facts=QWEN_FACTS)
    settings = settings_for(service, requeue=7)
    first = await lookup_model(ref, "support", settings, ExplodingReader())
    assert first.reason is Reason.MODEL_NOT_READY
    assert first.requeueAfterSeconds == 7
    assert first.answeredBy is CatalogPath.REST

    stored = service.put_model(ModelKind.CLUSTER_MODEL, ref.name, ready=True)
    assert stored["facts"]["parameterCount"] == "32B"  # marking ready keeps the facts
    second = await lookup_model(ref, "support", settings, ExplodingReader())
    assert second.ok
    assert second.resolved is not None
    assert second.resolved.facts == QWEN_FACTS


async def test_model_added_and_deleted_at_run_time(service: CatalogServiceProcess) -> None:
    ref = ModelRef(kind=ModelKind.MODEL, name="bge-reranker", namespace="shared")
    settings = settings_for(service)
    service.put_model(ModelKind.MODEL, ref.name, namespace="shared", facts={"endpointTypes": ["Rerank"]})
    added = await lookup_model(ref, "support", settings, ExplodingReader())
    assert added.ok
    assert added.resolved is not None
    assert [t.value for t in added.resolved.facts.endpointTypes] == ["Rerank"]
    assert service.delete_model(ModelKind.MODEL, ref.name, "shared")
    gone = await lookup_model(ref, "support", settings, ExplodingReader())
    assert gone.reason is Reason.MODEL_NOT_FOUND


def test_wire_format(service: CatalogServiceProcess) -> None:
    url = service.base_url + service.path
    ok = httpx.get(url, params={"kind": "ClusterModel", "name": QWEN.name})
    assert ok.status_code == 200
    assert ok.json() == {
        "kind": "ClusterModel",
        "name": QWEN.name,
        "namespace": None,
        "ready": True,
        "scope": "Cluster",
        "source": QWEN_SOURCE,
        "facts": {
            "parameterCount": "32B",
            "quantization": "awq",
            "format": "safetensors",
            "endpointTypes": ["Chat"],
            "servedName": "Qwen/Qwen2.5-32B-Instruct-AWQ",
        },
    }
    missing = httpx.get(url, params={"kind": "Model", "name": "x", "namespace": "y"})
    assert missing.status_code == 404
    assert missing.json()["reason"] == "ModelNotFound"
    for params in ({"kind": "Pod", "name": "x"}, {"kind": "Model", "name": "x"}, {"kind": "ClusterModel"}):
        bad = httpx.get(url, params=params)
        assert bad.status_code == 400
        assert bad.json()["reason"] == "BadRequest"
    service.set_mode("fail")
    failing = httpx.get(url, params={"kind": "ClusterModel", "name": QWEN.name})
    assert failing.status_code == 503
    assert failing.json()["reason"] == "Unavailable"
    assert httpx.post(service.base_url + "/admin/mode", json={"mode": "sideways"}).status_code == 400


def test_helper_writes_fixtures_given_as_models(tmp_path: Path) -> None:
    models = [StandInModel(kind=ModelKind.CLUSTER_MODEL, name="tiny", ready=False)]
    with CatalogServiceProcess(models) as service:
        body = httpx.get(service.base_url + service.path, params={"kind": "ClusterModel", "name": "tiny"}).json()
        assert body["ready"] is False
        port = service.port
    assert not service.running
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)


async def test_object_fallback_matches_what_rest_said(service: CatalogServiceProcess) -> None:
    """Both paths give the same verdict for the same catalog contents."""
    reader = FakeReader([catalog_object(ModelKind.CLUSTER_MODEL, QWEN.name, facts=QWEN_FACTS, source=QWEN_SOURCE)])
    via_rest = await lookup_model(QWEN, "support", settings_for(service), reader)
    service.stop()
    via_objects = await lookup_model(QWEN, "support", settings_for(service), reader)
    assert via_rest.answeredBy is CatalogPath.REST
    assert via_objects.answeredBy is CatalogPath.KUBERNETES
    assert via_rest.resolved == via_objects.resolved
