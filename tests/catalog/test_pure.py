"""Pure functions of the catalog client: scope, served name, namespaces, verdicts."""

from __future__ import annotations

from activities.catalog import (
    CatalogLookupAnswer,
    CatalogPath,
    catalog_disabled_outcome,
    lookup_namespace,
    model_resolution,
    model_scope,
    outcome_from_result,
    rest_lookup_params,
    result_from_object,
    served_model_name,
    uses_catalog,
)
from inference_api.catalog_types import CatalogLookupResult, ModelFacts
from inference_api.reasons import CAPACITY_REFUSALS, Reason
from inference_api.types import ModelKind, ModelRef, ModelScope, ModelSource, ModelSpec
from tests.factories import E5_FACTS, QWEN_FACTS, QWEN_SOURCE, catalog_object, make_settings


def test_scope_follows_the_kind() -> None:
    assert model_scope(ModelKind.CLUSTER_MODEL) is ModelScope.CLUSTER
    assert model_scope(ModelKind.MODEL) is ModelScope.NAMESPACE


def test_served_name_is_the_catalog_fact_else_the_reference_name() -> None:
    ref = ModelRef(kind=ModelKind.CLUSTER_MODEL, name="qwen2-5-32b-instruct-awq")
    assert served_model_name(QWEN_FACTS, ref) == "Qwen/Qwen2.5-32B-Instruct-AWQ"
    assert served_model_name(ModelFacts(), ref) == "qwen2-5-32b-instruct-awq"
    assert served_model_name(ModelFacts(servedName=""), ref) == "qwen2-5-32b-instruct-awq"


def test_a_model_is_looked_up_in_its_own_namespace_else_the_orders() -> None:
    assert lookup_namespace(ModelRef(kind=ModelKind.MODEL, name="m"), "support") == "support"
    assert lookup_namespace(ModelRef(kind=ModelKind.MODEL, name="m", namespace="shared"), "support") == "shared"
    assert lookup_namespace(ModelRef(kind=ModelKind.CLUSTER_MODEL, name="m"), "support") is None


def test_rest_query_names_the_namespace_only_for_a_model() -> None:
    assert rest_lookup_params(ModelKind.CLUSTER_MODEL, "m", None) == {"kind": "ClusterModel", "name": "m"}
    assert rest_lookup_params(ModelKind.MODEL, "m", "ns") == {"kind": "Model", "name": "m", "namespace": "ns"}


def test_only_ai_models_orders_use_the_catalog() -> None:
    hf = ModelSpec(src=ModelSource.HUGGING_FACE, ref=ModelRef(name="Qwen/Qwen2.5-7B-Instruct"))
    catalog = ModelSpec(src=ModelSource.AI_MODELS, ref=ModelRef(kind=ModelKind.CLUSTER_MODEL, name="qwen"))
    assert not uses_catalog(hf)
    assert uses_catalog(catalog)


def test_object_to_lookup_result() -> None:
    ready = result_from_object(ModelKind.MODEL, catalog_object(ModelKind.MODEL, "e5", "team-a", facts=E5_FACTS))
    assert ready == CatalogLookupAnswer(
        kind="Model", name="e5", namespace="team-a", ready=True, scope=ModelScope.NAMESPACE, facts=E5_FACTS
    )
    for phase in ("Pending", "Failed"):
        obj = catalog_object(ModelKind.CLUSTER_MODEL, "q", phase=phase, facts=QWEN_FACTS)
        assert not result_from_object(ModelKind.CLUSTER_MODEL, obj).ready
    with_source = catalog_object(ModelKind.CLUSTER_MODEL, "q", facts=QWEN_FACTS, source=QWEN_SOURCE)
    assert result_from_object(ModelKind.CLUSTER_MODEL, with_source).source == QWEN_SOURCE
    # A freshly created object has no status yet: not ready, no facts.
    bare = {"metadata": {"name": "new"}}
    result = result_from_object(ModelKind.CLUSTER_MODEL, bare)
    assert not result.ready
    assert result.facts == ModelFacts()
    assert result.scope is ModelScope.CLUSTER


def test_ready_result_resolves_without_the_models_namespace() -> None:
    ref = ModelRef(kind=ModelKind.MODEL, name="e5", namespace="shared-models")
    result = CatalogLookupResult(
        kind="Model", name="e5", namespace="shared-models", ready=True, scope=ModelScope.NAMESPACE, facts=E5_FACTS
    )
    outcome = outcome_from_result(result, ref, "shared-models", make_settings(), CatalogPath.REST)
    assert outcome.ok
    assert outcome.reason is None
    assert outcome.resolved is not None
    assert outcome.resolved.scope is ModelScope.NAMESPACE
    assert outcome.resolved.servedName == "e5"
    assert outcome.resolved.facts == E5_FACTS
    # What travels on to the workload never names the model's namespace.
    assert "shared-models" not in outcome.resolved.model_dump_json()
    assert "namespace" not in type(outcome.resolved).model_fields


def test_scope_comes_from_the_reference_not_the_answer() -> None:
    ref = ModelRef(kind=ModelKind.CLUSTER_MODEL, name="q")
    lying = CatalogLookupResult(kind="ClusterModel", name="q", ready=True, scope=ModelScope.NAMESPACE)
    outcome = outcome_from_result(lying, ref, None, make_settings(), CatalogPath.REST)
    assert outcome.resolved is not None
    assert outcome.resolved.scope is ModelScope.CLUSTER


def test_not_ready_asks_to_look_again_after_the_configured_seconds() -> None:
    ref = ModelRef(kind=ModelKind.CLUSTER_MODEL, name="q")
    result = CatalogLookupResult(kind="ClusterModel", name="q", ready=False, scope=ModelScope.CLUSTER)
    outcome = outcome_from_result(result, ref, None, make_settings(requeue=45), CatalogPath.KUBERNETES)
    assert not outcome.ok
    assert outcome.reason is Reason.MODEL_NOT_READY
    assert outcome.requeueAfterSeconds == 45
    assert "45s" in outcome.message
    assert Reason.MODEL_NOT_READY in CAPACITY_REFUSALS  # the order waits and looks again


def test_not_found_names_what_was_looked_for() -> None:
    ref = ModelRef(kind=ModelKind.MODEL, name="missing")
    outcome = outcome_from_result(None, ref, "support", make_settings(), CatalogPath.REST)
    assert outcome.reason is Reason.MODEL_NOT_FOUND
    assert outcome.requeueAfterSeconds is None
    assert 'Model "missing" in namespace "support"' in outcome.message
    assert "order's namespace" in outcome.message


def test_not_found_while_the_lookup_service_is_down_looks_again() -> None:
    """Only the objects answered: the lookup service may know the model, so it is not a final no."""
    ref = ModelRef(kind=ModelKind.CLUSTER_MODEL, name="rest-only")
    why = "HTTP 503 from the lookup service"
    outcome = outcome_from_result(None, ref, None, make_settings(requeue=45), CatalogPath.KUBERNETES, why)
    assert outcome.reason is Reason.MODEL_NOT_FOUND
    assert outcome.requeueAfterSeconds == 45
    assert why in outcome.message
    assert "looks again in 45s" in outcome.message
    assert outcome.restUnavailable == why
    assert model_resolution(outcome, ref).retryAfterSeconds == 45


def test_catalog_disabled_tells_the_reader_what_to_do() -> None:
    outcome = catalog_disabled_outcome(ModelRef(kind=ModelKind.CLUSTER_MODEL, name="q"))
    assert outcome.reason is Reason.CATALOG_DISABLED
    assert outcome.answeredBy is CatalogPath.NONE
    assert "src: HuggingFace" in outcome.message
    assert "catalog.mode: Enabled" in outcome.message


def test_model_resolution_payload_for_the_workflow() -> None:
    ref = ModelRef(kind=ModelKind.CLUSTER_MODEL, name="qwen2-5-32b-instruct-awq")
    obj = catalog_object(ModelKind.CLUSTER_MODEL, ref.name, facts=QWEN_FACTS, source=QWEN_SOURCE)
    ok = outcome_from_result(
        result_from_object(ModelKind.CLUSTER_MODEL, obj), ref, None, make_settings(), CatalogPath.KUBERNETES
    )
    resolution = model_resolution(ok, ref)
    assert resolution.refusal is None
    assert resolution.facts == QWEN_FACTS
    assert resolution.scope is ModelScope.CLUSTER
    assert resolution.servedName == "Qwen/Qwen2.5-32B-Instruct-AWQ"
    assert resolution.source == QWEN_SOURCE

    waiting = outcome_from_result(
        result_from_object(ModelKind.CLUSTER_MODEL, {**obj, "status": {"phase": "Pending"}}),
        ref,
        None,
        make_settings(requeue=20),
        CatalogPath.REST,
    )
    refused = model_resolution(waiting, ref)
    assert refused.refusal is Reason.MODEL_NOT_READY
    assert refused.retryAfterSeconds == 20
    assert refused.facts is None
    assert refused.source is None
    assert refused.message == waiting.message
