"""The planner service's HTTP behaviour with a stand-in reviewer (the real one: test_cluster.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from structlog.testing import capture_logs

from inference_api.plan import LaunchPlanRequest, OrderFacts, PlanOutcome
from planner import InventorySnapshot, PlanningRequest, plan_launch
from planner.service import create_app, openapi_document
from tests.planner.helpers import DEFAULT_LLM, sim_snapshot
from tests.planner_service.fakes import ALLOWED, FORBIDDEN, FakeReviewer

PATH = "/api/v1/launch-plan"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


REQUEST = LaunchPlanRequest(
    facts=OrderFacts(modelName="Qwen/Qwen2.5-32B-Instruct-AWQ"), acceleratorPolicy=DEFAULT_LLM, holder="ns/a"
)


@pytest.fixture
def reviewer() -> FakeReviewer:
    return FakeReviewer()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def inventory() -> list[Any]:
    return [sim_snapshot()]


@pytest.fixture
def http(reviewer: FakeReviewer, clock: Clock, inventory: list[Any]) -> Iterator[TestClient]:
    def read() -> InventorySnapshot:
        if isinstance(inventory[0], Exception):
            raise inventory[0]
        snapshot: InventorySnapshot = inventory[0]
        return snapshot

    with TestClient(create_app(read, reviewer, clock=clock)) as client:
        yield client


def post(http: TestClient, token: str | None, body: Any = None, raw: bytes | None = None) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    content = raw if raw is not None else (body or REQUEST).model_dump_json().encode()
    return http.post(PATH, content=content, headers=headers)


def test_an_allowed_caller_gets_the_library_outcome(http: TestClient) -> None:
    response = post(http, ALLOWED)
    assert response.status_code == 200, response.text
    expected = plan_launch(PlanningRequest(**dict(REQUEST), inventory=sim_snapshot()))
    assert PlanOutcome.model_validate_json(response.content) == expected
    assert expected.plan is not None


@pytest.mark.parametrize("header", [None, "Basic dXNlcjpwYXNz", "Bearer ", "bearer"])
def test_no_bearer_token_is_401(http: TestClient, reviewer: FakeReviewer, header: str | None) -> None:
    response = http.post(PATH, content=REQUEST.model_dump_json(), headers={"Authorization": header} if header else {})
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert response.json()["error"] == "Unauthorized"
    assert "bearer token" in response.json()["message"]
    assert reviewer.authentications == 0


def test_an_unknown_token_is_401_and_never_echoed(http: TestClient) -> None:
    with capture_logs() as logs:
        response = post(http, "unknown-token-0011223344")
    assert response.status_code == 401
    assert 'for audience "ai-inference-planner" (TokenReview)' in response.json()["message"]
    assert "unknown-token-0011223344" not in response.text + repr(logs)


def test_the_token_review_requires_the_planners_audience(monkeypatch: pytest.MonkeyPatch) -> None:
    """The TokenReview names the audience, and an answer that does not confirm it is a refusal."""
    import kubernetes.client
    from kubernetes.client import V1TokenReview, V1TokenReviewStatus, V1UserInfo

    from planner.service import KubernetesAccessReviewer

    asked: list[V1TokenReview] = []
    answered_audiences: list[list[str] | None] = []

    class Authentication:
        def __init__(self, api: object) -> None:
            pass

        def create_token_review(self, body: V1TokenReview, **kwargs: object) -> V1TokenReview:
            asked.append(body)
            user = V1UserInfo(username="system:serviceaccount:d8-ai-inference:ai-inference-worker")
            status = V1TokenReviewStatus(authenticated=True, user=user, audiences=answered_audiences[-1])
            return V1TokenReview(spec=body.spec, status=status)

    monkeypatch.setattr(kubernetes.client, "AuthenticationV1Api", Authentication)
    reviewer = KubernetesAccessReviewer(object(), audience="planner-aud")
    answered_audiences.append(["planner-aud"])
    caller = reviewer.authenticate("t")
    assert caller is not None
    assert caller.username.endswith(":ai-inference-worker")
    assert asked[-1].spec.audiences == ["planner-aud"]
    assert asked[-1].spec.token == "t"
    for other in (None, [], ["https://kubernetes.default.svc.cluster.local"]):
        answered_audiences.append(other)
        assert reviewer.authenticate("t") is None, other


def test_a_caller_without_the_permission_is_403(http: TestClient, reviewer: FakeReviewer) -> None:
    with capture_logs() as logs:
        first = post(http, FORBIDDEN)
        second = post(http, FORBIDDEN)
    assert first.status_code == second.status_code == 403
    body = first.json()
    assert body["error"] == "Forbidden"
    assert '"ns-user"' in body["message"]
    assert "create inferenceserviceclasses/planner" in body["message"]
    assert "no RBAC policy matched" in body["message"]
    assert FORBIDDEN not in first.text + repr(logs)
    assert reviewer.authentications == 2  # refusals are not remembered


def test_positive_reviews_are_cached_for_a_while(http: TestClient, reviewer: FakeReviewer, clock: Clock) -> None:
    assert post(http, ALLOWED).status_code == 200
    clock.now += 29
    assert post(http, ALLOWED).status_code == 200
    assert (reviewer.authentications, reviewer.authorizations) == (1, 1)
    clock.now += 2
    assert post(http, ALLOWED).status_code == 200
    assert (reviewer.authentications, reviewer.authorizations) == (2, 2)


def test_the_api_server_not_answering_is_503(http: TestClient, reviewer: FakeReviewer, inventory: list[Any]) -> None:
    reviewer.broken = True
    response = post(http, ALLOWED)
    assert response.status_code == 503
    assert "TokenReview failed: HTTP 500" in response.json()["message"]

    reviewer.broken = False
    inventory[0] = ConnectionError("refused")
    response = post(http, ALLOWED)
    assert response.status_code == 503
    assert response.json()["message"] == "reading the inventory failed: ConnectionError"


def test_an_invalid_body_is_400_with_field_errors(http: TestClient) -> None:
    response = post(http, ALLOWED, raw=b'{"facts": {"modelName": "x"}, "nonsense": 1}')
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "BadRequest"
    assert [d["loc"] for d in body["details"]] == [["nonsense"]]
    assert post(http, ALLOWED, raw=b"not json").status_code == 400


def test_the_body_is_checked_only_after_authorization(http: TestClient) -> None:
    assert post(http, None, raw=b"not json").status_code == 401


def test_an_oversized_body_is_413(http: TestClient) -> None:
    response = post(http, ALLOWED, raw=b" " * ((1 << 20) + 1))
    assert response.status_code == 413
    assert response.json()["error"] == "PayloadTooLarge"


def test_a_planning_failure_is_a_json_500(http: TestClient, inventory: list[Any]) -> None:
    # Snapshots are validated when built, so a broken one only comes from a bug; construct one anyway.
    broken = sim_snapshot()
    broken.devices[0].capacity = {"gpu.deckhouse.io/memory": "not a quantity"}  # not re-validated on assignment
    inventory[0] = broken
    with capture_logs():
        response = post(http, ALLOWED)
    assert response.status_code == 500
    assert response.json()["error"] == "InternalError"


def test_healthz_and_openapi(http: TestClient) -> None:
    assert http.get("/healthz").text == "ok\n"
    document = http.get("/openapi.json").json()
    operation = document["paths"][PATH]["post"]
    assert operation["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/LaunchPlanRequest")
    assert set(operation["responses"]) == {"200", "400", "401", "403", "413", "500", "503"}
    assert document == openapi_document()


def test_the_openapi_document_is_valid_openapi_3_1() -> None:
    # openapi-spec-validator is not a declared dev dependency yet (pyproject.toml is shared).
    validator = pytest.importorskip("openapi_spec_validator")
    document = openapi_document()
    validator.validate(document)
    assert document["openapi"] == "3.1.0"


def test_openapi_schemas_are_the_models_and_every_reference_resolves() -> None:
    document = openapi_document()
    schemas = document["components"]["schemas"]
    assert {"LaunchPlanRequest", "PlanOutcome", "LaunchPlan", "PlanRefusal", "ErrorBody"} <= set(schemas)
    assert schemas["LaunchPlanRequest"]["additionalProperties"] is False

    def refs(node: Any) -> Iterator[str]:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "$ref":
                    yield value
                else:
                    yield from refs(value)
        elif isinstance(node, list):
            for item in node:
                yield from refs(item)

    for ref in refs(document):
        assert ref.startswith("#/components/schemas/"), ref
        assert ref.rsplit("/", 1)[1] in schemas, ref


def test_the_planner_command_serves_the_app_over_https_only(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import ssl

    import uvicorn
    from typer.testing import CliRunner

    import worker.cli as cli
    from inference_api.settings import ModuleSettings
    from tests.security.tls import Material

    served: list[uvicorn.Config] = []
    settings = ModuleSettings(planner={"audience": "planner-aud"})
    monkeypatch.setattr(cli, "_runtime", lambda kubeconfig, component="cli": (settings, object()))
    # No API server here: informers on no kind (synced, empty); tests/planner_service/test_informers.py
    # runs the real ones.
    from worker.observer.inventory import InventoryInformers

    monkeypatch.setattr(InventoryInformers, "for_cluster", classmethod(lambda cls, api: cls([])))
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: served.append(self.config))
    runner = CliRunner()

    # No certificate: refused, unless the unsafe test-only flag says otherwise.
    refused = runner.invoke(cli.app, ["planner", "--port", "9099"])
    assert refused.exit_code == 2
    assert "plain http" in refused.output
    assert not served
    half = runner.invoke(cli.app, ["planner", "--tls-cert-file", str(tmp_path / "tls.crt")])
    assert half.exit_code != 0
    assert not served

    material = Material.make(tmp_path)
    args = ["--tls-cert-file", str(material.server.cert), "--tls-key-file", str(material.server.key)]
    result = runner.invoke(cli.app, ["planner", "--host", "0.0.0.0", "--port", "9099", *args])
    assert result.exit_code == 0, result.output
    (config,) = served
    assert (config.host, config.port) == ("0.0.0.0", 9099)
    assert isinstance(config.ssl, ssl.SSLContext)
    assert config.ssl.minimum_version >= ssl.TLSVersion.TLSv1_2
    with TestClient(config.app) as client:  # type: ignore[arg-type]
        assert client.get("/healthz").text == "ok\n"
        response = client.post(PATH, content=b"{}")
        assert response.status_code == 401
        assert "planner-aud" not in response.text

    served.clear()
    settings.planner.allowInsecureHttp = True
    assert runner.invoke(cli.app, ["planner"]).exit_code == 0
    assert served[0].ssl is None


def test_a_renewed_serving_certificate_is_served_to_new_connections(tmp_path: Path) -> None:
    import shutil
    import socket
    import ssl

    from planner.service import CertificateReloader
    from tests.planner_service import serving
    from tests.security.tls import Material

    first, second = Material.make(tmp_path / "a"), Material.make(tmp_path / "b")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copy(first.server.cert, cert)
    shutil.copy(first.server.key, key)

    def served_certificate(port: int) -> bytes:
        context = ssl.create_default_context(cafile=str(first.server.ca))
        context.load_verify_locations(cafile=str(second.server.ca))
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as sock,
            context.wrap_socket(sock, server_hostname="localhost") as tls,
        ):
            der = tls.getpeercert(binary_form=True)
            assert der is not None
            return der

    def der(path: Path) -> bytes:
        return ssl.PEM_cert_to_DER_cert(path.read_text())

    app = create_app(lambda: sim_snapshot(), FakeReviewer())
    with serving(app, tls=(cert, key)) as served:
        port = int(served.url.rsplit(":", 1)[1])
        assert served.url.startswith("https://")
        assert served_certificate(port) == der(first.server.cert)
        assert isinstance(served.config.ssl, ssl.SSLContext)
        reloader = CertificateReloader(served.config.ssl, str(cert), str(key))
        assert reloader.check() is False  # nothing changed yet
        shutil.copy(second.server.cert, cert)
        shutil.copy(second.server.key, key)
        assert reloader.check() is True
        assert served_certificate(port) == der(second.server.cert)


def test_metrics_count_plans_by_outcome_without_a_token(http: TestClient) -> None:
    before = http.get("/metrics")
    assert before.status_code == 200
    assert 'ai_inference_planner_plans_total{outcome="Planned"}' not in before.text
    assert post(http, ALLOWED).status_code == 200
    after = http.get("/metrics").text
    assert 'ai_inference_planner_plans_total{outcome="Planned"} 1.0' in after
    assert "ai_inference_planner_plan_seconds_count 1.0" in after
    assert "ai_inference_planner_bookings 0.0" in after
