"""Which repack answers are worth a move (workflows.order._worth_moving): pure."""

from __future__ import annotations

import pytest

from inference_api.plan import LaunchPlan, ReplicaPlacement
from tests.factories import make_plan
from workflows.order import _worth_moving


def plan(share: int, node: str | None = "n1", devices: tuple[str, ...] = ("gpu-0",), count: int = 1) -> LaunchPlan:
    return make_plan(share=share).model_copy(
        update={"nodeName": node, "deviceNames": list(devices), "deviceCount": count}
    )


@pytest.mark.parametrize(
    ("current", "new", "worth"),
    [
        (plan(100), plan(25, devices=("gpu-1",)), True),  # a smaller share gives some back
        (plan(25), plan(25, devices=("gpu-1",)), False),  # the same, elsewhere: nothing comes free
        (plan(25), plan(50, devices=("gpu-1",)), False),
        (plan(100, count=2, devices=("gpu-0", "gpu-1")), plan(100), True),  # fewer devices
    ],
)
def test_an_untargeted_move_needs_less_of_a_device(current: LaunchPlan, new: LaunchPlan, worth: bool) -> None:
    assert _worth_moving(current, new, None) is worth


@pytest.mark.parametrize(
    ("new", "worth"),
    [
        (plan(25, "n2", ("gpu-4",)), True),  # on the target, the same share
        (plan(10, "n2", ("gpu-4",)), True),  # on the target, less
        (plan(50, "n2", ("gpu-4",)), False),  # on the target but more of a device
        (plan(25, "n2", ("gpu-5",)), False),  # another device of the target's node
        (plan(25, "n3", ("gpu-4",)), False),  # the device name on another node
        (plan(25, None, ("gpu-4",)), False),  # no node named: not pinned to the target
        (plan(25, "n2", ("gpu-4", "gpu-5"), count=2), False),  # more than one device
    ],
)
def test_a_targeted_move_must_land_on_its_target_taking_no_more(new: LaunchPlan, worth: bool) -> None:
    assert _worth_moving(plan(25), new, "n2/gpu-4") is worth


def test_a_targeted_move_onto_a_device_the_order_holds_is_none() -> None:
    current = plan(25, "n2", ("gpu-4",))
    assert not _worth_moving(current, plan(25, "n2", ("gpu-4",)), "n2/gpu-4")


def test_a_plan_with_replica_placements_lands_where_they_say() -> None:
    new = plan(25, "n2", ("gpu-4",)).model_copy(
        update={"replicaPlacements": [ReplicaPlacement(nodeName="n2", deviceNames=["gpu-4"])]}
    )
    assert _worth_moving(plan(25), new, "n2/gpu-4")
    elsewhere = new.model_copy(update={"replicaPlacements": [ReplicaPlacement(nodeName="n9", deviceNames=["gpu-4"])]})
    assert not _worth_moving(plan(25), elsewhere, "n2/gpu-4")


def test_no_plan_is_no_move() -> None:
    assert not _worth_moving(None, plan(25), "n1/gpu-0")
    assert not _worth_moving(plan(25), None, "n1/gpu-0")
    assert not _worth_moving(None, plan(25), None)
