"""The pure checks of activities/trusted_status.py: what a status write and an Event may say of an
order, whatever the run that asks says (issue 33: status, endpoint URL, Secret name and Events are
derived from the order, not copied from workflow state)."""

from __future__ import annotations

from typing import Any

import pytest

from activities.trusted_status import (
    EVENT_MESSAGE_MAX,
    being_deleted,
    order_endpoint_urls,
    trusted_event,
    trusted_status,
)
from inference_api.payloads import OrderEvent, OrderRef, StatusUpdate
from inference_api.reasons import EventReason, Reason
from inference_api.settings import ModuleSettings
from inference_api.types import Condition, ConditionStatus, EndpointStatus, ExposureType, Phase
from tests import factories as f

SETTINGS = ModuleSettings()
REF = OrderRef(namespace="support", name="support-llm", uid=f.UID)


def order_obj(deleting: bool = False, generation: int = 3) -> dict[str, Any]:
    obj = f.order(generation=generation).model_dump(mode="json", exclude_none=True)
    if deleting:
        obj["metadata"]["deletionTimestamp"] = "2026-12-04T00:00:00Z"
    return obj


def update(**fields: Any) -> StatusUpdate:
    return StatusUpdate(ref=REF, phase=Phase.READY, **fields)


def deleting_condition() -> Condition:
    return Condition(
        type="Ready",
        status=ConditionStatus.FALSE,
        reason=Reason.DELETING.value,
        message="the order is being deleted",
        lastTransitionTime="2026-12-04T00:00:00Z",
    )


def test_being_deleted_reads_the_deletion_timestamp() -> None:
    assert being_deleted(order_obj(deleting=True))
    assert not being_deleted(order_obj())
    assert not being_deleted(None)


@pytest.mark.parametrize(
    "asked",
    [
        {"phase": Phase.PENDING, "reason": Reason.DELETING.value},
        {"conditions": [deleting_condition()]},
    ],
    ids=["phase-reason", "condition"],
)
def test_deleting_is_written_only_on_an_order_being_deleted(asked: dict[str, Any]) -> None:
    asked_update = StatusUpdate(ref=REF, **({"phase": Phase.PENDING} | asked))
    written, dropped = trusted_status(asked_update, order_obj(), SETTINGS)
    assert written is None
    assert dropped == ["a Deleting status of an order that is not being deleted"]
    written, dropped = trusted_status(asked_update, order_obj(deleting=True), SETTINGS)
    assert written == asked_update
    assert dropped == []


def test_the_orders_own_endpoint_and_secret_are_written_as_asked() -> None:
    for url in order_endpoint_urls(f.order(), SETTINGS):
        asked = update(endpoint=EndpointStatus(url=url, type=ExposureType.EXTERNAL), authSecretName="support-llm-auth")
        written, dropped = trusted_status(asked, order_obj(), SETTINGS)
        assert written == asked
        assert dropped == []


def test_the_order_can_have_its_external_host_and_its_service_url() -> None:
    assert order_endpoint_urls(f.order(), SETTINGS) == {
        "http://support-llm.support.svc",
        "https://support-llm.support.ai.example.com",
    }


def test_another_endpoint_url_is_dropped() -> None:
    asked = update(endpoint=EndpointStatus(url="https://evil.example.com", type=ExposureType.EXTERNAL))
    written, dropped = trusted_status(asked, order_obj(), SETTINGS)
    assert written is not None
    assert written.endpoint is None
    assert dropped == ["an endpoint URL the order cannot have"]


def test_another_orders_secret_is_dropped() -> None:
    written, dropped = trusted_status(update(authSecretName="other-llm-auth"), order_obj(), SETTINGS)
    assert written is not None
    assert written.authSecretName is None
    assert dropped == ["a Secret that is not the order's own auth Secret"]


def test_an_observed_generation_ahead_of_the_order_is_cut_to_the_orders() -> None:
    written, dropped = trusted_status(update(observedGeneration=99), order_obj(generation=3), SETTINGS)
    assert written is not None
    assert written.observedGeneration == 3
    assert dropped == ["an observedGeneration ahead of the order's"]
    written, dropped = trusted_status(update(observedGeneration=3), order_obj(generation=3), SETTINGS)
    assert dropped == []


def test_the_modules_own_events_are_recorded() -> None:
    for reason in EventReason:
        event = OrderEvent(ref=REF, reason=reason.value, message="m", type="Warning")
        assert trusted_event(event) == event


@pytest.mark.parametrize(
    "event",
    [
        OrderEvent(ref=REF, reason="Scheduled", message="pods moved"),
        OrderEvent(ref=REF, reason=EventReason.CAPACITY_PREEMPTED.value, message="m", type="Error"),
    ],
    ids=["foreign-reason", "foreign-type"],
)
def test_an_event_the_module_never_records_is_refused(event: OrderEvent) -> None:
    assert trusted_event(event) is None


def test_a_long_event_message_is_cut_to_what_the_api_server_keeps() -> None:
    event = OrderEvent(ref=REF, reason=EventReason.DELETE_REFUSED.value, message="x" * 5000)
    kept = trusted_event(event)
    assert kept is not None
    assert len(kept.message) == EVENT_MESSAGE_MAX
    assert kept.message.endswith("…")


def disabled_order_obj() -> dict[str, Any]:
    """An order as the module's disable left it (worker/disable.py)."""
    obj = order_obj()
    obj["status"] = {"phase": "Pending", "reason": Reason.MODULE_DISABLED.value, "conditions": []}
    return obj


def test_a_status_decided_before_the_disable_does_not_replace_module_disabled() -> None:
    """An activity scheduled before the disable and run after the enable says Ready of a workload
    that is gone: the order keeps ModuleDisabled until its reconcile (which read it) writes."""
    trusted, dropped = trusted_status(update(), disabled_order_obj(), SETTINGS)
    assert trusted is None
    assert dropped == ["a status decided before the module was disabled (the next reconcile writes it)"]


def test_a_run_that_read_module_disabled_replaces_it() -> None:
    asked = update(seenModuleDisabled=True)
    assert trusted_status(asked, disabled_order_obj(), SETTINGS) == (asked, [])


def test_the_disable_guard_leaves_other_statuses_alone() -> None:
    obj = order_obj()
    obj["status"] = {"phase": "Pending", "reason": Reason.NO_CAPACITY.value}
    asked = update()
    assert trusted_status(asked, obj, SETTINGS) == (asked, [])
