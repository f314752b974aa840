"""The planner client: PlanInput → LaunchPlanRequest, the audience-bound token, HTTPS and in-process paths."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes.client import ApiClient, Configuration

import activities.planner_client as client_module
from activities.planner_client import (
    HttpPlanner,
    PlannerServiceError,
    ProjectedToken,
    TokenUnavailableError,
    launch_plan_request,
    make_planner,
)
from inference_api.catalog_types import ModelFacts
from inference_api.payloads import OrderRef, PlanInput
from inference_api.plan import LaunchPlanRequest, OrderFacts, PlanOutcome, PlanRefusal, Toleration
from inference_api.reasons import Reason
from inference_api.settings import InsecureTransportError, ModuleSettings
from inference_api.types import EndpointType, InferenceService, InferenceServiceClass
from planner import PlanningRequest, plan_launch
from tests.planner.helpers import DEFAULT_LLM, sim_snapshot

TOKEN = "sa-token-c2VjcmV0LXNob3VsZC1uZXZlci1sZWFr"


def plan_input(parameter_count: str | None = None, facts: ModelFacts | None = None, **policy: Any) -> PlanInput:
    model: dict[str, Any] = {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-32B-Instruct-AWQ"}}
    if parameter_count:
        model["parameterCount"] = parameter_count
    order = InferenceService.model_validate(
        {
            "metadata": {"name": "support-llm", "namespace": "support", "uid": "u-1"},
            "spec": {"inferenceServiceClassName": "default-llm", "model": model},
        }
    )
    spec: dict[str, Any] = {"modelPolicy": {"allowedEndpointTypes": ["Chat"]}}
    if policy:
        spec["acceleratorPolicy"] = policy
    cls = InferenceServiceClass.model_validate({"metadata": {"name": "default-llm"}, "spec": spec})
    return PlanInput(
        ref=OrderRef(namespace="support", name="support-llm", uid="u-1"),
        order=order,
        cls=cls,
        facts=facts,
        servedName="Qwen/Qwen2.5-32B-Instruct-AWQ",
        endpointType=EndpointType.CHAT,
    )


def test_the_request_carries_facts_policy_fallback_class_and_holder() -> None:
    settings = ModuleSettings(planner={"runtimeFallback": {"enabled": False}})
    facts = ModelFacts(parameterCount="32B", quantization="awq", format="safetensors")
    body = launch_plan_request(
        plan_input("33B", facts, allowedSharingModes=["Shared"], maxAcceleratorCount=2), settings
    )
    assert body.facts == OrderFacts(
        modelName="Qwen/Qwen2.5-32B-Instruct-AWQ",
        parameterCount="32B",
        orderParameterCount="33B",
        quantization="awq",
        format="safetensors",
        endpointType=EndpointType.CHAT,
    )
    assert body.acceleratorPolicy is not None
    assert body.acceleratorPolicy.maxAcceleratorCount == 2
    assert body.runtimeFallback.enabled is False
    assert body.className == "default-llm"
    assert body.holder == "support/support-llm"
    assert body.currentPlan is None

    bare = launch_plan_request(plan_input(), ModuleSettings())
    assert bare.facts.parameterCount is None
    assert bare.facts.orderParameterCount is None
    assert bare.acceleratorPolicy is None  # a class without one: one whole, dedicated device
    assert bare.runtimeFallback.enabled is True
    assert (bare.tolerations, bare.nodeSelector) == ([], {})


def test_the_request_carries_what_the_replicas_pods_tolerate_and_select() -> None:
    """The planner service judges taints and the nodeSelector against what the worker's pods carry."""
    settings = ModuleSettings.model_validate(
        {
            "workload": {
                "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "nodeSelector": {"node-role/gpu": ""},
            }
        }
    )
    body = launch_plan_request(plan_input(), settings)
    assert body.tolerations == [Toleration(key="gpu", operator="Exists", effect="NoSchedule")]
    assert body.nodeSelector == {"node-role/gpu": ""}
    assert LaunchPlanRequest.model_validate_json(body.model_dump_json()) == body


def _api(authorization: str | None) -> ApiClient:
    configuration = Configuration()
    configuration.host = "https://127.0.0.1:1"
    if authorization is not None:
        configuration.api_key["authorization"] = authorization
    return ApiClient(configuration)


def jwt(audiences: list[str] | str, subject: str = "system:serviceaccount:d8-ai-inference:ai-inference-worker") -> str:
    """A JWT-shaped token (unsigned: the client only reads its audience; the server reviews it)."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256'})}.{part({'aud': audiences, 'sub': subject})}.c2lnbmF0dXJl"


def test_the_projected_token_is_read_again_when_the_kubelet_rotates_it(tmp_path: Path) -> None:
    token_file = tmp_path / "planner"
    first, second = jwt(["ai-inference-planner"]), jwt("ai-inference-planner", subject="rotated")
    token_file.write_text(first + "\n")
    token = ProjectedToken(token_file, "ai-inference-planner")
    assert token() == first
    # The kubelet writes a new file and swaps it in (a new inode), as atomic writers do.
    replacement = tmp_path / "planner.new"
    replacement.write_text(second)
    replacement.replace(token_file)
    assert token() == second
    token_file.write_text("opaque-test-token")  # not a JWT: its audience is the server's to judge
    assert token() == "opaque-test-token"


def test_a_token_for_another_audience_or_no_token_is_never_sent(tmp_path: Path) -> None:
    # The pod's own ServiceAccount token (audience: the API server) mounted by mistake.
    token_file = tmp_path / "token"
    own = jwt(["https://kubernetes.default.svc.cluster.local"])
    token_file.write_text(own)
    with pytest.raises(TokenUnavailableError, match="refusing to send it") as caught:
        ProjectedToken(token_file, "ai-inference-planner")()
    assert own not in str(caught.value)
    with pytest.raises(TokenUnavailableError, match="cannot be read"):
        ProjectedToken(tmp_path / "missing", "ai-inference-planner")()

    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(500)

    transport = httpx.MockTransport(answer)
    planner = HttpPlanner(
        "https://planner.test", ProjectedToken(token_file, "ai-inference-planner"), 5, ModuleSettings(), transport
    )
    with pytest.raises(TokenUnavailableError):
        planner(plan_input())
    assert sent == []


def _outcome() -> PlanOutcome:
    request = launch_plan_request(plan_input(), ModuleSettings())
    return plan_launch(PlanningRequest(**dict(request), inventory=sim_snapshot()))


def test_http_planner_posts_the_request_with_the_token() -> None:
    seen: list[httpx.Request] = []
    expected = _outcome()

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=expected.model_dump_json())

    planner = HttpPlanner(
        "http://planner.test:8080/", lambda: TOKEN, 5, ModuleSettings(), transport=httpx.MockTransport(answer)
    )
    outcome = planner(plan_input())
    assert outcome == expected
    (request,) = seen
    assert str(request.url) == "http://planner.test:8080/api/v1/launch-plan"
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    sent = LaunchPlanRequest.model_validate(json.loads(request.content))
    assert sent == launch_plan_request(plan_input(), ModuleSettings())


def test_a_refusal_is_an_outcome_not_an_error() -> None:
    refusal = PlanOutcome(refusal=PlanRefusal(reason=Reason.NO_CAPACITY, message="full"))
    transport = httpx.MockTransport(lambda r: httpx.Response(200, content=refusal.model_dump_json()))
    planner = HttpPlanner("http://planner.test", lambda: TOKEN, 5, ModuleSettings(), transport=transport)
    assert planner(plan_input()) == refusal


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (403, {"error": "Forbidden", "message": 'user "x" may not create'}, 'HTTP 403 Forbidden: user "x" may not'),
        (401, {"error": "Unauthorized", "message": "no bearer token"}, "HTTP 401 Unauthorized: no bearer token"),
        (502, "<html>bad gateway</html>", "HTTP 502 Bad Gateway: <html>bad gateway</html>"),
    ],
)
def test_error_statuses_raise_without_the_token(status: int, body: Any, expected: str) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if isinstance(body, dict):
            return httpx.Response(status, json=body)
        return httpx.Response(status, text=body)

    planner = HttpPlanner(
        "http://planner.test", lambda: TOKEN, 5, ModuleSettings(), transport=httpx.MockTransport(answer)
    )
    with pytest.raises(PlannerServiceError) as caught:
        planner(plan_input())
    assert expected in str(caught.value)
    assert caught.value.status == status
    assert TOKEN not in str(caught.value)


def test_transport_errors_raise() -> None:
    def fail(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    planner = HttpPlanner(
        "http://planner.test", lambda: TOKEN, 5, ModuleSettings(), transport=httpx.MockTransport(fail)
    )
    with pytest.raises(httpx.ConnectError) as caught:
        planner(plan_input())
    assert TOKEN not in str(caught.value)


def test_make_planner_refuses_plain_http_unless_told_it_is_a_test() -> None:
    api = _api("Bearer x")
    for url in ("http://planner.test:8080", "planner.test:8080"):
        with pytest.raises(InsecureTransportError, match=r"planner\.baseURL"):
            make_planner(ModuleSettings(planner={"baseURL": url}), api)
    unsafe = make_planner(ModuleSettings(planner={"baseURL": "http://planner.test", "allowInsecureHttp": True}), api)
    assert isinstance(unsafe, HttpPlanner)
    unsafe.close()


def test_make_planner_chooses_https_or_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    api = _api("Bearer x")
    remote = make_planner(ModuleSettings(planner={"baseURL": "https://planner.test:8080"}), api)
    assert isinstance(remote, HttpPlanner)
    assert remote.url == "https://planner.test:8080/api/v1/launch-plan"
    remote.close()

    calls: list[Any] = []

    def fake_read(api_: ApiClient, **kwargs: Any) -> Any:
        calls.append((api_, kwargs))
        return sim_snapshot()

    monkeypatch.setattr(client_module, "read_inventory", fake_read)
    local = make_planner(ModuleSettings(planner={"timeoutSeconds": 7}), api)
    outcome = local(plan_input(**DEFAULT_LLM.model_dump(exclude_none=True)))
    assert calls == [(api, {"timeout": 7})]
    assert outcome.plan is not None
    assert outcome.plan.recipe.hardwareFamily == "hopper"


def test_over_https_the_server_is_verified_against_the_ca_file(tmp_path: Path) -> None:
    """The real client against the real service over TLS (a stand-in reviewer): the CA of the
    planner's certificate is trusted, another CA is not, and the token goes only where it is meant."""
    from planner.service import create_app
    from tests.planner_service import running_service
    from tests.planner_service.fakes import ALLOWED, FakeReviewer
    from tests.security.tls import Material

    material, other = Material.make(tmp_path / "planner"), Material.make(tmp_path / "other")
    token_file = tmp_path / "planner-token"
    token_file.write_text(ALLOWED)
    app = create_app(sim_snapshot, FakeReviewer())
    with running_service(app, tls=(material.server.cert, material.server.key)) as url:

        def planner(ca: Path) -> Any:
            settings = ModuleSettings(planner={"baseURL": url, "caFile": str(ca), "tokenFile": str(token_file)})
            return make_planner(settings, _api(None))

        trusted = planner(material.server.ca)
        assert trusted(plan_input(**DEFAULT_LLM.model_dump(exclude_none=True))).plan is not None
        trusted.close()
        untrusted = planner(other.server.ca)
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED") as caught:
            untrusted(plan_input())
        assert ALLOWED not in str(caught.value)
        untrusted.close()


def test_a_repack_target_is_sent_only_when_set_so_a_planner_a_release_behind_still_answers() -> None:
    """The planner's request model forbids fields it does not know: a worker upgraded before its planner
    sends ``preferDevice`` only with a consolidating move's plan."""
    bodies: list[dict[str, Any]] = []
    expected = _outcome()

    def answer(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, content=expected.model_dump_json())

    planner = HttpPlanner(
        "http://planner.test", lambda: TOKEN, 5, ModuleSettings(), transport=httpx.MockTransport(answer)
    )
    planner(plan_input())
    targeted = plan_input().model_copy(update={"besideCurrent": True, "preferDevice": "gpu-t4-0/gpu-1"})
    planner(targeted)
    assert "preferDevice" not in bodies[0]
    assert bodies[1]["preferDevice"] == "gpu-t4-0/gpu-1"
    assert bodies[1]["besideCurrent"] is True
    # The release before knew every other field: an untargeted body names none it would refuse.
    assert set(bodies[0]) <= set(LaunchPlanRequest.model_fields) - {"preferDevice"}
    assert LaunchPlanRequest.model_validate(bodies[0]).preferDevice is None
