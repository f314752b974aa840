"""Would moving other orders make room (``planner.moves``): told apart from when nothing but capacity helps."""

from __future__ import annotations

from inference_api.plan import OrderFacts
from planner.inventory import DeviceAllocation, DeviceClass, InventorySnapshot
from planner.moves import Move, room_by_moving
from planner.planning import PlanningRequest
from tests.planner.helpers import DEDICATED, WHOLE, cel, device, policy

CLASS = "t4"
WHOLE_CARD = policy(classes=[CLASS], sharing=DEDICATED, placement=WHOLE)


def snapshot(held: dict[str, list[DeviceAllocation]]) -> InventorySnapshot:
    """One shareable 16 GiB T4 per node; ``held``: node → what other orders hold of its card."""
    return InventorySnapshot(
        devices=[
            device("gpu-0", node, "Tesla T4", "turing", 16, shareable=True, allocations=allocations)
            for node, allocations in held.items()
        ],
        deviceClasses=[DeviceClass(name=CLASS, selectors=[cel(productName="Tesla T4")])],
    )


def half(holder: str) -> DeviceAllocation:
    return DeviceAllocation(holder=holder, sharePercent=50, memoryMiB=8192)


def request(inventory: InventorySnapshot, model: str = "acme/llm-1B") -> PlanningRequest:
    return PlanningRequest(
        facts=OrderFacts(modelName=model), acceleratorPolicy=WHOLE_CARD, inventory=inventory, holder="ns/new"
    )


def test_two_half_used_cards_make_one_whole_card_when_one_order_moves() -> None:
    found = room_by_moving(request(snapshot({"a": [half("ns/x")], "b": [half("ns/y")]})))
    assert found.possible is True
    assert found.node == "a"
    assert found.moves == (Move("ns/x", "a/gpu-0", "b/gpu-0"),)
    assert found.plan is not None
    assert found.plan.nodeName == "a"
    assert "moving 1 allocation(s) off a" in found.message


def test_cards_too_full_to_take_each_others_orders_make_no_room() -> None:
    crowded = DeviceAllocation(holder="ns/x", sharePercent=60, memoryMiB=9830)
    found = room_by_moving(request(snapshot({"a": [crowded], "b": [crowded.model_copy(update={"holder": "ns/y"})]})))
    assert found.possible is False
    assert found.moves == ()
    assert "any one node" in found.message


def test_a_model_no_card_holds_is_not_helped_by_moves() -> None:
    found = room_by_moving(request(snapshot({"a": [half("ns/x")], "b": []}), model="acme/llm-70B"))
    assert found.possible is False
    assert "even with every other order moved away" in found.message


def test_an_order_that_fits_moves_nothing() -> None:
    found = room_by_moving(request(snapshot({"a": [half("ns/x")], "b": []})))
    assert found.possible is None
    assert found.node == "b"
    assert found.moves == ()


def test_the_order_s_own_allocation_is_not_moved() -> None:
    """A replan: what the order holds itself is its own room, not another order to move."""
    own = DeviceAllocation(holder="ns/new", sharePercent=100)
    found = room_by_moving(request(snapshot({"a": [own], "b": [half("ns/y")]})))
    assert found.possible is None
    assert found.node == "a"


def test_ai_inference_plan_prints_whether_moving_others_makes_room() -> None:
    from inference_api.reasons import Reason
    from worker.dry_run import DryRun, DryRunRefusal, MovingVerdict, render_text

    found = room_by_moving(request(snapshot({"a": [half("ns/x")], "b": [half("ns/y")]})))
    assert found.possible is True
    run = DryRun(
        className="t4-only",
        namespace="ns",
        model="acme/llm-1B",
        source="HuggingFace",
        planned=False,
        refusal=DryRunRefusal(condition="Planned", reason=Reason.NO_CAPACITY, message="No room right now"),
        moving=MovingVerdict(possible=True, message=found.message, node=found.node),
    )
    text = render_text(run)
    assert "would moving other orders make room? yes: moving 1 allocation(s) off a" in text
    assert "ns/x from a/gpu-0 to b/gpu-0" in text
