"""A rollback reads every payload a later release wrote, not only the workflows' own state models
(docs/upgrade.md, rule 3): the API types that travel in workflow payloads (the order's state, signals,
updates, queries, activity arguments and results) drop fields they do not know.

Every pydantic model reachable from those payloads is found from the workflow and activity
definitions themselves (a new payload type is checked without being listed here); then payloads as a
later release writes them — an unknown field at every level — are decoded through the module's data
converter, as a worker decodes them. The planner API's request, which is no workflow payload, still
refuses an unknown field; users' input is refused by the CRD schemas (tests/crd).
"""

from __future__ import annotations

import inspect
import typing
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError
from temporalio import workflow
from temporalio.contrib.pydantic import pydantic_data_converter

import activities.order
import activities.preemption
from inference_api.observation import HealthReport, ObservedChange
from inference_api.payloads import ApplyResult, OrderRef, ProbeResult
from inference_api.plan import (
    LaunchPlan,
    LaunchPlanRequest,
    OrderFacts,
    PlanOutcome,
    PlanRefusal,
    Recipe,
    RecipeSource,
    ReplicaPlacement,
)
from inference_api.preemption import HpaCondition, ScalingObservation
from inference_api.types import PlacementType, SharingMode
from workflows.order import OrderWorkflow
from workflows.order_state import OrderState, ReplicaTrouble
from workflows.preemption import PreemptionWorkflow

LATER = {"fieldOfALaterRelease": {"any": ["shape", 1]}}


def _models_in(annotation: Any, found: set[type[BaseModel]]) -> None:
    """Every pydantic model an annotation names, and those their fields name, recursively."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation in found:
            return
        found.add(annotation)
        for field in annotation.model_fields.values():
            _models_in(field.annotation, found)
        return
    for arg in typing.get_args(annotation):
        _models_in(arg, found)


def _activity_types() -> list[Any]:
    annotations: list[Any] = []
    for module in (activities.order, activities.preemption):
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__:
                continue
            for _, method in inspect.getmembers(cls, inspect.isfunction):
                if not hasattr(method, "__temporal_activity_definition"):
                    continue
                annotations.extend(typing.get_type_hints(method).values())
    return annotations


def _workflow_types(cls: type[Any]) -> list[Any]:
    definition = workflow._Definition.from_class(cls)
    assert definition is not None, cls
    annotations: list[Any] = [*(definition.arg_types or [])]
    handlers: list[Any] = [*definition.signals.values(), *definition.updates.values(), *definition.queries.values()]
    for handler in handlers:
        annotations.extend(handler.arg_types or [])
        annotations.append(getattr(handler, "ret_type", None))
    annotations.append(definition.ret_type)
    return annotations


def payload_models(workflows: tuple[type[Any], ...]) -> set[type[BaseModel]]:
    found: set[type[BaseModel]] = set()
    for annotation in [*_activity_types(), *(a for cls in workflows for a in _workflow_types(cls))]:
        _models_in(annotation, found)
    return found


def _strict(models: set[type[BaseModel]]) -> list[str]:
    return sorted(f"{m.__module__}.{m.__qualname__}" for m in models if m.model_config.get("extra") == "forbid")


def test_the_walk_finds_the_payloads_it_must() -> None:
    """The walk itself: it reaches the nested types (a plan's recipe, a signal's argument)."""
    found = payload_models((OrderWorkflow,))
    assert {OrderState, LaunchPlan, Recipe, ReplicaPlacement, PlanOutcome, PlanRefusal, ApplyResult} <= found
    assert {ReplicaTrouble, HealthReport, ObservedChange, ScalingObservation, HpaCondition} <= found
    assert LaunchPlanRequest not in found  # the planner API's body is built inside an activity


def test_no_model_an_order_workflow_payload_carries_refuses_a_field_it_does_not_know() -> None:
    assert _strict(payload_models((OrderWorkflow,))) == []


def test_no_model_the_preemption_workflow_carries_refuses_a_field_it_does_not_know() -> None:
    assert _strict(payload_models((PreemptionWorkflow,))) == []


def _decoded(body: Any, type_: type[Any]) -> Any:
    converter = pydantic_data_converter.payload_converter
    (payload,) = converter.to_payloads([body])
    (value,) = converter.from_payloads([payload], [type_])
    return value


def _later(model: BaseModel, **nested: Any) -> dict[str, Any]:
    body: dict[str, Any] = {**model.model_dump(mode="json"), **LATER}
    body.update(nested)
    return body


PLAN = LaunchPlan(
    deviceClass="nvidia-h100-mig",
    acceleratorProductName="H100",
    acceleratorMemoryGiB=80,
    placementMode=PlacementType.WHOLE_DEVICE,
    sharingMode=SharingMode.DEDICATED,
    deviceCount=1,
    sharePercent=100,
    cpu="4",
    memory="32Gi",
    modelVolumeGiB=20,
    recipe=Recipe(
        source=RecipeSource.COMPILED,
        runtimeVersion="0.11.0",
        image="vllm:0.11.0",
        hardwareFamily="hopper",
        vramMinimumGiB=2,
    ),
    nodeName="gpu-1",
    deviceNames=["gpu-0"],
    replicaPlacements=[ReplicaPlacement(nodeName="gpu-1", deviceNames=["gpu-0"])],
)


def _later_plan() -> dict[str, Any]:
    return _later(
        PLAN,
        recipe=_later(PLAN.recipe),
        replicaPlacements=[_later(p) for p in PLAN.replicaPlacements],
    )


def test_an_order_state_whose_plan_a_later_release_wrote_is_read() -> None:
    state = OrderState(ref=OrderRef(namespace="support", name="chat", uid="0b9c-uid"), generation=3, plan=PLAN)
    body = _later(state, ref=_later(state.ref), plan=_later_plan())
    assert _decoded(body, OrderState) == state


def test_activity_results_a_later_release_wrote_are_read() -> None:
    outcome = PlanOutcome(plan=PLAN)
    assert _decoded(_later(outcome, plan=_later_plan()), PlanOutcome) == outcome
    refused = PlanOutcome(refusal=PlanRefusal(reason="NoAcceleratorWithEnoughMemory", message="none fits"))
    assert _decoded(_later(refused, refusal=_later(refused.refusal)), PlanOutcome) == refused  # type: ignore[arg-type]
    probe = ProbeResult(ok=True, workloadReady=True, detail="200")
    assert _decoded(_later(probe), ProbeResult) == probe


def test_signals_a_later_release_sends_are_read() -> None:
    for signal in (
        ReplicaTrouble(reason="NodeLost", message="gone", action="Replan", subject="gpu-1"),
        ObservedChange(what="Service x deleted", kind="Service"),
    ):
        assert _decoded(_later(signal), type(signal)) == signal
    scaling = ScalingObservation(autoscalerFound=True, conditions=[HpaCondition(type="AbleToScale", status="True")])
    body = _later(scaling, conditions=[_later(c) for c in scaling.conditions])
    assert _decoded(body, ScalingObservation) == scaling


def test_the_planner_api_still_refuses_a_field_it_does_not_know() -> None:
    """Not a workflow payload: a caller's misspelt field is an HTTP 400, not silently dropped."""
    facts = OrderFacts(modelName="Qwen/Qwen2.5-0.5B-Instruct")
    with pytest.raises(ValidationError, match="fieldOfALaterRelease"):
        OrderFacts.model_validate(_later(facts))
    assert LaunchPlanRequest.model_config.get("extra") == "forbid"
