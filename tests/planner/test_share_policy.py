"""The device's published share policy (KEP-5075 ``requestPolicy``) applied as the DRA allocator applies
it: what a claim consumes, the share sized on it, and a plan that books exactly what the allocator will
consume (issue 23: "a partial share ignores the device's published share policy")."""

from __future__ import annotations

from fractions import Fraction

import pytest

from inference_api.types import PlacementType, SharingMode
from planner.inventory import CapacityRange, CapacityRequestPolicy, DeviceAllocation, InventorySnapshot
from planner.quantity import GIB, MIB
from planner.share import assign_share, consumed_capacity, memory_request_mib
from tests.planner.helpers import H100, SHARED, WHOLE, device, plan, planned, policy, sim_snapshot

CAP = Fraction(80 * GIB)
# The local stack's memory policy (dev/devstack/cluster/inventory.py): whole by default, 1 GiB minimum, MiB steps.
LOCAL = CapacityRequestPolicy(default="80Gi", validRange=CapacityRange(min="1Gi", step="1Mi"))
VALUES = CapacityRequestPolicy(default="80Gi", validValues=("10Gi", "20Gi", "40Gi", "80Gi"))
CAPPED = CapacityRequestPolicy(default="80Gi", validRange=CapacityRange(min="4Gi", max="40Gi", step="4Gi"))


@pytest.mark.parametrize(
    ("requested", "policy_", "consumed"),
    [
        # No request: the policy's default, else the whole capacity.
        (None, LOCAL, 80 * GIB),
        (None, CapacityRequestPolicy(default="0", validRange=CapacityRange(min="0", step="1")), 0),
        (None, None, 80 * GIB),
        # A request and no policy: the request as it is.
        (500 * MIB, None, 500 * MIB),
        # validRange: raised to the minimum, rounded up to min + n x step, refused above the maximum.
        (500 * MIB, LOCAL, 1 * GIB),
        (24 * GIB, LOCAL, 24 * GIB),
        (24 * GIB + 1, LOCAL, 24 * GIB + MIB),
        (5 * GIB, CAPPED, 8 * GIB),
        (40 * GIB, CAPPED, 40 * GIB),
        (41 * GIB, CAPPED, None),
        # ...unless it is the default, which never violates the policy.
        (80 * GIB, CAPPED, 80 * GIB),
        # validValues: the smallest valid value at least the request; above them all refused.
        (24 * GIB, VALUES, 40 * GIB),
        (10 * GIB, VALUES, 10 * GIB),
        (1, VALUES, 10 * GIB),
        (81 * GIB, VALUES, None),
        # A validRange without a step keeps a request at or above the minimum as it is.
        (3 * GIB + 7, CapacityRequestPolicy(default="80Gi", validRange=CapacityRange(min="1Gi")), 3 * GIB + 7),
    ],
)
def test_consumed_capacity_is_the_allocators(
    requested: int | None, policy_: CapacityRequestPolicy | None, consumed: int | None
) -> None:
    got = consumed_capacity(Fraction(requested) if requested is not None else None, CAP, policy_)
    assert got == (Fraction(consumed) if consumed is not None else None)


def test_a_share_is_sized_on_the_memory_the_allocator_will_consume() -> None:
    def share(need_mib: int, policy_: CapacityRequestPolicy | None, **bounds: int) -> tuple[int, int | None, bool]:
        d = assign_share(
            need_mib=need_mib,
            device_mib=80 * 1024,
            sharing_mode=SharingMode.SHARED,
            placement=PlacementType.WHOLE_DEVICE,
            allow_multiple_allocations=True,
            memory_policy=policy_,
            **bounds,
        )
        return d.percent, d.requestMiB, d.admitsNeed

    assert share(24 * 1024, None) == (30, 24 * 1024, True)
    assert share(24 * 1024, LOCAL) == (30, 24 * 1024, True)
    # 500 MiB asks for the policy's minimum, 1 GiB: the share is 2 % (1 % holds 819 MiB only).
    assert share(500, LOCAL) == (2, 1024, True)
    # 24 GiB on a card that takes 10/20/40/80 GiB: the claim gets 40 GiB, half the card.
    assert share(24 * 1024, VALUES) == (50, 40 * 1024, True)
    # 60 GiB rounds up to the whole card: a whole device, no memory request.
    assert share(60 * 1024, VALUES) == (100, None, True)
    # Above the range's maximum: no share of this card; whole only because a request-less claim
    # consumes all of it (the default).
    assert share(44 * 1024, CAPPED) == (100, None, True)
    partial_default = CapacityRequestPolicy(default="4Gi", validRange=CapacityRange(min="4Gi", max="40Gi"))
    assert share(44 * 1024, partial_default) == (100, None, False)
    # The class's bounds clamp the share sized on the rounded request.
    assert share(24 * 1024, VALUES, max_share_percent=40) == (40, 40 * 1024, False)
    assert memory_request_mib(24 * 1024, 80 * 1024, VALUES) == 40 * 1024
    assert memory_request_mib(90 * 1024, 80 * 1024, None) is None


def _with_policy(policy_: CapacityRequestPolicy, held: list[DeviceAllocation] | None = None) -> InventorySnapshot:
    base = sim_snapshot()
    card = device("gpu-0", "gpu-h100-0", H100, "hopper", 80, shareable=True, allocations=held or [])
    card = card.model_copy(update={"capacityPolicies": {"gpu.deckhouse.io/memory": policy_}})
    # One shareable H100 only, so the plan has no other card to choose.
    return InventorySnapshot(devices=[card], deviceClasses=base.deviceClasses)


SHARED_ONLY = policy(classes=["nvidia-hopper-s3-shared"], sharing=SHARED, placement=WHOLE)
QWEN = "Qwen/Qwen2.5-32B-Instruct-AWQ"  # the compiled hopper recipe: vramMinimumGiB 24


def test_the_plan_books_what_the_allocator_consumes() -> None:
    p = planned(plan(QWEN, SHARED_ONLY, _with_policy(VALUES)))
    assert p.memoryRequestMiB == 40 * 1024
    assert p.sharePercent == 50
    p = planned(plan(QWEN, SHARED_ONLY, _with_policy(LOCAL)))
    assert (p.memoryRequestMiB, p.sharePercent) == (24 * 1024, 30)


def test_room_is_judged_on_the_rounded_request() -> None:
    # 30 GiB held: 24 GiB rounds to 40 GiB, and 30 + 40 <= 80 fits.
    fits = [DeviceAllocation(holder="ns/other", sharePercent=0, memoryMiB=30 * 1024)]
    assert planned(plan(QWEN, SHARED_ONLY, _with_policy(VALUES, fits))).memoryRequestMiB == 40 * 1024
    # 50 GiB held: 24 GiB would fit beside it, the 40 GiB the allocator takes would not.
    full = [DeviceAllocation(holder="ns/other", sharePercent=0, memoryMiB=50 * 1024)]
    assert plan(QWEN, SHARED_ONLY, _with_policy(VALUES, full)).plan is None
    assert planned(plan(QWEN, SHARED_ONLY, _with_policy(LOCAL, full))).memoryRequestMiB == 24 * 1024


def test_a_replan_does_not_count_another_orders_look_alike_allocation_as_its_own() -> None:
    """A steered order's replica the allocator put on another device of the kind (``gpu/any``): the
    held plan still names the planned device, where another order holds a claim of the same shape."""
    from planner.inventory import own_allocations

    same = DeviceAllocation(holder="ns/other", sharePercent=0, memoryMiB=24 * 1024)
    mine = DeviceAllocation(holder="ns/mine", sharePercent=0, memoryMiB=24 * 1024)
    planned_card = device("gpu-0", "n", H100, "hopper", 80, shareable=True, allocations=[same])
    allocated_card = device("gpu-1", "n", H100, "hopper", 80, shareable=True, allocations=[mine])
    snapshot = InventorySnapshot(devices=[planned_card, allocated_card])
    own = own_allocations(snapshot, "ns/mine", "n", ["gpu-0"], 30, 24 * 1024)
    assert own == frozenset({("n/gpu-1", 0)})
    # An inventory that cannot tell holders apart still lends the look-alike on the planned device.
    assert own_allocations(snapshot, "ns/unknown", "n", ["gpu-0"], 30, 24 * 1024) == frozenset({("n/gpu-0", 0)})
