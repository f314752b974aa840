"""Phase and reason from conditions (``workflows.status.compute_phase``), pure."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from inference_api.reasons import Reason
from inference_api.types import Condition, ConditionStatus, ConditionType, Phase
from workflows.status import (
    compute_phase,
    get_condition,
    is_true,
    published_conditions,
    set_condition,
    trouble_advice,
)

NOW = datetime(2026, 12, 1, tzinfo=UTC)
T, F = ConditionStatus.TRUE, ConditionStatus.FALSE


def conditions(*entries: tuple[ConditionType, ConditionStatus, Reason]) -> list[Condition]:
    out: list[Condition] = []
    for type_, status, reason in entries:
        out = set_condition(out, type_, status, reason, "m", 1, NOW)
    return out


SERVING = (
    (ConditionType.CLASS_RESOLVED, T, Reason.CLASS_RESOLVED),
    (ConditionType.MODEL_RESOLVED, T, Reason.MODEL_RESOLVED),
    (ConditionType.PLANNED, T, Reason.LAUNCH_PLAN_CALCULATED),
    (ConditionType.WORKLOAD_READY, T, Reason.WORKLOAD_APPLIED),
    (ConditionType.READY, T, Reason.PROBE_SUCCEEDED),
)


def test_a_serving_order_with_nothing_wrong_is_ready_with_no_reason() -> None:
    assert compute_phase(conditions(*SERVING)) == (Phase.READY, None)


@pytest.mark.parametrize(
    ("type_", "reason"),
    [
        (ConditionType.WORKLOAD_READY, Reason.RUNTIME_CRASH_LOOPING),
        (ConditionType.WORKLOAD_READY, Reason.NODE_LOST),
    ],
)
def test_a_serving_order_whose_replica_is_in_trouble_stays_ready_with_that_reason(
    type_: ConditionType, reason: Reason
) -> None:
    """Its workload keeps serving; the status says what is wrong (never Ready with no reason)."""
    found = conditions(*SERVING, (type_, F, reason))
    assert compute_phase(found) == (Phase.READY, reason.value)
    assert published_conditions(found) == found


@pytest.mark.parametrize(
    ("type_", "reason"),
    [
        (ConditionType.CLASS_RESOLVED, Reason.CLASS_NOT_FOUND),
        (ConditionType.CLASS_RESOLVED, Reason.CLASS_NOT_READY),
        (ConditionType.CLASS_RESOLVED, Reason.NAMESPACE_NOT_ALLOWED),
        (ConditionType.MODEL_RESOLVED, Reason.FORMAT_NOT_ALLOWED),
    ],
)
def test_a_serving_order_its_class_or_model_refuses_is_degraded_and_not_ready(
    type_: ConditionType, reason: Reason
) -> None:
    """Its workload keeps serving, but `kubectl wait --for=condition=Ready` must not take it for
    healthy: the published Ready says False with the refusal's reason, since the refusal."""
    found = conditions(*SERVING)
    later = datetime(2026, 12, 2, tzinfo=UTC)
    found = set_condition(found, type_, F, reason, "the class is gone", 1, later)
    assert compute_phase(found) == (Phase.DEGRADED, reason.value)
    ready = get_condition(published_conditions(found), ConditionType.READY)
    assert ready is not None
    assert (ready.status, ready.reason) == (F, reason.value)
    assert ready.lastTransitionTime == "2026-12-02T00:00:00Z"
    assert "still serves" in ready.message
    assert "the class is gone" in ready.message
    # The run's own conditions are not touched: Ready stays True there (health, probes).
    assert is_true(found, ConditionType.READY)


def test_the_published_ready_is_true_again_from_when_the_refusal_ended() -> None:
    found = conditions(*SERVING)
    found = set_condition(found, ConditionType.CLASS_RESOLVED, F, Reason.CLASS_NOT_FOUND, "m", 1, NOW)
    healed = datetime(2026, 12, 3, tzinfo=UTC)
    found = set_condition(found, ConditionType.CLASS_RESOLVED, T, Reason.CLASS_RESOLVED, "m", 1, healed)
    ready = get_condition(published_conditions(found), ConditionType.READY)
    assert ready is not None
    assert (ready.status, ready.lastTransitionTime) == (T, "2026-12-03T00:00:00Z")
    assert compute_phase(found) == (Phase.READY, None)
    # An order that never had a refusal is published as it is.
    assert published_conditions(conditions(*SERVING)) == conditions(*SERVING)


def test_a_refusing_class_comes_before_growth_and_a_failed_order_is_failed() -> None:
    found = conditions(
        *SERVING,
        (ConditionType.CLASS_RESOLVED, F, Reason.CLASS_NOT_FOUND),
        (ConditionType.SCALING_HEALTHY, F, Reason.SCALE_UP_BLOCKED),
    )
    assert compute_phase(found) == (Phase.DEGRADED, Reason.CLASS_NOT_FOUND.value)
    growth = conditions(*SERVING, (ConditionType.SCALING_HEALTHY, F, Reason.SCALE_UP_BLOCKED))
    assert compute_phase(growth) == (Phase.DEGRADED, Reason.SCALE_UP_BLOCKED.value)
    failed = conditions(*SERVING, (ConditionType.READY, F, Reason.SERVICE_UNHEALTHY))
    assert compute_phase(failed) == (Phase.FAILED, Reason.SERVICE_UNHEALTHY.value)


def test_a_loading_order_in_trouble_is_pending_with_the_trouble() -> None:
    found = conditions(
        *SERVING[:3],
        (ConditionType.WORKLOAD_READY, F, Reason.QUOTA_EXCEEDED),
        (ConditionType.READY, F, Reason.QUOTA_EXCEEDED),
    )
    assert compute_phase(found) == (Phase.PENDING, Reason.QUOTA_EXCEEDED.value)


def test_the_advice_says_who_must_act_or_when_the_order_plans_again() -> None:
    assert "ResourceQuota" in trouble_advice(Reason.QUOTA_EXCEEDED)
    assert "spec.model" in trouble_advice(Reason.MODEL_DOWNLOAD_FAILED)
    assert trouble_advice(Reason.NODE_LOST, 0) == "the order plans its placement again now, away from what failed"
    assert "in 15 s" in trouble_advice(Reason.CLAIM_NOT_ALLOCATABLE, 15)
