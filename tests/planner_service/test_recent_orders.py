"""What the service weighs for the fragmentation-aware choice, and the stranded-capacity figure it publishes."""

from __future__ import annotations

import pytest

from planner.fragmentation import RecentDemand
from planner.inventory import DeviceAllocation, DeviceClass, InventorySnapshot, Node
from planner.planning import stranded_devices
from planner.service import RecentOrders, demand_of
from tests import factories as f
from tests.planner.helpers import cel, device


def test_recent_orders_are_counted_by_kind_and_refreshed_in_steps() -> None:
    recent = RecentOrders(window=8, refresh=3)
    half = f.plan(share=50, memory_request_mib=40960)
    whole = f.plan(share=100)
    recent.add(half)
    # The first plan makes the list at once.
    assert recent.demands() == [demand_of(half).model_copy(update={"weight": 1.0})]
    recent.add(whole)
    recent.add(whole)
    assert len(recent.demands()) == 1  # not refreshed yet
    recent.add(whole)
    weights = {d.sharePercent: d.weight for d in recent.demands()}
    assert weights == {50: 1.0, 100: 3.0}
    assert demand_of(half) == RecentDemand(
        deviceCount=1, sharePercent=50, cpuMilli=4000, memoryMiB=32 * 1024, deviceClasses=("nvidia-h100-mps-mig",)
    )


def test_stranded_capacity_is_what_recent_orders_cannot_use() -> None:
    devices = [
        device("gpu-0", "n1", "Tesla T4", "turing", 16, shareable=True,
               allocations=[DeviceAllocation(holder="a/b", sharePercent=70)]),
        device("gpu-1", "n1", "Tesla T4", "turing", 16, shareable=True),
    ]  # fmt: skip
    snapshot = InventorySnapshot(
        devices=devices,
        deviceClasses=[DeviceClass(name="t4", selectors=[cel(productName="Tesla T4")])],
        nodes=[Node(name="n1", cpuMilli=64000, memoryMiB=65536)],
    )
    halves = [RecentDemand(deviceCount=1, sharePercent=50, cpuMilli=1000, memoryMiB=1024)]
    # 30 % left on gpu-0 is too little for a half card; gpu-1 takes two.
    assert stranded_devices(snapshot, halves) == pytest.approx(0.30)
    # Orders of the whole card cannot use gpu-0's 30 % either; without recent orders nothing is judged.
    assert stranded_devices(snapshot, [RecentDemand(deviceCount=1, cpuMilli=1000)]) == pytest.approx(0.30)
    assert stranded_devices(snapshot, []) == 0.0
    # No CPU left on the node for any of them: every free share is stranded.
    starved = snapshot.model_copy(update={"nodes": [Node(name="n1", cpuMilli=500, memoryMiB=65536)]})
    assert stranded_devices(starved, halves) == pytest.approx(1.30)
