"""benchmarks.scale.placement_check: planned = allocated, read from listings (pure)."""

from __future__ import annotations

import json
from typing import Any

from activities.builders.claim import ANNOTATION_PLANNED_PLACEMENTS
from activities.builders.common import LABEL_ORDER
from benchmarks.scale import placement_check
from worker.observer.replica_placer import ANNOTATION_REPLICA_PLACEMENT as RECORD


def template(order: str, places: list[tuple[str, list[str]]]) -> dict[str, Any]:
    note = json.dumps([{"node": n, "devices": d} for n, d in places])
    return {
        "metadata": {
            "name": f"{order}-claim",
            "labels": {LABEL_ORDER: order},
            "annotations": {ANNOTATION_PLANNED_PLACEMENTS: note},
        }
    }


def pod(order: str, ordinal: int, record: tuple[str, list[str]] | None = None) -> dict[str, Any]:
    annotations = {RECORD: json.dumps({"node": record[0], "devices": record[1]})} if record else {}
    name = f"{order}-{ordinal}"
    return {
        "metadata": {"name": name, "labels": {LABEL_ORDER: order}, "annotations": annotations},
        "status": {"resourceClaimStatuses": [{"name": "accelerator", "resourceClaimName": f"{name}-claim"}]},
    }


def claim(name: str, node: str | None, device: str = "gpu-0") -> dict[str, Any]:
    status = {"allocation": {"devices": {"results": [{"pool": node, "device": device}]}}} if node else {}
    return {"metadata": {"name": name}, "status": status}


def test_a_replica_on_its_planned_device_counts_and_one_elsewhere_is_named() -> None:
    check = placement_check(
        [template("a", [("n1", ["gpu-0"])]), template("b", [("n2", ["gpu-1"])])],
        [pod("a", 0), pod("b", 0)],
        [claim("a-0-claim", "n1", "gpu-0"), claim("b-0-claim", "n2", "gpu-3")],
    )
    assert (check.planned, check.placed, check.unallocated) == (1, 0, 0)
    assert check.elsewhere == ["b-0 on n2/gpu-3"]
    assert check.describe().startswith("1 of 2 replicas")


def test_a_replica_beyond_the_plan_counts_where_the_placer_put_it() -> None:
    check = placement_check(
        [template("a", [("n1", ["gpu-0"])])],
        [pod("a", 0), pod("a", 1, record=("n2", ["gpu-2"])), pod("a", 2, record=("n2", ["gpu-2"]))],
        [claim("a-0-claim", "n1"), claim("a-1-claim", "n2", "gpu-2"), claim("a-2-claim", "n3", "gpu-2")],
    )
    assert (check.planned, check.placed) == (1, 1)
    assert check.elsewhere == ["a-2 on n3/gpu-2"]  # not where the placer's record says


def test_a_replica_whose_claim_is_not_allocated_yet_is_counted_apart() -> None:
    check = placement_check([template("a", [("n1", ["gpu-0"])])], [pod("a", 0)], [claim("a-0-claim", None)])
    assert (check.replicas, check.unallocated, check.planned) == (1, 1, 0)
