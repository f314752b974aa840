"""plan_launch end to end on a snapshot shaped like the simulated cluster."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inference_api.plan import LaunchPlanRequest, OrderFacts, PlanOutcome, RecipeSource
from inference_api.reasons import Reason
from inference_api.types import PlacementType, SharingMode
from planner.inventory import Device, DeviceAllocation, DeviceClass, InventorySnapshot
from planner.planning import PlanningRequest, plan_launch
from planner.policy import effective_policy, tensor_parallel_sizes
from tests.planner.helpers import (
    BOTH_MODES,
    BOTH_PLACEMENTS,
    DEDICATED,
    DEFAULT_LLM,
    H100,
    H100_MIB,
    PARTITION,
    SHARED,
    SIM_CLASSES,
    T4,
    WHOLE,
    D,
    arg,
    cel,
    hold,
    merge,
    plan,
    planned,
    policy,
    refused,
    sim_snapshot,
)

AWQ_32B = "Qwen/Qwen2.5-32B-Instruct-AWQ"  # compiled on hopper: 24 GiB
QWEN_7B = "Qwen/Qwen2.5-7B-Instruct"  # compiled on hopper (20 GiB) and turing (22 GiB)
HALF_CARD = "org/Model-17B"  # fallback: 17B x 2 bytes x 1.2 + 1 GiB = 39926 MiB, 49% of an H100

S3 = "nvidia-hopper-s3-shared"
MIG = "nvidia-h100-mps-mig"
T4_CLASS = "nvidia-t4-mps-physical"
H100_DEDICATED = "nvidia-h100-dedicated"

SHARED_HOPPER = policy(classes=[S3], sharing=SHARED, placement=WHOLE)


# ------------------------------------------------------------------- the policy


def test_no_policy_means_one_whole_dedicated_device() -> None:
    effective = effective_policy(None)
    assert effective.sharingModes == {SharingMode.DEDICATED}
    assert effective.placementTypes == {PlacementType.WHOLE_DEVICE}
    assert effective.maxAcceleratorCount == 1
    assert effective.deviceClasses is None


def test_empty_lists_mean_what_the_crd_says() -> None:
    effective = effective_policy(policy(classes=[], sharing=[], placement=[], max_count=None))
    assert effective.deviceClasses is None
    assert effective.sharingModes == {SharingMode.DEDICATED}
    assert effective.placementTypes == {PlacementType.WHOLE_DEVICE}
    assert effective.maxAcceleratorCount == 1


@pytest.mark.parametrize(("limit", "sizes"), [(1, [1]), (2, [1, 2]), (3, [1, 2]), (8, [1, 2, 4, 8])])
def test_tensor_parallel_sizes_are_powers_of_two(limit: int, sizes: list[int]) -> None:
    assert tensor_parallel_sizes(limit) == sizes


# ------------------------------------------------------------------- the plan


def test_a_plan_carries_placement_recipe_and_estimates() -> None:
    result = planned(plan(AWQ_32B, SHARED_HOPPER))
    assert result.deviceClass == S3
    assert result.acceleratorProductName == H100
    assert result.acceleratorMemoryGiB == 80
    assert result.placementMode is PlacementType.WHOLE_DEVICE
    assert result.sharingMode is SharingMode.SHARED
    assert result.deviceCount == 1
    # 24 GiB of 80 GiB: exactly 30 percent.
    assert result.sharePercent == 30
    assert result.memoryRequestMiB == 24 * 1024
    assert result.modelMemoryMiB == 24 * 1024
    assert result.nodeName == "gpu-h100-0"
    assert result.deviceNames == ["gpu-0"]
    assert result.recipe.source is RecipeSource.COMPILED
    assert result.recipe.image == "vllm/vllm-openai:v0.33.0"
    assert result.recipe.hardwareFamily == "hopper"
    assert result.recipe.branch == "latency"
    assert arg(result, "--gpu-memory-utilization") == "0.30"
    assert arg(result, "--quantization") == "awq_marlin"
    assert arg(result, "--tensor-parallel-size") is None
    assert result.cpu == "4"
    assert result.memory == "12Gi"
    assert result.modelVolumeGiB == 22
    status = result.resolved(replan_count=2)
    assert (status.deviceClass, status.sharePercent, status.replanCount) == (S3, 30, 2)


def test_default_llm_takes_the_place_that_takes_least() -> None:
    # A 40 GiB MIG instance would be taken whole (a partition is taken whole): 40 GiB. A 30 % share of
    # an MPS-shared H100 takes 24 GiB and leaves the rest of the card to others: the economy rule
    # takes the share, although the partition has less free memory (best fit would take it).
    result = planned(plan(AWQ_32B, DEFAULT_LLM))
    assert result.placementMode is PlacementType.WHOLE_DEVICE
    assert result.sharingMode is SharingMode.SHARED
    assert result.sharePercent == 30
    assert result.memoryRequestMiB == 24576
    assert result.acceleratorMemoryGiB == 80
    # Where no share of a whole card is allowed, the partition is the place that takes least.
    partitions = policy(sharing=SHARED, placement=[PlacementType.PARTITION], max_count=1)
    result = planned(plan(AWQ_32B, partitions))
    assert result.deviceClass == MIG
    assert result.placementMode is PlacementType.PARTITION
    assert result.sharePercent == 100
    assert result.memoryRequestMiB is None
    assert result.acceleratorMemoryGiB == 40


def test_no_policy_plans_a_whole_dedicated_device() -> None:
    result = planned(plan(AWQ_32B, None))
    assert result.sharingMode is SharingMode.DEDICATED
    assert result.placementMode is PlacementType.WHOLE_DEVICE
    assert result.sharePercent == 100
    assert result.memoryRequestMiB is None
    assert result.deviceCount == 1
    assert arg(result, "--gpu-memory-utilization") == "0.90"


def test_the_plan_is_deterministic_and_does_not_touch_its_input() -> None:
    request = PlanningRequest(facts=OrderFacts(modelName=AWQ_32B), acceleratorPolicy=DEFAULT_LLM,
                              inventory=sim_snapshot())  # fmt: skip
    before = request.model_dump()
    assert plan_launch(request) == plan_launch(request)
    assert request.model_dump() == before


def test_request_and_outcome_travel_as_json() -> None:
    request = PlanningRequest(
        facts=OrderFacts(modelName=AWQ_32B, parameterCount="32B"),
        acceleratorPolicy=DEFAULT_LLM,
        inventory=sim_snapshot(hold(planned(plan(AWQ_32B, SHARED_HOPPER)))),
        holder="support/support-llm",
    )
    again = PlanningRequest.model_validate_json(request.model_dump_json())
    assert again == request
    # The controller's body is the same request without what the planner adds itself.
    planner_side = {"inventory", "tolerations", "nodeSelector", "recentDemands", "demand"}
    body = LaunchPlanRequest.model_validate_json(request.model_dump_json(exclude=planner_side))
    assert body.facts.modelName == AWQ_32B
    outcome = plan_launch(request)
    assert PlanOutcome.model_validate_json(outcome.model_dump_json()) == outcome


# ------------------------------------------------------------- sharing a card


def test_two_half_card_orders_land_on_one_card() -> None:
    first = planned(plan(HALF_CARD, SHARED_HOPPER))
    assert first.recipe.source is RecipeSource.FALLBACK
    assert first.sharePercent == 49
    second = planned(plan(HALF_CARD, SHARED_HOPPER, sim_snapshot(hold(first, "ns/first"))))
    assert (second.nodeName, second.deviceNames) == (first.nodeName, first.deviceNames)
    # A third no longer fits there and opens the next card.
    both = merge(hold(first, "ns/first"), hold(second, "ns/second"))
    third = planned(plan(HALF_CARD, SHARED_HOPPER, sim_snapshot(both)))
    assert third.deviceNames != first.deviceNames


def test_the_worked_example_of_docs_planner() -> None:
    taken: dict[str, list[DeviceAllocation]] = {}
    placed = []
    for i in range(4):
        result = planned(plan(AWQ_32B, SHARED_HOPPER, sim_snapshot(taken)))
        assert (result.sharePercent, result.memoryRequestMiB) == (30, 24576)
        placed.append(result.deviceNames[0])
        taken = merge(taken, hold(result, f"ns/order-{i}"))
    assert placed == ["gpu-0", "gpu-0", "gpu-0", "gpu-1"]
    assert planned(plan(AWQ_32B, policy(classes=[S3], sharing=SHARED, min_share=50))).sharePercent == 50


def test_small_orders_fill_the_fullest_card_first() -> None:
    # gpu-2 is the fullest shared card with room: best fit goes there, not to the empty gpu-0.
    taken = {
        "gpu-h100-0/gpu-1": [DeviceAllocation(holder="ns/a", sharePercent=90, memoryMiB=72 * 1024)],
        "gpu-h100-0/gpu-2": [DeviceAllocation(holder="ns/b", sharePercent=50, memoryMiB=40 * 1024)],
    }
    result = planned(plan(AWQ_32B, SHARED_HOPPER, sim_snapshot(taken)))
    assert result.deviceNames == ["gpu-2"]


def test_shared_is_preferred_over_dedicated() -> None:
    both = policy(classes=[H100_DEDICATED, S3], sharing=BOTH_MODES, placement=WHOLE)
    result = planned(plan(AWQ_32B, both))
    assert result.sharingMode is SharingMode.SHARED
    assert result.deviceClass == S3
    assert result.sharePercent == 30


def test_model_memory_and_compute_share_are_accounted_independently() -> None:
    # Room by share (only 10 % taken) but not by memory (60 GiB of 80 taken): the card is full for 24 GiB.
    memory_full = {f"gpu-h100-0/gpu-{i}": [DeviceAllocation(holder="x", sharePercent=10, memoryMiB=60 * 1024)]
                   for i in range(4)}  # fmt: skip
    message = refused(plan(AWQ_32B, SHARED_HOPPER, sim_snapshot(memory_full)), Reason.NO_CAPACITY)
    assert S3 in message
    # Room by memory but not by share.
    share_full = {f"gpu-h100-0/gpu-{i}": [DeviceAllocation(holder="x", sharePercent=80, memoryMiB=8 * 1024)]
                  for i in range(4)}  # fmt: skip
    refused(plan(AWQ_32B, SHARED_HOPPER, sim_snapshot(share_full)), Reason.NO_CAPACITY)
    # A memory-only shared claim (no compute share) leaves the share free.
    memory_only = {"gpu-h100-0/gpu-0": [DeviceAllocation(holder="x", sharePercent=0, memoryMiB=40 * 1024)]}
    assert planned(plan(AWQ_32B, SHARED_HOPPER, sim_snapshot(memory_only))).deviceNames == ["gpu-0"]


def test_an_allocation_without_memory_counts_its_share_of_the_card() -> None:
    taken = {f"gpu-h100-0/gpu-{i}": [DeviceAllocation(holder="x", sharePercent=75)] for i in range(4)}
    refused(plan(AWQ_32B, SHARED_HOPPER, sim_snapshot(taken)), Reason.NO_CAPACITY)


# ------------------------------------------------------- placement and sharing


def test_dedicated_only_needs_an_empty_device() -> None:
    dedicated = policy(classes=[S3], sharing=DEDICATED, placement=WHOLE)
    taken = {"gpu-h100-0/gpu-0": [DeviceAllocation(holder="x", sharePercent=10, memoryMiB=1024)]}
    result = planned(plan(AWQ_32B, dedicated, sim_snapshot(taken)))
    assert result.sharingMode is SharingMode.DEDICATED
    assert result.sharePercent == 100
    assert result.deviceNames == ["gpu-1"]
    assert arg(result, "--gpu-memory-utilization") == "0.90"


def test_partition_only() -> None:
    result = planned(plan(AWQ_32B, policy(sharing=BOTH_MODES, placement=PARTITION)))
    assert result.placementMode is PlacementType.PARTITION
    assert result.deviceClass == MIG
    assert result.nodeName == "gpu-h100-mig-0"


def test_whole_device_only_never_picks_a_partition() -> None:
    result = planned(plan(AWQ_32B, policy(sharing=BOTH_MODES, placement=WHOLE)))
    assert result.placementMode is PlacementType.WHOLE_DEVICE
    assert result.sharePercent == 30


def test_shared_mode_on_a_device_that_cannot_be_shared_takes_it_whole() -> None:
    result = planned(plan(AWQ_32B, policy(classes=[H100_DEDICATED], sharing=SHARED, placement=WHOLE)))
    assert result.sharingMode is SharingMode.SHARED
    assert result.sharePercent == 100
    assert result.memoryRequestMiB is None


def test_a_device_that_cannot_be_shared_is_taken_by_any_claim() -> None:
    taken = {f"gpu-h100-0/gpu-{i}": [DeviceAllocation(holder="x", sharePercent=0, memoryMiB=1024)] for i in range(4, 8)}
    refused(plan(AWQ_32B, policy(classes=[H100_DEDICATED]), sim_snapshot(taken)), Reason.NO_CAPACITY)


def test_min_share_percent_raises_a_small_share() -> None:
    result = planned(plan("Qwen/Qwen2.5-0.5B-Instruct", policy(classes=[S3], sharing=SHARED, min_share=25)))
    assert result.sharePercent == 25
    assert arg(result, "--gpu-memory-utilization") == "0.25"
    # The memory request stays what the model needs.
    assert result.memoryRequestMiB == 4 * 1024


def test_max_share_percent_below_the_need_leaves_nothing_big_enough() -> None:
    message = refused(
        plan(AWQ_32B, policy(classes=[S3], sharing=SHARED, placement=WHOLE, max_share=25)),
        Reason.NO_ACCELERATOR_WITH_ENOUGH_MEMORY,
    )
    assert "maxSharePercent 25" in message


def test_max_share_percent_with_dedicated_allowed_takes_a_whole_device_elsewhere() -> None:
    result = planned(
        plan(AWQ_32B, policy(classes=[S3, H100_DEDICATED], sharing=BOTH_MODES, placement=WHOLE, max_share=25))
    )
    assert result.deviceClass == H100_DEDICATED
    assert result.sharingMode is SharingMode.DEDICATED


def test_the_allow_list_order_breaks_ties() -> None:
    # Both classes select gpu-0..3 of gpu-h100-0; the administrator listed MIG first.
    first = planned(plan(AWQ_32B, policy(classes=[MIG, S3], sharing=SHARED, placement=WHOLE)))
    assert first.deviceClass == MIG
    second = planned(plan(AWQ_32B, policy(classes=[S3, MIG], sharing=SHARED, placement=WHOLE)))
    assert second.deviceClass == S3


# ------------------------------------------------------------ several devices


def test_one_device_too_small_without_more_devices_allowed() -> None:
    message = refused(
        plan(QWEN_7B, policy(classes=[T4_CLASS], sharing=SHARED, max_count=1)),
        Reason.NO_ACCELERATOR_WITH_ENOUGH_MEMORY,
    )
    assert "maxAcceleratorCount" in message
    assert T4 in message


@pytest.mark.parametrize("limit", [2, 3, 4])
def test_tensor_parallel_across_the_fewest_devices_of_one_node(limit: int) -> None:
    result = planned(plan(QWEN_7B, policy(classes=[T4_CLASS], sharing=SHARED, max_count=limit)))
    assert result.deviceCount == 2
    assert result.deviceNames == ["gpu-0", "gpu-1"]
    assert result.nodeName == "gpu-t4-0"
    # 22 GiB over two cards: 11 GiB each, 69 % of a 16 GiB T4.
    assert result.modelMemoryMiB == 11 * 1024
    assert result.sharePercent == 69
    assert arg(result, "--tensor-parallel-size") == "2"
    assert arg(result, "--enforce-eager") == ""
    assert result.cpu == "6"


def test_tensor_parallel_uses_the_devices_with_room() -> None:
    taken = {f"gpu-t4-0/gpu-{i}": [DeviceAllocation(holder="x", sharePercent=100)] for i in (0, 2)}
    result = planned(plan(QWEN_7B, policy(classes=[T4_CLASS], sharing=SHARED, max_count=2), sim_snapshot(taken)))
    assert result.deviceNames == ["gpu-1", "gpu-3"]
    taken["gpu-t4-0/gpu-3"] = [DeviceAllocation(holder="x", sharePercent=100)]
    refused(plan(QWEN_7B, policy(classes=[T4_CLASS], sharing=SHARED, max_count=2), sim_snapshot(taken)),
            Reason.NO_CAPACITY)  # fmt: skip


def test_partitions_are_never_spanned() -> None:
    message = refused(
        plan("org/Model-30B", policy(classes=[MIG], sharing=SHARED, placement=PARTITION, max_count=2)),
        Reason.NO_ACCELERATOR_WITH_ENOUGH_MEMORY,
    )
    assert "3g.40gb" in message


def test_a_compiled_recipe_wins_over_a_fallback_on_other_hardware() -> None:
    # 32B AWQ: compiled for hopper; on turing only the fallback (18.9 GiB, two T4s).
    both = policy(classes=[T4_CLASS, S3], sharing=SHARED, max_count=2)
    result = planned(plan(AWQ_32B, both))
    assert result.recipe.source is RecipeSource.COMPILED
    assert result.deviceClass == S3
    hopper_full = {f"gpu-h100-0/gpu-{i}": [DeviceAllocation(holder="x", sharePercent=100)] for i in range(4)}
    fallback = planned(plan(AWQ_32B, both, sim_snapshot(hopper_full)))
    assert fallback.recipe.source is RecipeSource.FALLBACK
    assert fallback.deviceClass == T4_CLASS
    assert fallback.deviceCount == 2
    assert arg(fallback, "--quantization") == "awq"


# --------------------------------------------------------------------- replans

# Others take the rest of gpu-0 beside an order holding 30 % of it, and too much of gpu-1..3.
OTHERS_FILL_THE_REST = {
    f"gpu-h100-0/gpu-{i}": [
        DeviceAllocation(holder="ns/other", sharePercent=70 if i == 0 else 80, memoryMiB=(56 if i == 0 else 64) * 1024)
    ]
    for i in range(4)
}


def test_a_replan_does_not_count_its_own_allocation() -> None:
    mine = planned(plan(AWQ_32B, SHARED_HOPPER))
    assert mine.deviceNames == ["gpu-0"]
    snapshot = sim_snapshot(merge(hold(mine, "ns/mine"), OTHERS_FILL_THE_REST))
    # Seen by a stranger, there is no room.
    refused(plan(AWQ_32B, SHARED_HOPPER, snapshot), Reason.NO_CAPACITY)
    # Seen by the order itself, its place is still its own.
    again = planned(plan(AWQ_32B, SHARED_HOPPER, snapshot, holder="ns/mine"))
    assert again.deviceNames == mine.deviceNames
    assert again.sharePercent == mine.sharePercent


def test_a_replan_recognises_its_allocation_from_the_current_plan() -> None:
    mine = planned(plan(AWQ_32B, SHARED_HOPPER))
    # An inventory that cannot tell holders apart.
    snapshot = sim_snapshot(merge(hold(mine, "unknown"), OTHERS_FILL_THE_REST))
    refused(plan(AWQ_32B, SHARED_HOPPER, snapshot), Reason.NO_CAPACITY)
    again = planned(plan(AWQ_32B, SHARED_HOPPER, snapshot, current=mine))
    assert again.deviceNames == mine.deviceNames


def test_a_replan_keeps_its_place_when_others_have_room_too() -> None:
    mine = planned(plan(AWQ_32B, SHARED_HOPPER))
    # gpu-1 is fuller than gpu-0 would be without me: best fit alone would move me there.
    taken = merge(
        hold(mine, "ns/mine"),
        {"gpu-h100-0/gpu-1": [DeviceAllocation(holder="x", sharePercent=50, memoryMiB=40 * 1024)]},
    )
    again = planned(plan(AWQ_32B, SHARED_HOPPER, sim_snapshot(taken), holder="ns/mine"))
    assert again.deviceNames == mine.deviceNames
    stranger = planned(plan(AWQ_32B, SHARED_HOPPER, sim_snapshot(taken), holder="ns/stranger"))
    assert stranger.deviceNames == ["gpu-1"]


def test_a_replan_of_a_dedicated_order_on_a_full_class() -> None:
    dedicated = policy(classes=[H100_DEDICATED], sharing=DEDICATED)
    taken = {f"gpu-h100-0/gpu-{i}": [DeviceAllocation(holder=f"ns/o{i}")] for i in range(4, 8)}
    refused(plan(AWQ_32B, dedicated, sim_snapshot(taken)), Reason.NO_CAPACITY)
    again = planned(plan(AWQ_32B, dedicated, sim_snapshot(taken), holder="ns/o6"))
    assert again.deviceNames == ["gpu-6"]


# ------------------------------------------------------------------ refusals


def test_placement_undecidable_when_the_allowed_class_does_not_exist() -> None:
    message = refused(plan(AWQ_32B, policy(classes=["nvidia-a100"])), Reason.PLACEMENT_UNDECIDABLE)
    assert "nvidia-a100" in message
    assert "do not exist" in message
    assert "test-class" in message


def test_placement_undecidable_without_device_classes() -> None:
    message = refused(plan(AWQ_32B, DEFAULT_LLM, sim_snapshot(classes=[])), Reason.PLACEMENT_UNDECIDABLE)
    assert "no DeviceClass" in message


def test_placement_undecidable_when_the_selector_cannot_be_judged() -> None:
    broken = DeviceClass(name="broken", selectors=[f'device.attributes["{D}"].migProfile == "3g.40gb"'])
    message = refused(
        plan(AWQ_32B, policy(classes=["broken"]), sim_snapshot(classes=[*SIM_CLASSES, broken])),
        Reason.PLACEMENT_UNDECIDABLE,
    )
    assert "broken" in message
    assert "migProfile" in message
    assert "Waiting will not help" in message


def test_placement_undecidable_when_the_classes_select_nothing() -> None:
    empty = DeviceClass(name="a100", selectors=[cel(productName="NVIDIA A100")])
    message = refused(
        plan(AWQ_32B, policy(classes=["a100"]), sim_snapshot(classes=[empty])), Reason.PLACEMENT_UNDECIDABLE
    )
    assert "select no device" in message


def test_placement_undecidable_when_the_placement_types_rule_out_every_device() -> None:
    message = refused(
        plan(AWQ_32B, policy(classes=[T4_CLASS], sharing=SHARED, placement=PARTITION)), Reason.PLACEMENT_UNDECIDABLE
    )
    assert "selects WholeDevice devices, the class allows Partition placement only" in message


def test_an_undecidable_class_does_not_hide_a_working_one() -> None:
    broken = DeviceClass(name="broken", selectors=["(("])
    inventory = sim_snapshot(classes=[broken, *SIM_CLASSES])
    result = planned(plan(AWQ_32B, policy(classes=["broken", S3], sharing=SHARED), inventory))
    assert result.deviceClass == S3
    full = {f"gpu-h100-0/gpu-{i}": [DeviceAllocation(holder="x")] for i in range(4)}
    inventory = InventorySnapshot(devices=sim_snapshot(full).devices, deviceClasses=[broken, *SIM_CLASSES])
    message = refused(plan(AWQ_32B, policy(classes=["broken", S3], sharing=SHARED), inventory), Reason.NO_CAPACITY)
    assert "cannot be judged: broken" in message


def test_quantization_mismatch() -> None:
    message = refused(
        plan("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8", policy(classes=[T4_CLASS], sharing=SHARED)),
        Reason.QUANTIZATION_MISMATCH,
    )
    assert "FP8" in message
    assert "turing" in message


def test_quantization_mismatch_against_the_compiled_recipe() -> None:
    refused(plan(AWQ_32B, SHARED_HOPPER, quantization="fp8"), Reason.QUANTIZATION_MISMATCH)


def test_a_family_that_cannot_run_the_model_does_not_hide_one_that_can() -> None:
    both = policy(classes=[T4_CLASS, S3], sharing=SHARED)
    result = planned(plan("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8", both))
    assert result.recipe.hardwareFamily == "hopper"


def test_no_compatible_runtime_with_fallback_disabled() -> None:
    message = refused(plan(HALF_CARD, SHARED_HOPPER, fallback=False), Reason.NO_COMPATIBLE_RUNTIME_AVAILABLE)
    assert "runtime fallback is disabled" in message
    # A compiled recipe does not need the fallback.
    assert planned(plan(AWQ_32B, SHARED_HOPPER, fallback=False)).recipe.source is RecipeSource.COMPILED


def test_no_compatible_runtime_without_a_recognisable_size() -> None:
    message = refused(plan("org/mystery-model", SHARED_HOPPER), Reason.NO_COMPATIBLE_RUNTIME_AVAILABLE)
    assert "spec.model.parameterCount" in message
    # The order's value or a catalog fact sizes it.
    assert planned(plan("org/mystery-model", SHARED_HOPPER, orderParameterCount="7B")).recipe.source is (
        RecipeSource.FALLBACK
    )
    assert planned(plan("org/mystery-model", SHARED_HOPPER, parameterCount="360M")).sharePercent == 3


def test_fallback_on_plans_the_spec_example() -> None:
    # Phase 2.4.1: a catalog model named qwen2-5-32b-instruct-awq with no facts: size and AWQ from the name.
    result = planned(plan("qwen2-5-32b-instruct-awq", policy(classes=[MIG], sharing=SHARED, placement=BOTH_PLACEMENTS)))
    assert result.recipe.source is RecipeSource.FALLBACK
    assert result.recipe.vramMinimumGiB == pytest.approx(18.89, abs=0.01)
    assert arg(result, "--quantization") == "awq_marlin"
    assert result.deviceClass == MIG


def test_no_accelerator_with_enough_memory() -> None:
    message = refused(plan("Qwen/Qwen2.5-72B-Instruct", DEFAULT_LLM), Reason.NO_ACCELERATOR_WITH_ENOUGH_MEMORY)
    assert "161.9 GiB" in message
    assert "80.0 GiB" in message


def test_a_memory_refusal_names_the_family_that_could_not_run_the_model() -> None:
    # FP8 8B: hopper runs it but its only class here is capped at 10 %; turing cannot run FP8 at all.
    both = policy(classes=[T4_CLASS, S3], sharing=SHARED, max_share=10)
    message = refused(plan("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8", both), Reason.NO_ACCELERATOR_WITH_ENOUGH_MEMORY)
    assert "maxSharePercent 10" in message
    assert "Not usable: turing hardware" in message


def test_no_capacity_when_the_one_class_in_play_is_full() -> None:
    full = {f"gpu-h100-0/gpu-{i}": [DeviceAllocation(holder="x", sharePercent=100)] for i in range(4)}
    message = refused(plan(AWQ_32B, SHARED_HOPPER, sim_snapshot(full)), Reason.NO_CAPACITY)
    assert "4 device(s)" in message
    assert "waits" in message


def test_no_capacity_when_only_one_class_has_devices_big_enough() -> None:
    # T4s are too small for 24 GiB with one device; only the hopper class is in play.
    full = {f"gpu-h100-0/gpu-{i}": [DeviceAllocation(holder="x", sharePercent=100)] for i in range(4)}
    refused(plan(AWQ_32B, policy(classes=[T4_CLASS, S3], sharing=SHARED), sim_snapshot(full)), Reason.NO_CAPACITY)


def test_resource_claim_exhausted_when_every_class_in_play_is_full() -> None:
    every = {f"gpu-h100-0/gpu-{i}": [DeviceAllocation(holder="x", sharePercent=100)] for i in range(8)}
    every |= {f"gpu-h100-mig-0/gpu-0-mig-{p}": [DeviceAllocation(holder="x", sharePercent=100)] for p in range(2)}
    message = refused(plan(AWQ_32B, DEFAULT_LLM, sim_snapshot(every)), Reason.RESOURCE_CLAIM_EXHAUSTED)
    assert "Every device class the order may use was tried" in message
    for name in (MIG, S3, H100_DEDICATED):
        assert name in message


# ------------------------------------------------------ hand-made inventories


def test_unknown_device_memory_gets_the_whole_device() -> None:
    inventory = InventorySnapshot(
        devices=[Device(name="gpu-0", node="n", productName=H100, allowMultipleAllocations=True)],
        deviceClasses=[DeviceClass(name="any")],
    )
    result = planned(plan(AWQ_32B, policy(sharing=SHARED), inventory))
    assert result.sharePercent == 100
    assert result.acceleratorMemoryGiB == 0
    assert result.recipe.hardwareFamily == "hopper"


def test_an_unknown_hardware_family_has_no_runtime() -> None:
    inventory = InventorySnapshot(
        devices=[Device(name="x-0", node="n", productName="Mystery Accelerator", memoryMiB=H100_MIB)],
        deviceClasses=[DeviceClass(name="any")],
    )
    message = refused(plan(AWQ_32B, None, inventory), Reason.NO_COMPATIBLE_RUNTIME_AVAILABLE)
    assert "Mystery Accelerator" in message


def test_a_whole_device_and_its_partitions_exclude_each_other() -> None:
    def inventory(taken: str) -> InventorySnapshot:
        claim = [DeviceAllocation(holder="x")]
        return InventorySnapshot(
            devices=[
                Device(name="gpu-0", node="n", productName=H100, memoryMiB=H100_MIB,
                       allocations=claim if taken == "gpu-0" else []),
                Device(name="gpu-0-mig-0", node="n", productName=H100, memoryMiB=40 * 1024,
                       placement=PlacementType.PARTITION, parentDevice="gpu-0",
                       allocations=claim if taken == "gpu-0-mig-0" else []),
                Device(name="gpu-0-mig-1", node="n", productName=H100, memoryMiB=40 * 1024,
                       placement=PlacementType.PARTITION, parentDevice="gpu-0"),
            ],
            deviceClasses=[DeviceClass(name="any")],
        )  # fmt: skip

    whole_only = policy(sharing=DEDICATED, placement=WHOLE)
    assert planned(plan(AWQ_32B, whole_only, inventory("none"))).deviceNames == ["gpu-0"]
    refused(plan(AWQ_32B, whole_only, inventory("gpu-0-mig-0")), Reason.NO_CAPACITY)
    partitions = policy(sharing=DEDICATED, placement=PARTITION)
    assert planned(plan(AWQ_32B, partitions, inventory("gpu-0-mig-0"))).deviceNames == ["gpu-0-mig-1"]
    refused(plan(AWQ_32B, partitions, inventory("gpu-0")), Reason.NO_CAPACITY)


def test_snapshot_refuses_duplicates() -> None:
    with pytest.raises(ValueError, match="unique"):
        InventorySnapshot(devices=[Device(name="a", node="n"), Device(name="a", node="n")])
    with pytest.raises(ValueError, match="unique"):
        InventorySnapshot(deviceClasses=[DeviceClass(name="a"), DeviceClass(name="a")])


# ------------------------------------------------------------------ properties


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    size=st.sampled_from(["360M", "1.5B", "7B", "14B", "32B", "70B"]),
    quant=st.sampled_from([None, "awq", "fp8"]),
    sharing=st.sampled_from([SHARED, DEDICATED, BOTH_MODES]),
    placement=st.sampled_from([WHOLE, PARTITION, BOTH_PLACEMENTS]),
    max_count=st.integers(1, 4),
    bounds=st.tuples(st.integers(1, 100), st.integers(1, 100)).map(sorted),
)
def test_every_plan_honours_the_class_and_holds_the_model(
    size: str,
    quant: str | None,
    sharing: list[SharingMode],
    placement: list[PlacementType],
    max_count: int,
    bounds: list[int],
) -> None:
    low, high = bounds
    accelerator = policy(sharing=sharing, placement=placement, max_count=max_count, min_share=low, max_share=high)
    outcome = plan(f"org/model-{size}", accelerator, quantization=quant)
    if outcome.refusal is not None:
        assert outcome.refusal.message
        return
    result = planned(outcome)
    assert result.sharingMode in sharing
    assert result.placementMode in placement
    assert 1 <= result.deviceCount <= max_count
    if result.sharePercent < 100:
        assert low <= result.sharePercent <= high
        assert result.memoryRequestMiB == result.modelMemoryMiB
    assert result.modelMemoryMiB is not None
    assert result.sharePercent * result.acceleratorMemoryGiB * 1024 >= 100 * result.modelMemoryMiB
