"""Many plans on one snapshot whose allocations the caller updates (the trace replay; a repack): each
plan judges the allocations as they are, never a node's judgement kept from before they changed."""

from __future__ import annotations

from planner.inventory import DeviceAllocation, DeviceClass, InventorySnapshot
from planner.planning import PlanningRequest, plan_launch
from tests.planner.helpers import SHARED, WHOLE, cel, device, policy

CLASS = "t4"


def request(snapshot: InventorySnapshot, percent: int) -> PlanningRequest:
    return PlanningRequest.model_validate(
        {
            "facts": {"modelName": "acme/tiny-10M", "parameterCount": "10M"},
            "acceleratorPolicy": policy(
                classes=[CLASS], sharing=SHARED, placement=WHOLE, min_share=percent, max_share=percent
            ),
            "inventory": snapshot,
            # The fragmentation-aware choice: the one that keeps each node's judgement on the snapshot.
            "recentDemands": [{"weight": 1, "deviceCount": 1, "sharePercent": 50}],
        }
    )


def test_a_list_emptied_and_refilled_to_the_same_length_and_last_entry_is_judged_again() -> None:
    small = DeviceAllocation(holder="ns/small", sharePercent=10)
    moved = DeviceAllocation(holder="ns/moved", sharePercent=10)
    card = device("gpu-0", "a", "Tesla T4", "turing", 16, shareable=True, allocations=[small, moved])
    snapshot = InventorySnapshot(devices=[card], deviceClasses=[DeviceClass(name=CLASS, selectors=[cel()])])
    first = plan_launch(request(snapshot, 50))
    assert first.plan is not None, first
    assert first.plan.deviceNames == ["gpu-0"]

    # Both go (one order leaves, the other is moved off by a repack); a large share comes, and the moved
    # one comes back: two entries again, the same last one, and 90 % of the card taken.
    card.allocations[:] = []
    card.allocations.append(DeviceAllocation(holder="ns/large", sharePercent=80))
    card.allocations.append(moved)

    again = plan_launch(request(snapshot, 50))
    assert again.plan is None, f"a 50 % share planned onto a card 90 % taken: {again.plan}"
