"""A rollback reads what the later release wrote: the workflows' state models drop fields they do not
know instead of refusing them (docs/upgrade.md).

A run's state travels as the workflow's input (signal-with-start by the observer, continue-as-new);
a later release adds fields to it; after a rollback this release decodes that input. With
``extra="forbid"`` the decode fails and the run's every workflow task with it (stuck until the later
release comes back); with ``extra="ignore"`` the fields are dropped and, the module being
level-triggered, what they held is derived again at the next reconcile.
"""

from __future__ import annotations

from typing import Any

from temporalio.contrib.pydantic import pydantic_data_converter

from inference_api.payloads import OrderRef
from workflows.order_state import OrderState, ReplanOutcome, ScalingProfile
from workflows.preemption import PreemptionState, PreemptionTimings


def _later(model: Any, **nested: dict[str, Any]) -> dict[str, Any]:
    """``model`` as a later release writes it: every field it knows, plus one it does not (also in the
    nested objects named)."""
    body: dict[str, Any] = model.model_dump(mode="json")
    body["fieldOfALaterRelease"] = {"any": ["shape", 1]}
    for key, extra in nested.items():
        body[key] = {**body[key], **extra}
    return body


def _decoded(body: dict[str, Any], type_: type[Any]) -> Any:
    """Through the module's data converter, as the worker decodes a workflow's input."""
    converter = pydantic_data_converter.payload_converter
    (payload,) = converter.to_payloads([body])
    (value,) = converter.from_payloads([payload], [type_])
    return value


def test_the_order_state_of_a_later_release_is_read() -> None:
    state = OrderState(
        ref=OrderRef(namespace="support", name="chat", uid="0b9c-uid"),
        generation=3,
        scalingProfile=ScalingProfile(autoscaled=True, minReplicas=1, maxReplicas=2),
    )
    read = _decoded(_later(state, scalingProfile={"newBound": 7}), OrderState)
    assert read == state
    outcome = ReplanOutcome(planned=True, reason="", message="", replanCount=0)
    assert ReplanOutcome.model_validate({**outcome.model_dump(), "fieldOfALaterRelease": 1}) == outcome


def test_the_preemption_state_of_a_later_release_is_read() -> None:
    state = PreemptionState(deviceClass="nvidia-hopper-s3-shared", decisions=4)
    read = _decoded(_later(state, timings={"newTiming": 2.5}), PreemptionState)
    assert read == state
    assert read.timings == PreemptionTimings()
