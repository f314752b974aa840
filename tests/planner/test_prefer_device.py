"""A repack's target (``LaunchPlanRequest.preferDevice``): a hint that ranks one device first among the
places that take the same of the cluster; never what fits, never more of a device."""

from __future__ import annotations

from inference_api.plan import LaunchPlan, OrderFacts, PlanOutcome, RuntimeFallbackFlag
from inference_api.reasons import Reason
from inference_api.types import AcceleratorPolicy
from planner.fragmentation import RecentDemand
from planner.inventory import DeviceAllocation, InventorySnapshot
from planner.planning import PlanningRequest, plan_launch
from tests.planner.helpers import (
    BOTH_MODES,
    SHARED,
    WHOLE,
    planned,
    policy,
    refused,
    sim_snapshot,
)

SMALL = "Qwen/Qwen2.5-0.5B-Instruct"
T4_CLASS = "nvidia-t4-mps-physical"
H100_DEDICATED = "nvidia-h100-dedicated"
QUARTER_OF_A_T4 = policy(classes=[T4_CLASS], sharing=SHARED, placement=WHOLE, min_share=25, max_share=25)


def quarter(holder: str) -> DeviceAllocation:
    return DeviceAllocation(holder=holder, sharePercent=25, memoryMiB=4 * 1024)


def ask(
    inventory: InventorySnapshot,
    prefer: str | None,
    accelerator_policy: AcceleratorPolicy = QUARTER_OF_A_T4,
    *,
    beside: bool = True,
    current: LaunchPlan | None = None,
    recent: list[RecentDemand] | None = None,
) -> PlanOutcome:
    return plan_launch(
        PlanningRequest(
            facts=OrderFacts(modelName=SMALL, parameterCount="0.5B"),
            acceleratorPolicy=accelerator_policy,
            inventory=inventory,
            runtimeFallback=RuntimeFallbackFlag(enabled=True),
            holder="ns/me",
            currentPlan=current,
            besideCurrent=beside,
            preferDevice=prefer,
            className="test-class",
            recentDemands=recent,
        )
    )


def spread() -> InventorySnapshot:
    """The order on gpu-0 (25 %); others hold 25 % of gpu-1 and 50 % of gpu-2; gpu-3 is empty."""
    return sim_snapshot(
        {
            "gpu-t4-0/gpu-0": [quarter("ns/me")],
            "gpu-t4-0/gpu-1": [quarter("ns/a")],
            "gpu-t4-0/gpu-2": [quarter("ns/b"), quarter("ns/c")],
        }
    )


def where(outcome: PlanOutcome) -> str:
    found = planned(outcome)
    return f"{found.nodeName}/{','.join(found.deviceNames)}"


def test_without_a_target_the_fullest_card_with_room_is_chosen() -> None:
    assert where(ask(spread(), None)) == "gpu-t4-0/gpu-2"


def test_the_target_ranks_first_among_places_that_take_the_same() -> None:
    assert where(ask(spread(), "gpu-t4-0/gpu-1")) == "gpu-t4-0/gpu-1"
    assert planned(ask(spread(), "gpu-t4-0/gpu-1")).sharePercent == 25


def test_a_target_without_room_is_passed_over() -> None:
    full = sim_snapshot(
        {
            "gpu-t4-0/gpu-0": [quarter("ns/me")],
            "gpu-t4-0/gpu-1": [DeviceAllocation(holder="ns/a", sharePercent=100)],
            "gpu-t4-0/gpu-2": [quarter("ns/b"), quarter("ns/c")],
        }
    )
    assert where(ask(full, "gpu-t4-0/gpu-1")) == "gpu-t4-0/gpu-2"


def test_a_target_outside_the_inventory_or_the_class_changes_nothing() -> None:
    assert where(ask(spread(), "gpu-t4-9/gpu-0")) == "gpu-t4-0/gpu-2"
    # An H100 is not a device of the class: the target cannot draw the order there.
    assert where(ask(spread(), "gpu-h100-0/gpu-0")) == "gpu-t4-0/gpu-2"


def test_a_target_never_takes_more_of_the_cluster_than_a_share_that_fits() -> None:
    # The class allows a share of a T4 or a whole dedicated H100: the H100 target is passed over
    # while a quarter of a T4 has room (what a place takes ranks before the target).
    either = policy(classes=[T4_CLASS, H100_DEDICATED], sharing=BOTH_MODES, placement=WHOLE, min_share=25)
    found = planned(ask(spread(), "gpu-h100-0/gpu-6", either))
    assert found.deviceClass == T4_CLASS
    assert found.sharePercent == 25


def test_a_target_is_not_room_that_is_not_there() -> None:
    taken = {f"gpu-t4-0/gpu-{i}": [DeviceAllocation(holder=f"ns/x{i}", sharePercent=100)] for i in range(4)}
    refused(ask(sim_snapshot(taken), "gpu-t4-0/gpu-1"), Reason.NO_CAPACITY)


def test_beside_what_it_holds_the_order_is_not_planned_onto_its_own_full_card() -> None:
    # The order holds 25 % of gpu-1 and others 75 %: beside what it holds, gpu-1 has no room.
    inventory = sim_snapshot(
        {
            "gpu-t4-0/gpu-1": [quarter("ns/me"), quarter("ns/a"), quarter("ns/b"), quarter("ns/c")],
            "gpu-t4-0/gpu-3": [quarter("ns/d")],
        }
    )
    assert where(ask(inventory, "gpu-t4-0/gpu-1")) == "gpu-t4-0/gpu-3"


def test_the_target_wins_over_the_fragmentation_aware_choice_among_equal_places() -> None:
    recent = [RecentDemand(sharePercent=25), RecentDemand(sharePercent=100, weight=3.0)]
    assert where(ask(spread(), None, recent=recent)) != "gpu-t4-0/gpu-1"  # not the choice without the target
    found = ask(spread(), "gpu-t4-0/gpu-1", recent=recent)
    assert where(found) == "gpu-t4-0/gpu-1"
