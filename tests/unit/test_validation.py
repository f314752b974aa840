"""The order matrix: every refusal reason of the user guide reached with a bad input."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inference_api.catalog_types import ModelFacts
from inference_api.reasons import Reason
from inference_api.types import (
    Condition,
    ConditionStatus,
    EndpointType,
    InferenceService,
    InferenceServiceClass,
)
from workflows.validation import (
    check_catalog_enabled,
    check_class,
    check_model_policy,
    judged_parameter_count,
    parameter_count_from_name,
    parse_parameter_count,
    pick_endpoint_type,
)

READY = Condition(
    type="Ready", status=ConditionStatus.TRUE, reason="ClassValid", lastTransitionTime="2026-01-01T00:00:00Z"
)


def make_class(ready: bool = True, **spec: Any) -> InferenceServiceClass:
    body: dict[str, Any] = {"modelPolicy": {"allowedEndpointTypes": ["Chat", "Embeddings", "Rerank"]}}
    body.update(spec)
    cls = InferenceServiceClass.model_validate({"metadata": {"name": "default-llm"}, "spec": body})
    if ready:
        cls.status.conditions.append(READY)
    return cls


def make_order(
    name: str = "Qwen/Qwen2.5-32B-Instruct-AWQ",
    src: str = "HuggingFace",
    namespace: str = "support",
    parameter_count: str | None = None,
    kind: str | None = None,
) -> InferenceService:
    ref: dict[str, Any] = {"name": name}
    if kind:
        ref["kind"] = kind
    model: dict[str, Any] = {"src": src, "ref": ref}
    if parameter_count:
        model["parameterCount"] = parameter_count
    return InferenceService.model_validate(
        {
            "metadata": {"name": "support-llm", "namespace": namespace},
            "spec": {"inferenceServiceClassName": "default-llm", "model": model},
        }
    )


EMBEDDING_FACTS = ModelFacts(parameterCount="560M", format="safetensors", endpointTypes=[EndpointType.EMBEDDINGS])


def test_missing_class_is_class_not_found() -> None:
    refusal = check_class(make_order(), None)
    assert refusal is not None
    assert refusal.reason is Reason.CLASS_NOT_FOUND
    assert "default-llm" in refusal.message
    assert "spec.inferenceServiceClassName" in refusal.message


def test_class_without_ready_condition_is_class_not_ready() -> None:
    refusal = check_class(make_order(), make_class(ready=False))
    assert refusal is not None
    assert refusal.reason is Reason.CLASS_NOT_READY


def test_class_without_contracts_is_class_not_ready() -> None:
    cls = make_class()
    cls.spec.modelPolicy.allowedEndpointTypes = []
    refusal = check_class(make_order(), cls)
    assert refusal is not None
    assert refusal.reason is Reason.CLASS_NOT_READY
    assert "allowedEndpointTypes" in refusal.message


def test_namespace_outside_allow_list_is_refused() -> None:
    cls = make_class(admissionPolicy={"allowedNamespaces": ["analytics"]})
    refusal = check_class(make_order(namespace="support"), cls)
    assert refusal is not None
    assert refusal.reason is Reason.NAMESPACE_NOT_ALLOWED
    assert "support" in refusal.message
    assert "analytics" in refusal.message


@pytest.mark.parametrize("allowed", [["*"], ["support"], ["analytics", "support"]])
def test_admitted_namespace_passes(allowed: list[str]) -> None:
    assert check_class(make_order(), make_class(admissionPolicy={"allowedNamespaces": allowed})) is None


def test_class_without_admission_policy_admits_every_namespace() -> None:
    assert check_class(make_order(namespace="anything"), make_class()) is None


def test_catalog_embedding_model_is_served_as_embeddings() -> None:
    assert pick_endpoint_type(make_class(), EMBEDDING_FACTS) is EndpointType.EMBEDDINGS


def test_same_model_from_bare_hugging_face_reference_is_served_as_chat() -> None:
    # No facts on the direct path: the whole list stands and the first element wins, as the docs warn.
    assert pick_endpoint_type(make_class(), None) is EndpointType.CHAT


def test_contract_order_follows_the_class_list() -> None:
    cls = make_class(modelPolicy={"allowedEndpointTypes": ["Rerank", "Chat"]})
    facts = ModelFacts(endpointTypes=[EndpointType.CHAT, EndpointType.RERANK])
    assert pick_endpoint_type(cls, facts) is EndpointType.RERANK


def test_no_intersection_is_endpoint_type_policy_conflict() -> None:
    cls = make_class(modelPolicy={"allowedEndpointTypes": ["Chat"]})
    refusal = check_model_policy(make_order(), cls, EMBEDDING_FACTS)
    assert refusal is not None
    assert refusal.reason is Reason.ENDPOINT_TYPE_POLICY_CONFLICT
    assert "Embeddings" in refusal.message
    assert "Chat" in refusal.message


def test_format_outside_allow_list_is_format_not_allowed() -> None:
    cls = make_class(modelPolicy={"allowedEndpointTypes": ["Embeddings"], "allowedFormats": ["gguf"]})
    refusal = check_model_policy(make_order(), cls, EMBEDDING_FACTS)
    assert refusal is not None
    assert refusal.reason is Reason.FORMAT_NOT_ALLOWED
    assert "safetensors" in refusal.message


def test_format_in_allow_list_passes_case_insensitively() -> None:
    cls = make_class(modelPolicy={"allowedEndpointTypes": ["Embeddings"], "allowedFormats": ["SafeTensors"]})
    assert check_model_policy(make_order(), cls, EMBEDDING_FACTS) is None


@pytest.mark.parametrize(
    ("name", "allowed", "admitted"),
    [
        ("Qwen/Qwen2.5-7B-Instruct-GGUF", ["gguf"], True),
        ("Qwen/Qwen2.5-7B-Instruct-GGUF", ["safetensors"], False),
        ("Qwen/Qwen2.5-32B-Instruct-AWQ", ["safetensors"], True),
        ("Qwen/Qwen2.5-32B-Instruct-AWQ", ["AWQ"], True),
        ("Qwen/Qwen2.5-32B-Instruct-AWQ", ["gguf"], False),
        ("TheBloke/Llama-2-7B-GPTQ", ["gptq"], True),
    ],
)
def test_a_direct_order_is_judged_by_the_format_its_name_announces(
    name: str, allowed: list[str], admitted: bool
) -> None:
    cls = make_class(modelPolicy={"allowedEndpointTypes": ["Chat"], "allowedFormats": allowed})
    refusal = check_model_policy(make_order(name=name), cls, None)
    if admitted:
        assert refusal is None
    else:
        assert refusal is not None
        assert refusal.reason is Reason.FORMAT_NOT_ALLOWED
        assert "by its name" in refusal.message


def test_a_direct_order_whose_name_announces_no_format_is_refused_with_advice() -> None:
    cls = make_class(modelPolicy={"allowedEndpointTypes": ["Chat"], "allowedFormats": ["safetensors"]})
    refusal = check_model_policy(make_order(name="Qwen/Qwen2.5-7B-Instruct"), cls, None)
    assert refusal is not None
    assert refusal.reason is Reason.FORMAT_NOT_ALLOWED
    assert "format of 'Qwen/Qwen2.5-7B-Instruct' is unknown" in refusal.message
    assert "src: ai-models" in refusal.message


def test_a_class_without_formats_admits_a_direct_order_of_any_name() -> None:
    cls = make_class(modelPolicy={"allowedEndpointTypes": ["Chat"]})
    assert check_model_policy(make_order(name="Qwen/Qwen2.5-7B-Instruct"), cls, None) is None


def test_catalog_fact_over_limit_is_parameter_count_not_allowed() -> None:
    cls = make_class(modelPolicy={"allowedEndpointTypes": ["Chat"], "maxParameterCount": "1B"})
    facts = ModelFacts(parameterCount="7B", endpointTypes=[EndpointType.CHAT])
    refusal = check_model_policy(make_order(name="acme/tiny"), cls, facts)
    assert refusal is not None
    assert refusal.reason is Reason.PARAMETER_COUNT_NOT_ALLOWED
    assert "7B" in refusal.message
    assert "1B" in refusal.message


def test_name_token_over_limit_is_parameter_count_not_allowed() -> None:
    cls = make_class(modelPolicy={"allowedEndpointTypes": ["Chat"], "maxParameterCount": "1B"})
    refusal = check_model_policy(make_order(name="Qwen/Qwen2.5-32B-Instruct-AWQ"), cls, None)
    assert refusal is not None
    assert refusal.reason is Reason.PARAMETER_COUNT_NOT_ALLOWED
    assert "32B" in refusal.message


def test_order_value_wins_over_name_token() -> None:
    order = make_order(name="acme/model-70B", parameter_count="360M")
    cls = make_class(modelPolicy={"allowedEndpointTypes": ["Chat"], "maxParameterCount": "1B"})
    assert check_model_policy(order, cls, None) is None


def test_catalog_fact_wins_over_order_value() -> None:
    order = make_order(name="acme/model", parameter_count="360M")
    facts = ModelFacts(parameterCount="7B")
    assert judged_parameter_count(order, facts) == 7 * 10**9


def test_unknown_size_under_a_limit_is_refused_with_advice() -> None:
    cls = make_class(modelPolicy={"allowedEndpointTypes": ["Chat"], "maxParameterCount": "1B"})
    refusal = check_model_policy(make_order(name="acme/mystery-model"), cls, None)
    assert refusal is not None
    assert refusal.reason is Reason.PARAMETER_COUNT_NOT_ALLOWED
    assert "spec.model.parameterCount" in refusal.message


def test_model_within_every_policy_passes() -> None:
    cls = make_class(modelPolicy={"allowedEndpointTypes": ["Chat"], "maxParameterCount": "70B"})
    assert check_model_policy(make_order(), cls, None) is None


def test_catalog_order_with_catalog_off_is_catalog_disabled() -> None:
    order = make_order(name="qwen2-5-8b", src="ai-models", kind="ClusterModel")
    refusal = check_catalog_enabled(order, catalog_enabled=False)
    assert refusal is not None
    assert refusal.reason is Reason.CATALOG_DISABLED
    assert "catalog.mode" in refusal.message


def test_hugging_face_order_with_catalog_off_is_unaffected() -> None:
    assert check_catalog_enabled(make_order(), catalog_enabled=False) is None


def test_catalog_order_with_catalog_on_passes() -> None:
    order = make_order(name="qwen2-5-8b", src="ai-models", kind="ClusterModel")
    assert check_catalog_enabled(order, catalog_enabled=True) is None


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Qwen/Qwen2.5-32B-Instruct-AWQ", 32 * 10**9),
        ("HuggingFaceTB/SmolLM2-360M-Instruct", 360 * 10**6),
        ("HuggingFaceTB/SmolLM2-360m", 360 * 10**6),
        ("Qwen/Qwen2.5-1.5B-Instruct", 1_500_000_000),
        ("meta-llama/Llama-3.1-8B", 8 * 10**9),
        ("intfloat/multilingual-e5-large", None),
        ("Qwen/Qwen2.5", None),
        ("qwen2-5-32b-instruct-awq", 32 * 10**9),
    ],
)
def test_size_token_of_a_model_name(name: str, expected: int | None) -> None:
    assert parameter_count_from_name(name) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("32B", 32 * 10**9),
        ("360M", 360 * 10**6),
        ("1.5b", 1_500_000_000),
        ("2T", 2 * 10**12),
        ("7", None),
        ("", None),
        (None, None),
        ("B7", None),
    ],
)
def test_parse_parameter_count(value: str | None, expected: int | None) -> None:
    assert parse_parameter_count(value) == expected


@given(st.integers(min_value=1, max_value=999), st.sampled_from(["K", "M", "B", "T"]))
def test_parameter_count_round_trips_through_a_name(number: int, suffix: str) -> None:
    assert parameter_count_from_name(f"org/model-{number}{suffix}-chat") == parse_parameter_count(f"{number}{suffix}")
