"""An order planned onto a device another order took meanwhile moves by itself (FAQ,
``ClaimNotAllocatable``: "the order moves by itself"), on the end-to-end stand.

The stand plans in-process, with no bookings (docs/planner.md, "Where"): two orders of one device
class planned in the same instant both get the first Tesla T4 — one shared, one the whole card. The
scheduler allocates one; the other's replica waits, ``ClaimNotAllocatable``, and its order plans
again after its backoff (15 s) onto another card, which replaces its claim template. Its waiting pod
still holds a claim made from the old template, and the pod template did not change, so the
StatefulSet controller leaves it; the observer deletes it (``decisions.pods_with_stale_claims``) and
the replica is made again with a claim of the new template. Before that fix the order stayed
``ClaimNotAllocatable`` for good (three runs of three here: replanned at 20 s and 142 s, each time a
new template and the same waiting pod).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from inference_api.types import CLASSES, GROUP, VERSION
from tests.e2e.stand import DEFAULT_LLM, Stand

pytestmark = [pytest.mark.cluster, pytest.mark.temporal]

SMALL = {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}}


def t4_class(name: str, sharing: str) -> dict[str, Any]:
    """One fixed replica (pinned where the plan puts it) on the whole Tesla T4s, ``sharing`` only."""
    spec = {
        "modelPolicy": {"allowedEndpointTypes": ["Chat"]},
        "acceleratorPolicy": {
            "allowedSharingModes": [sharing],
            "allowedPlacementTypes": ["WholeDevice"],
            "allowedDeviceClasses": ["nvidia-t4-mps-physical"],
            "maxAcceleratorCount": 1,
        },
        "exposurePolicy": {"type": "ClusterLocal", "authentication": "None"},
        "updatePolicy": {"strategy": "RollingUpdate"},
    }
    return {**DEFAULT_LLM, "metadata": {"name": name}, "spec": spec}


async def test_orders_planned_onto_one_device_at_once_both_come_to_serve(stand: Stand) -> None:
    suffix = uuid.uuid4().hex[:6]
    names = {"Dedicated": f"e2e-t4-dedicated-{suffix}", "Shared": f"e2e-t4-shared-{suffix}"}
    try:
        for sharing, class_name in names.items():
            stand.custom.create_cluster_custom_object(GROUP, VERSION, CLASSES, t4_class(class_name, sharing))
        await stand.until(
            lambda: all(
                any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in (
                        stand.custom.get_cluster_custom_object(GROUP, VERSION, CLASSES, n).get("status") or {}
                    ).get("conditions")
                    or []
                )
                for n in names.values()
            ),
            what="the classes Ready",
        )
        started = time.monotonic()
        stand.create_order("whole", SMALL, class_name=names["Dedicated"])
        stand.create_order("share", SMALL, class_name=names["Shared"])
        for name in ("whole", "share"):
            await stand.until_phase(name, "Ready", None, timeout=90)
        print(f"\nboth orders Ready, no reason, after {time.monotonic() - started:.1f}s")
        assert stand.status("whole")["resolved"]["sharingMode"] == "Dedicated"
        assert stand.status("share")["resolved"]["sharingMode"] == "Shared"
        assert {stand.status(n)["resolved"]["deviceClass"] for n in ("whole", "share")} == {"nvidia-t4-mps-physical"}
    finally:
        stand.delete_orders()
        await stand.until(lambda: not stand.order_names(), timeout=60, what="orders deleted")
        for class_name in names.values():
            stand.custom.delete_cluster_custom_object(GROUP, VERSION, CLASSES, class_name)
