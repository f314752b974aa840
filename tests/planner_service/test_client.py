"""The planner client: PlanInput → LaunchPlanRequest, the bearer token, HTTP and in-process paths."""

from __future__ import annotations

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
    bearer_token,
    launch_plan_request,
    make_planner,
)
from inference_api.catalog_types import ModelFacts
from inference_api.payloads import OrderRef, PlanInput
from inference_api.plan import LaunchPlanRequest, OrderFacts, PlanOutcome, PlanRefusal
from inference_api.reasons import Reason
from inference_api.settings import ModuleSettings
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
    assert body.acceleratorPolicy is not None and body.acceleratorPolicy.maxAcceleratorCount == 2
    assert body.runtimeFallback.enabled is False
    assert body.className == "default-llm"
    assert body.holder == "support/support-llm"
    assert body.currentPlan is None

    bare = launch_plan_request(plan_input(), ModuleSettings())
    assert bare.facts.parameterCount is None and bare.facts.orderParameterCount is None
    assert bare.acceleratorPolicy is None  # a class without one: one whole, dedicated device
    assert bare.runtimeFallback.enabled is True


def _api(authorization: str | None) -> ApiClient:
    configuration = Configuration()
    configuration.host = "https://127.0.0.1:1"
    if authorization is not None:
        configuration.api_key["authorization"] = authorization
    return ApiClient(configuration)


def test_bearer_token_prefers_the_service_account_file(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    assert bearer_token(_api("Bearer other"), token_file) == TOKEN
    missing = tmp_path / "missing"
    assert bearer_token(_api("Bearer from-kubeconfig"), missing) == "from-kubeconfig"
    assert bearer_token(_api(None), missing) is None
    loaded = _api(None)  # how the kubeconfig loader stores it
    loaded.configuration.api_key["BearerToken"] = "Bearer loaded"
    assert bearer_token(loaded, missing) == "loaded"

    refreshed = _api(None)
    refreshed.configuration.refresh_api_key_hook = lambda c: c.api_key.__setitem__("authorization", "bearer fresh")
    assert bearer_token(refreshed, missing) == "fresh"


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


def test_make_planner_chooses_http_or_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    api = _api("Bearer x")
    remote = make_planner(ModuleSettings(planner={"baseURL": "http://planner.test:8080"}), api)
    assert isinstance(remote, HttpPlanner)
    assert remote.url == "http://planner.test:8080/api/v1/launch-plan"
    remote.close()

    calls: list[Any] = []

    def fake_read(api_: ApiClient, **kwargs: Any) -> Any:
        calls.append((api_, kwargs))
        return sim_snapshot()

    monkeypatch.setattr(client_module, "read_inventory", fake_read)
    local = make_planner(ModuleSettings(planner={"timeoutSeconds": 7}), api)
    outcome = local(plan_input(**DEFAULT_LLM.model_dump(exclude_none=True)))
    assert calls == [(api, {"timeout": 7})]
    assert outcome.plan is not None and outcome.plan.recipe.hardwareFamily == "hopper"
