"""The placement benchmark's figures (benchmarks/placement.py), on hand-made objects: pure."""

from __future__ import annotations

import json
import math
from typing import Any

from benchmarks.placement import (
    Agreement,
    Placed,
    agree,
    allocated_places,
    chosen_subrequests,
    difference,
    histogram,
    placed_agreement,
    planned_places,
    quantile,
    unallocated,
)

PAGE = """# HELP ai_inference_planner_plan_seconds x
ai_inference_planner_plan_seconds_bucket{le="0.01"} 2.0
ai_inference_planner_plan_seconds_bucket{le="0.1"} 8.0
ai_inference_planner_plan_seconds_bucket{le="1.0"} 10.0
ai_inference_planner_plan_seconds_bucket{le="+Inf"} 10.0
ai_inference_planner_plan_seconds_sum 1.5
ai_inference_planner_plan_seconds_count 10.0
"""


def test_planned_and_allocated_places_are_read_from_the_template_and_the_claims() -> None:
    template = {
        "metadata": {
            "annotations": {
                "ai.deckhouse.io/planned-placements": json.dumps([{"node": "a", "devices": ["gpu-0", "gpu-1"]}])
            }
        }
    }
    assert planned_places(template) == [("a", "gpu-0"), ("a", "gpu-1")]
    assert planned_places({"metadata": {}}) is None
    claim = {"status": {"allocation": {"devices": {"results": [{"pool": "a", "device": "gpu-0"}]}}}}
    assert allocated_places([claim, {"status": {}}]) == [("a", "gpu-0")]
    assert chosen_subrequests([claim]) == {}


def test_the_subrequest_the_allocator_chose_is_counted() -> None:
    def claim(request: str) -> dict[str, object]:
        return {"status": {"allocation": {"devices": {"results": [{"request": request, "pool": "a", "device": "g"}]}}}}

    assert chosen_subrequests([claim("gpu/planned"), claim("gpu/any"), claim("gpu/planned"), claim("gpu")]) == {
        "planned": 2,
        "any": 1,
    }
    total = Agreement(chosen=chosen_subrequests([claim("gpu/planned")]))
    total.add(Agreement(orders=1, chosen=chosen_subrequests([claim("gpu/any")])))
    assert total.orders == 1
    assert total.chosen == {"planned": 1, "any": 1}
    assert "subrequests chosen {'any': 1, 'planned': 1}" in total.line()


def test_agreement_counts_planned_devices_and_exact_orders() -> None:
    figures = Agreement()
    agree([("a", "g0"), ("a", "g1")], [("a", "g1"), ("a", "g0")], figures, "exact")
    agree([("a", "g0"), ("a", "g1")], [("a", "g0")], figures, "one-running")  # a replica not started
    agree([("a", "g0"), ("a", "g1")], [("a", "g0"), ("a", "g0")], figures, "stacked")
    agree([("a", "g0")], [("b", "g9")], figures, "elsewhere")
    agree(None, [("b", "g9")], figures, "unpinned")
    assert (figures.orders, figures.pinned, figures.replicas, figures.on_planned) == (5, 4, 7, 5)
    assert figures.exact_orders == 2
    assert figures.waiting == 1  # one-running's second planned replica
    assert [m.split(":")[0] for m in figures.misses] == ["stacked", "elsewhere"]


def test_latency_quantiles_from_the_histogram_buckets() -> None:
    before = histogram(PAGE, "ai_inference_planner_plan_seconds")
    assert before[1:] == (1.5, 10.0)
    assert quantile(before[0], 0.5) == 0.01 + (0.1 - 0.01) * (3 / 6)
    assert quantile(before[0], 0.95) == 0.1 + (1.0 - 0.1) * (1.5 / 2)
    zero = difference(before, before)
    assert zero[2] == 0
    assert math.isnan(quantile(zero[0], 0.5))


def test_orders_short_of_their_planned_replicas_are_named() -> None:
    def template(devices: list[str]) -> dict[str, Any]:
        placements = [{"node": "a", "devices": [d]} for d in devices]
        return {"metadata": {"annotations": {"ai.deckhouse.io/planned-placements": json.dumps(placements)}}}

    def claim(device: str | None) -> dict[str, object]:
        if device is None:
            return {"status": {}}
        return {"status": {"allocation": {"devices": {"results": [{"pool": "a", "device": device}]}}}}

    templates: dict[str, dict[str, Any]] = {
        "full": template(["g0", "g1"]),
        "short": template(["g0", "g1"]),
        "plain": {"metadata": {}},
    }
    claims = {"full": [claim("g0"), claim("g1")], "short": [claim("g0"), claim(None)], "plain": []}
    assert unallocated(["full", "short", "plain", "absent"], templates, claims) == ["short"]


def _replica(name: str, node: str | None, record: dict[str, Any] | None, claim: str, **extra: Any) -> dict[str, Any]:
    annotations = {"ai.deckhouse.io/replica-placement": json.dumps(record)} if record else {}
    return {
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"nodeName": node, **extra.pop("spec", {})},
        "status": {"resourceClaimStatuses": [{"name": "accelerator", "resourceClaimName": claim}], **extra},
    }


def _claim(pool: str, device: str) -> dict[str, Any]:
    return {"status": {"allocation": {"devices": {"results": [{"pool": pool, "device": device}]}}}}


def test_each_autoscaled_replica_is_compared_with_where_the_placer_put_it() -> None:
    placed = Placed()
    pods = [
        _replica("a-0", "n1", {"node": "n1", "devices": ["gpu-0"], "request": "gpu/planned"}, "c0"),
        _replica("a-1", "n1", {"node": "n1", "devices": ["gpu-1"], "request": "gpu/any"}, "c1"),
        _replica("a-2", "n2", None, "c2"),  # allocated by the scheduler alone: no record
        _replica(
            "a-3",
            None,
            None,
            "c3",
            spec={"schedulingGates": [{"name": "ai.deckhouse.io/replica-placement"}]},
            conditions=[{"type": "ai.deckhouse.io/ReplicaPlaced", "status": "False", "reason": "NoPlace"}],
        ),
    ]
    claims = {"c0": _claim("n1", "gpu-0"), "c1": _claim("n1", "gpu-2"), "c2": _claim("n2", "gpu-0")}
    placed_agreement(pods, claims, placed)
    assert (placed.replicas, placed.recorded, placed.allocated_as_recorded, placed.bound_as_recorded) == (4, 2, 1, 2)
    assert placed.waiting == 1
    assert placed.misses == [
        "a-1: placed {'node': 'n1', 'devices': ['gpu-1'], 'request': 'gpu/any'}, allocated [('n1', 'gpu-2')]",
        "a-2: no placement recorded",
    ]
    assert "2 placed by the replica placer, 1 allocated exactly where placed" in placed.line()
