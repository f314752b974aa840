"""The planner against the simulated cluster's own inventory file (deploy/dev/gpu-inventory.yaml).

Its DeviceClass selectors are judged here by cel-python and compared with the Python twin the
simulated cluster ships, so the two stay in agreement.
"""

from __future__ import annotations

import pytest

from devstack.cluster import inventory as sim
from inference_api.plan import OrderFacts
from inference_api.types import PlacementType
from planner.cel_selectors import select_devices
from planner.inventory import Device, DeviceClass, InventorySnapshot
from planner.planning import PlanningRequest, plan_launch
from tests.planner.helpers import DEFAULT_LLM


@pytest.fixture(scope="module")
def inventory() -> sim.Inventory:
    # Both are in the repository (devstack, deploy/dev/gpu-inventory.yaml): a missing one is a failure.
    return sim.load_inventory()


def snapshot(inv: sim.Inventory) -> InventorySnapshot:
    devices = [
        Device(
            name=d.name,
            node=d.node,
            productName=d.product_name,
            memoryMiB=d.memory_gib * 1024,
            hardwareFamily=d.hardware_family,
            placement=PlacementType(d.placement),
            migProfile=d.mig_profile,
            allowMultipleAllocations=d.shareable,
            attributes=dict(d.attributes),
        )
        for d in inv.devices
    ]
    classes = [DeviceClass(name=c.name, selectors=[c.cel]) for c in inv.device_classes]
    return InventorySnapshot(devices=devices, deviceClasses=classes)


def test_cel_agrees_with_the_simulated_cluster(inventory: sim.Inventory) -> None:
    snap = snapshot(inventory)
    for device_class in snap.deviceClasses:
        selection = select_devices(device_class, snap.devices)
        assert selection.decidable, selection.error
        expected = {(d.node, d.name) for d in inventory.devices_of_class(device_class.name)}
        assert {(d.node, d.name) for d in selection.devices} == expected


def test_default_llm_plans_on_the_simulated_cluster(inventory: sim.Inventory) -> None:
    outcome = plan_launch(
        PlanningRequest(
            facts=OrderFacts(modelName="Qwen/Qwen2.5-32B-Instruct-AWQ"),
            acceleratorPolicy=DEFAULT_LLM,
            inventory=snapshot(inventory),
        )
    )
    assert outcome.plan is not None, outcome.refusal
    assert outcome.plan.recipe.hardwareFamily == "hopper"
