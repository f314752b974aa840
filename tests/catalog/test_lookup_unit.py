"""Every branch of lookup_model, with a fake object reader and an in-memory HTTP transport."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from structlog.testing import capture_logs

import activities.catalog as catalog
from activities.catalog import CatalogPath, CatalogUnavailableError, lookup_model
from inference_api.reasons import Reason
from inference_api.types import ModelKind, ModelRef, ModelScope
from tests.catalog.fakes import ExplodingReader, FakeReader
from tests.factories import QWEN_FACTS, make_settings

QWEN = ModelRef(kind=ModelKind.CLUSTER_MODEL, name="qwen2-5-32b-instruct-awq")
E5 = ModelRef(kind=ModelKind.MODEL, name="e5-large")

Handler = Callable[[httpx.Request], httpx.Response]


class Recorder:
    """An httpx transport that records requests and answers with a handler."""

    def __init__(self, handler: Handler) -> None:
        self.requests: list[httpx.Request] = []
        self._handler = handler

    def client(self) -> httpx.AsyncClient:
        def handle(request: httpx.Request) -> httpx.Response:
            self.requests.append(request)
            return self._handler(request)

        return httpx.AsyncClient(transport=httpx.MockTransport(handle))


def lookup_body(request: httpx.Request, *, ready: bool = True) -> httpx.Response:
    params = request.url.params
    kind = params["kind"]
    return httpx.Response(
        200,
        json={
            "kind": kind,
            "name": params["name"],
            "namespace": params.get("namespace"),
            "ready": ready,
            "scope": "Cluster" if kind == "ClusterModel" else "Namespace",
            "facts": QWEN_FACTS.model_dump(mode="json", exclude_none=True),
        },
    )


def refuse_connection(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


async def test_rest_answers_and_no_object_is_read() -> None:
    rest = Recorder(lookup_body)
    settings = make_settings(base_url="http://catalog.test:8080/")
    async with rest.client() as client:
        outcome = await lookup_model(QWEN, "support", settings, ExplodingReader(), http_client=client)
    assert outcome.ok
    assert outcome.answeredBy is CatalogPath.REST
    assert outcome.resolved is not None
    assert outcome.resolved.scope is ModelScope.CLUSTER
    assert outcome.resolved.servedName == "Qwen/Qwen2.5-32B-Instruct-AWQ"
    (request,) = rest.requests
    assert request.method == "GET"
    assert request.url.path == "/api/internal/v1/models/lookup"
    assert dict(request.url.params) == {"kind": "ClusterModel", "name": "qwen2-5-32b-instruct-awq"}


async def test_model_without_namespace_is_asked_for_in_the_orders_namespace() -> None:
    rest = Recorder(lookup_body)
    async with rest.client() as client:
        await lookup_model(E5, "team-a", make_settings(), ExplodingReader(), http_client=client)
        await lookup_model(
            E5.model_copy(update={"namespace": "shared"}),
            "team-a",
            make_settings(),
            ExplodingReader(),
            http_client=client,
        )
    assert [r.url.params["namespace"] for r in rest.requests] == ["team-a", "shared"]


async def test_rest_not_found_is_a_verdict_without_fallback() -> None:
    rest = Recorder(lambda r: httpx.Response(404, json={"reason": "ModelNotFound", "message": "no"}))
    async with rest.client() as client:
        outcome = await lookup_model(QWEN, "support", make_settings(), ExplodingReader(), http_client=client)
    assert outcome.reason is Reason.MODEL_NOT_FOUND
    assert outcome.answeredBy is CatalogPath.REST


async def test_rest_not_ready_asks_for_a_requeue() -> None:
    rest = Recorder(lambda r: lookup_body(r, ready=False))
    async with rest.client() as client:
        outcome = await lookup_model(QWEN, "support", make_settings(requeue=12), ExplodingReader(), http_client=client)
    assert outcome.reason is Reason.MODEL_NOT_READY
    assert outcome.requeueAfterSeconds == 12


@pytest.mark.parametrize(
    ("handler", "why"),
    [
        (refuse_connection, "ConnectError"),
        (lambda r: httpx.Response(503, json={"reason": "Unavailable"}), "HTTP 503"),
        (lambda r: httpx.Response(500, text="boom"), "HTTP 500"),
        (lambda r: httpx.Response(403, json={"reason": "Forbidden"}), "HTTP 403"),
        (lambda r: httpx.Response(404, text="404 page not found"), "without a ModelNotFound body"),
        (lambda r: httpx.Response(200, text="<html>proxy</html>"), "malformed"),
        (lambda r: httpx.Response(200, json={"kind": "ClusterModel"}), "malformed"),
        (
            lambda r: httpx.Response(
                200, json={"kind": "ClusterModel", "name": "other", "ready": True, "scope": "Cluster"}
            ),
            "not ClusterModel/qwen2-5-32b-instruct-awq",
        ),
    ],
    ids=["connect-error", "503", "500", "403", "bare-404", "html", "incomplete", "wrong-model"],
)
async def test_rest_without_a_usable_answer_reads_the_object_in_the_same_call(
    handler: Handler, why: str, fake_reader: FakeReader
) -> None:
    rest = Recorder(handler)
    with capture_logs() as logs:
        async with rest.client() as client:
            outcome = await lookup_model(QWEN, "support", make_settings(), fake_reader, http_client=client)
    assert len(rest.requests) == 1
    assert fake_reader.calls == [(ModelKind.CLUSTER_MODEL, "qwen2-5-32b-instruct-awq", None)]
    assert outcome.ok
    assert outcome.answeredBy is CatalogPath.KUBERNETES
    assert outcome.restUnavailable is not None
    assert why in outcome.restUnavailable
    assert outcome.resolved is not None
    assert outcome.resolved.facts == QWEN_FACTS
    # The log says which path answered and why REST did not.
    answered = [e for e in logs if e["event"] == "catalog lookup answered"]
    assert answered
    assert answered[-1]["answered_by"] is CatalogPath.KUBERNETES
    assert any(e["log_level"] == "warning" and why in e["why"] for e in logs)


async def test_fallback_gives_not_found_and_not_ready_too(fake_reader: FakeReader) -> None:
    rest = Recorder(refuse_connection)
    async with rest.client() as client:
        missing = await lookup_model(
            ModelRef(kind=ModelKind.CLUSTER_MODEL, name="nope"),
            "support",
            make_settings(),
            fake_reader,
            http_client=client,
        )
        pending = await lookup_model(
            ModelRef(kind=ModelKind.MODEL, name="pending-model"),
            "team-a",
            make_settings(),
            fake_reader,
            http_client=client,
        )
    assert missing.reason is Reason.MODEL_NOT_FOUND
    assert missing.answeredBy is CatalogPath.KUBERNETES
    assert pending.reason is Reason.MODEL_NOT_READY
    assert pending.requeueAfterSeconds == 30


async def test_rest_timeout_falls_back_within_the_timeout(fake_reader: FakeReader) -> None:
    import asyncio

    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(5)
        return lookup_body(request)

    client = httpx.AsyncClient(transport=httpx.MockTransport(slow))
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with client:
        outcome = await lookup_model(QWEN, "support", make_settings(timeout=0.2), fake_reader, http_client=client)
    assert loop.time() - started < 2
    assert outcome.ok
    assert outcome.answeredBy is CatalogPath.KUBERNETES
    assert outcome.restUnavailable is not None
    assert "0.2s" in outcome.restUnavailable


async def test_both_paths_down_is_an_outage_not_a_verdict() -> None:
    rest = Recorder(refuse_connection)
    reader = FakeReader(error="HTTP 503 Service Unavailable")
    async with rest.client() as client:
        with pytest.raises(CatalogUnavailableError, match="HTTP 503"):
            await lookup_model(QWEN, "support", make_settings(), reader, http_client=client)


async def test_kubernetes_transport_never_calls_rest(fake_reader: FakeReader) -> None:
    rest = Recorder(lookup_body)
    settings = make_settings(transport="Kubernetes")
    with capture_logs() as logs:
        async with rest.client() as client:
            found = await lookup_model(E5, "team-a", settings, fake_reader, http_client=client)
            missing = await lookup_model(
                ModelRef(kind=ModelKind.MODEL, name="e5-large"), "elsewhere", settings, fake_reader, http_client=client
            )
    assert rest.requests == []
    assert found.ok
    assert found.answeredBy is CatalogPath.KUBERNETES
    assert found.restUnavailable is None
    assert found.resolved is not None
    assert found.resolved.scope is ModelScope.NAMESPACE
    assert missing.reason is Reason.MODEL_NOT_FOUND
    assert fake_reader.calls == [(ModelKind.MODEL, "e5-large", "team-a"), (ModelKind.MODEL, "e5-large", "elsewhere")]
    assert [e["answered_by"] for e in logs if e["event"] == "catalog lookup answered"] == [CatalogPath.KUBERNETES] * 2


async def test_kubernetes_transport_read_failure_is_an_outage() -> None:
    with pytest.raises(CatalogUnavailableError):
        await lookup_model(
            QWEN, "support", make_settings(transport="Kubernetes"), FakeReader(error="HTTP 403 Forbidden")
        )


async def test_the_blocking_reader_runs_off_the_event_loop_thread(fake_reader: FakeReader) -> None:
    await lookup_model(QWEN, "support", make_settings(transport="Kubernetes"), fake_reader)
    assert fake_reader.threads
    assert fake_reader.threads[0] != threading.get_ident()


@pytest.mark.parametrize("transport", ["Rest", "Kubernetes"])
async def test_catalog_off_refuses_without_any_client(transport: str) -> None:
    rest = Recorder(lookup_body)
    settings = make_settings(mode="None", transport=transport)
    async with rest.client() as client:
        outcome = await lookup_model(QWEN, "support", settings, ExplodingReader(), http_client=client)
        no_reader = await lookup_model(QWEN, "support", settings, None)
    assert rest.requests == []
    for result in (outcome, no_reader):
        assert result.reason is Reason.CATALOG_DISABLED
        assert result.answeredBy is CatalogPath.NONE
        assert not result.ok


async def test_a_hugging_face_reference_never_reaches_the_catalog() -> None:
    with pytest.raises(ValueError, match="catalog references"):
        await lookup_model(ModelRef(name="Qwen/Qwen2.5-7B-Instruct"), "support", make_settings(), ExplodingReader())


async def test_enabled_catalog_needs_a_reader() -> None:
    with pytest.raises(ValueError, match="object reader"):
        await lookup_model(QWEN, "support", make_settings(), None)


async def test_the_projected_catalog_token_is_sent_never_the_pods_own_nor_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_reader: FakeReader
) -> None:
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text("the-pods-own-token\n")  # full power at the API server: never sent
    monkeypatch.setattr(catalog, "SERVICE_ACCOUNT_DIR", sa)
    projected = tmp_path / "catalog"
    projected.write_text("sekret-token-value\n")
    settings = make_settings(timeout=3)
    settings.aiModels.catalogLookup.tokenFile = str(projected)
    client = catalog.default_http_client(settings)
    async with client:
        assert client.headers["Authorization"] == "Bearer sekret-token-value"
        assert client.timeout.read == 3
    settings.aiModels.catalogLookup.tokenFile = str(tmp_path / "absent")  # outside a pod: no header at all
    async with catalog.default_http_client(settings) as bare:
        assert "Authorization" not in bare.headers
    # A lookup that fails (nothing listens on the default test port) logs no header, no token.
    failing = make_settings(timeout=1)
    failing.aiModels.catalogLookup.tokenFile = str(projected)
    with capture_logs() as logs:
        outcome = await lookup_model(QWEN, "support", failing, fake_reader)
    assert outcome.restUnavailable is not None
    assert "ConnectError" in outcome.restUnavailable
    assert logs
    assert "sekret-token-value" not in repr(logs)


async def test_a_token_for_another_audience_is_not_sent_and_the_objects_answer(
    tmp_path: Path, fake_reader: FakeReader
) -> None:
    import base64
    import json

    claims = base64.urlsafe_b64encode(json.dumps({"aud": ["https://kubernetes.default.svc"]}).encode()).decode()
    token = f"eyJhbGciOiJSUzI1NiJ9.{claims.rstrip('=')}.c2ln"
    (tmp_path / "catalog").write_text(token)
    settings = make_settings()
    settings.aiModels.catalogLookup.tokenFile = str(tmp_path / "catalog")
    with capture_logs() as logs:
        outcome = await lookup_model(QWEN, "support", settings, fake_reader)
    assert outcome.ok
    assert outcome.answeredBy is CatalogPath.KUBERNETES
    assert outcome.restUnavailable is not None
    assert "not 'ai-models'" in outcome.restUnavailable
    assert token not in repr(logs) + outcome.model_dump_json()


async def test_plain_http_is_refused_unless_allowed_and_the_objects_answer(fake_reader: FakeReader) -> None:
    rest = Recorder(lookup_body)
    settings = make_settings(base_url="http://catalog.test:8080/")
    settings.aiModels.catalogLookup.allowInsecureHttp = False  # what the module does outside tests
    async with rest.client() as client:
        outcome = await lookup_model(QWEN, "support", settings, fake_reader, http_client=client)
    assert rest.requests == []
    assert outcome.ok
    assert outcome.answeredBy is CatalogPath.KUBERNETES
    assert outcome.restUnavailable is not None
    assert "plain http is refused" in outcome.restUnavailable
    assert "allowInsecureHttp" in outcome.restUnavailable


async def test_an_unusable_ca_bundle_counts_as_rest_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_reader: FakeReader
) -> None:
    (tmp_path / "ca.crt").write_text("not a certificate")
    monkeypatch.setattr(catalog, "SERVICE_ACCOUNT_DIR", tmp_path)
    outcome = await lookup_model(QWEN, "support", make_settings(), fake_reader)
    assert outcome.ok
    assert outcome.answeredBy is CatalogPath.KUBERNETES
    assert outcome.restUnavailable is not None
    assert "HTTP client" in outcome.restUnavailable
