"""The replica placer counts an allocation it wrote once: in place of its order's reservation.

Pure: ``worker.observer.replica_placer._with_allocations`` over a planner snapshot. Found by the e2e
benchmark's planned = allocated read-back (2026-12-06): a T4 card planned for five orders of 3 GiB
(15 of its 16 GiB) held, after the placer allocated the first order's replica there, that order's
reservation and its allocation both; the next order planned there found no room, went to ``any``
onto another order's planned card, and that order went to ``any`` in turn.
"""

from __future__ import annotations

from planner.inventory import Device, DeviceAllocation, InventorySnapshot, occupancy
from tests.planner.helpers import device
from worker.observer.replica_placer import _with_allocations

GIB = 1024


def t4(name: str, *holders: str) -> Device:
    return device(
        name,
        "gpu-t4-0",
        "Tesla T4",
        "turing",
        16,
        shareable=True,
        allocations=[DeviceAllocation(holder=h, sharePercent=0, memoryMiB=3 * GIB, reserved=True) for h in holders],
    )


def written(holder: str) -> DeviceAllocation:
    return DeviceAllocation(holder=holder, sharePercent=0, memoryMiB=3 * GIB)


def test_an_allocation_on_its_planned_card_takes_the_place_of_its_reservation() -> None:
    snapshot = InventorySnapshot(devices=[t4("gpu-1", "ns/o1", "ns/o2", "ns/o3", "ns/o4", "ns/o5")])
    after = _with_allocations(snapshot, [("gpu-t4-0/gpu-1", written("ns/o1"))])
    (card,) = after.devices
    assert sorted((a.holder, a.reserved) for a in card.allocations) == [
        ("ns/o1", False),
        ("ns/o2", True),
        ("ns/o3", True),
        ("ns/o4", True),
        ("ns/o5", True),
    ]
    # The next order planned there (its own reservation lent to it) still has room: 15 of 16 GiB.
    assert occupancy(card).memoryMiB == 15 * GIB


def test_an_allocation_elsewhere_gives_its_planned_place_back() -> None:
    snapshot = InventorySnapshot(devices=[t4("gpu-1", "ns/o1", "ns/o2"), t4("gpu-2")])
    after = _with_allocations(snapshot, [("gpu-t4-0/gpu-2", written("ns/o1"))])
    planned, other = after.devices
    assert [a.holder for a in planned.allocations] == ["ns/o2"]
    assert [(a.holder, a.reserved) for a in other.allocations] == [("ns/o1", False)]


def test_an_allocation_of_an_order_with_no_reservation_is_added() -> None:
    snapshot = InventorySnapshot(devices=[t4("gpu-1", "ns/o2")])
    after = _with_allocations(snapshot, [("gpu-t4-0/gpu-1", written("ns/o9"))])
    assert sorted(a.holder for a in after.devices[0].allocations) == ["ns/o2", "ns/o9"]
