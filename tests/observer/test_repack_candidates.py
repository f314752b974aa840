"""Which serving orders the observer's repack asks to move (worker/observer/repack.py)."""

from __future__ import annotations

from typing import Any

import pytest

from inference_api.types import InferenceServiceClass
from tests import factories as f
from worker.observer.repack import parsed_classes, repack_candidates, stranded

SHARED = {"allowedSharingModes": ["Shared"], "allowedPlacementTypes": ["WholeDevice"], "minSharePercent": 25}


def a_class(**spec: Any) -> InferenceServiceClass:
    return f.service_class(**({"acceleratorPolicy": SHARED, "updatePolicy": {"strategy": "RollingUpdate"}} | spec))


def order(
    name: str = "o",
    *,
    share: int = 100,
    phase: str = "Ready",
    ready: str = "True",
    workload_reason: str = "WorkloadApplied",
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-06T00:00:00Z"
    return {
        "metadata": meta,
        "spec": {"inferenceServiceClassName": "a-class"},
        "status": {
            "phase": phase,
            "resolved": {"sharePercent": share},
            "conditions": [
                {"type": "Ready", "status": ready, "reason": "ProbeSucceeded"},
                {"type": "WorkloadReady", "status": "True", "reason": workload_reason},
            ],
        },
    }


def test_a_serving_order_on_a_whole_device_under_a_class_that_could_share_is_a_candidate() -> None:
    assert stranded(order(), a_class())


@pytest.mark.parametrize(
    ("the_order", "why"),
    [
        (order(share=25), "already on a share"),
        (order(phase="Pending", ready="False"), "not serving"),
        (order(ready="False"), "not Ready"),
        (order(deleting=True), "being deleted"),
        (order(workload_reason="WorkloadMoving"), "already moving"),
    ],
)
def test_orders_that_could_not_move_now_are_not_asked(the_order: dict[str, Any], why: str) -> None:
    assert not stranded(the_order, a_class()), why


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ({"acceleratorPolicy": None}, "no acceleratorPolicy: a whole dedicated device"),
        ({"acceleratorPolicy": SHARED | {"allowedSharingModes": ["Dedicated"]}}, "Dedicated only"),
        ({"acceleratorPolicy": SHARED | {"minSharePercent": 100}}, "a floor of a whole device"),
        ({"updatePolicy": {"strategy": "RollingUpdate", "moves": "Never"}}, "moves: Never"),
        ({"updatePolicy": {"strategy": "OnDelete"}}, "OnDelete"),
        ({"scalingPolicy": {"minReplicas": 1, "maxReplicas": 3}}, "autoscaled: the HPA owns replicas"),
    ],
)
def test_classes_that_forbid_or_cannot_give_a_smaller_place_are_not_asked(spec: dict[str, Any], why: str) -> None:
    assert not stranded(order(), a_class(**spec)), why


def test_an_order_whose_class_is_gone_is_not_asked() -> None:
    assert not stranded(order(), None)


def test_a_pass_asks_at_most_its_limit_in_a_stable_order() -> None:
    classes = parsed_classes([a_class().model_dump(mode="json", exclude_none=True)])
    orders = [order("c"), order("a", share=50), order("b"), order("d")]
    picked = repack_candidates(orders, classes, limit=2)
    assert [o["metadata"]["name"] for o in picked] == ["b", "c"]


def test_a_class_that_does_not_parse_is_left_out() -> None:
    assert parsed_classes([{"metadata": {"name": "broken"}, "spec": {"modelPolicy": 3}}]) == {}
