"""Which orders the observer probes (``decisions.serving``), from their published status, pure."""

from __future__ import annotations

from typing import Any

import pytest

from worker.observer import decisions as d


def order(phase: str, *conditions: tuple[str, str, str], deleting: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "chat", "namespace": "team", "uid": "u-1"}
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-05T00:00:00Z"
    return {
        "metadata": metadata,
        "status": {
            "phase": phase,
            "conditions": [{"type": t, "status": s, "reason": r} for t, s, r in conditions],
        },
    }


CLASS_OK = ("ClassResolved", "True", "ClassResolved")
CLASS_GONE = ("ClassResolved", "False", "ClassNotFound")
MODEL_REFUSED = ("ModelResolved", "False", "FormatNotAllowed")


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (order("Ready", CLASS_OK, ("Ready", "True", "ProbeSucceeded")), d.Serving.HEALTHY),
        (order("Degraded", CLASS_OK, ("Ready", "True", "ProbeSucceeded")), d.Serving.HEALTHY),
        (order("Failed", CLASS_OK, ("Ready", "False", "ServiceUnhealthy")), d.Serving.UNHEALTHY),
        # Serving while its class or model refuses it: published Ready False with that reason.
        (order("Degraded", CLASS_GONE, ("Ready", "False", "ClassNotFound")), d.Serving.HEALTHY),
        (order("Degraded", CLASS_OK, MODEL_REFUSED, ("Ready", "False", "FormatNotAllowed")), d.Serving.HEALTHY),
        # Not serving: being brought up, a Ready False whose reason no refusing step carries, deleting.
        (order("Pending", CLASS_GONE, ("Ready", "False", "ClassNotFound")), d.Serving.NO),
        (order("Degraded", CLASS_OK, ("Ready", "False", "ClassNotFound")), d.Serving.NO),
        (order("Degraded", CLASS_GONE, ("Ready", "False", "HealthCheckFailed")), d.Serving.NO),
        (order("Ready", CLASS_OK, ("Ready", "True", "ProbeSucceeded"), deleting=True), d.Serving.NO),
        (order("Ready", CLASS_OK), d.Serving.NO),
    ],
)
def test_an_order_is_probed_while_its_workload_serves(status: dict[str, Any], expected: d.Serving) -> None:
    assert d.serving(status) == expected
