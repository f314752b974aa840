"""DeviceClass selectors judged with cel-python, including the ones that cannot be judged."""

from __future__ import annotations

import pytest

from inference_api.types import PlacementType
from planner.cel_selectors import (
    compile_selector,
    device_attributes,
    device_capacity,
    matches,
    select_devices,
)
from planner.inventory import Device, DeviceClass
from planner.quantity import Quantity
from tests.planner.helpers import H100, SIM_CLASSES, T4, D, sim_devices

DEVICES = sim_devices()


def names(device_class: DeviceClass) -> list[str]:
    selection = select_devices(device_class, DEVICES)
    assert selection.decidable, selection.error
    return [d.key for d in selection.devices]


def test_simulated_classes_select_what_the_cluster_says() -> None:
    by_name = {c.name: c for c in SIM_CLASSES}
    assert names(by_name["nvidia-h100-mps-mig"]) == [
        "gpu-h100-0/gpu-0",
        "gpu-h100-0/gpu-1",
        "gpu-h100-0/gpu-2",
        "gpu-h100-0/gpu-3",
        "gpu-h100-mig-0/gpu-0-mig-0",
        "gpu-h100-mig-0/gpu-0-mig-1",
    ]
    assert names(by_name["nvidia-hopper-s3-shared"]) == [f"gpu-h100-0/gpu-{i}" for i in range(4)]
    assert names(by_name["nvidia-t4-mps-physical"]) == [f"gpu-t4-0/gpu-{i}" for i in range(4)]
    assert names(by_name["nvidia-h100-dedicated"]) == [f"gpu-h100-0/gpu-{i}" for i in range(4, 8)]


@pytest.mark.parametrize(
    ("expression", "selected"),
    [
        (f'device.capacity["{D}"].memory.compareTo(quantity("40Gi")) >= 0', 10),
        (f'device.capacity["{D}"].memory.isGreaterThan(quantity("40Gi"))', 8),
        (f'device.capacity["{D}"].memory.isLessThan(quantity("20Gi"))', 4),
        (f'device.capacity["{D}"].memory == quantity("16Gi")', 4),
        (f'device.capacity["{D}"].memory.asInteger() == 17179869184', 4),
        (f'device.capacity["{D}"].memory.asApproximateFloat() > 5e10', 8),
        (f'device.capacity["{D}"].memory.sub(quantity("39Gi")).sign() < 0', 4),
        (f'device.capacity["{D}"].memory.add(quantity("1Gi")).isInteger()', 14),
        (f'"sharePercent" in device.capacity["{D}"]', 10),
        ('isQuantity("80Gi") && !isQuantity("eighty")', 14),
        (f'device.attributes["{D}"].productName.startsWith("NVIDIA H100")', 10),
        (f'device.attributes["{D}"].productName.matches("^Tesla")', 4),
        (f'device.attributes["{D}"].memoryGiB >= 40', 10),
        (f'device.attributes["{D}"].hardwareFamily in ["hopper", "ampere"]', 10),
        (f'has(device.attributes["{D}"].migProfile)', 2),
        ("device.allowMultipleAllocations", 10),
        ('device.driver == "other.example.com"', 0),
    ],
)
def test_expressions(expression: str, selected: int) -> None:
    assert len(names(DeviceClass(name="c", selectors=[expression]))) == selected


def test_all_selectors_must_hold() -> None:
    both = DeviceClass(
        name="c",
        selectors=[
            f'device.attributes["{D}"].productName == "{H100}"',
            f'device.attributes["{D}"].placement == "Partition"',
        ],
    )
    assert names(both) == ["gpu-h100-mig-0/gpu-0-mig-0", "gpu-h100-mig-0/gpu-0-mig-1"]
    assert len(names(DeviceClass(name="all", selectors=[]))) == len(DEVICES)


def test_qualified_extra_attributes_land_in_their_domain() -> None:
    device = Device(
        name="gpu-0",
        node="n",
        productName=T4,
        memoryMiB=16384,
        attributes={"dra.example.com/pcieRoot": "pci0", "index": 3},
        capacity={"other.example.com/slots": 4, "memory": "15Gi"},
    )
    attributes = device_attributes(device)
    assert attributes["dra.example.com"] == {"pcieRoot": "pci0"}
    assert attributes[D]["index"] == 3
    assert attributes[D]["placement"] == "WholeDevice"
    capacity = device_capacity(device)
    # An extra capacity overrides the derived one.
    assert capacity[D]["memory"] == Quantity.parse("15Gi")
    assert capacity["other.example.com"]["slots"] == Quantity.of(4)
    assert matches(DeviceClass(name="c", selectors=['device.attributes["dra.example.com"].pcieRoot == "pci0"']), device)


def test_a_capacity_that_is_no_quantity_is_refused_at_the_snapshot() -> None:
    with pytest.raises(ValueError, match="capacity"):
        Device(name="x", node="n", capacity={"memory": "lots"})


@pytest.mark.parametrize(
    ("expression", "detail"),
    [
        # Does not compile.
        ("device.driver ==", None),
        ("device.attributes[", None),
        # A missing attribute on some device: the DRA allocator fails on it too.
        (f'device.attributes["{D}"].migProfile == "3g.40gb"', "gpu-h100-0/gpu-0"),
        # Unknown domain.
        ('device.attributes["nvidia.com"].productName == "x"', "gpu-h100-0/gpu-0"),
        # Not a boolean.
        (f'device.attributes["{D}"].productName', "gpu-h100-0/gpu-0"),
        # A type clash: a string is no quantity.
        (f'device.attributes["{D}"].productName.compareTo(quantity("1")) > 0', "gpu-h100-0/gpu-0"),
        # A string that is no quantity.
        ('quantity("eighty") == quantity("80")', "gpu-h100-0/gpu-0"),
        # Division by zero.
        ("1 / 0 == 1", "gpu-h100-0/gpu-0"),
        # An unknown function.
        ("device.frobnicate()", "gpu-h100-0/gpu-0"),
    ],
)
def test_undecidable_selectors(expression: str, detail: str | None) -> None:
    selection = select_devices(DeviceClass(name="broken", selectors=[expression]), DEVICES)
    assert not selection.decidable
    assert selection.devices == ()
    error = selection.error
    assert error is not None
    assert error.device_class == "broken"
    assert error.expression == expression
    assert error.device == detail
    assert "cannot be judged" in str(error)


def test_an_expression_that_does_not_compile_is_undecidable_even_without_devices() -> None:
    selection = select_devices(DeviceClass(name="broken", selectors=["(("]), [])
    assert not selection.decidable


def test_a_guarded_expression_is_decidable() -> None:
    guarded = DeviceClass(
        name="c",
        selectors=[f'has(device.attributes["{D}"].migProfile) && device.attributes["{D}"].migProfile == "3g.40gb"'],
    )
    assert names(guarded) == ["gpu-h100-mig-0/gpu-0-mig-0", "gpu-h100-mig-0/gpu-0-mig-1"]


def test_compiled_programs_are_cached() -> None:
    expression = f'device.attributes["{D}"].placement == "{PlacementType.PARTITION.value}" && true'
    compile_selector.cache_clear()
    first = compile_selector(expression)
    second = compile_selector(expression)
    assert first is second
    assert compile_selector.cache_info().hits == 1
    broken = compile_selector("((")
    assert broken.error is not None
    assert broken is compile_selector("((")


@pytest.mark.parametrize(
    "expression",
    [
        f'device.driver == "{D}" && device.attributes["{D}"].productName == "{T4}"',
        # CEL's && is commutative: a false side absorbs an error on the other.
        f'device.attributes["{D}"].productName == "{T4}" && device.driver == "{D}"',
    ],
)
def test_a_driver_guard_keeps_other_drivers_devices_decidable(expression: str) -> None:
    nic = Device(name="nic-0", node="n", driver="net.example.com")
    gpu = Device(name="gpu-0", node="n", productName=T4, memoryMiB=16384)
    selection = select_devices(DeviceClass(name="c", selectors=[expression]), [nic, gpu])
    assert selection.decidable
    assert [d.name for d in selection.devices] == ["gpu-0"]


def test_verdicts_are_remembered_by_what_cel_sees() -> None:
    from planner import cel_selectors

    cel_selectors.clear_verdicts()
    select_devices(SIM_CLASSES[0], DEVICES)
    # Identical devices (name and node aside) were judged once.
    distinct_views = {cel_selectors._view_key(d) for d in DEVICES}
    assert len(cel_selectors._VERDICTS) == len(distinct_views) < len(DEVICES)
    # True and 1 are different attribute values to CEL.
    flag = Device(name="a", node="n", attributes={"x": True})
    one = Device(name="b", node="n", attributes={"x": 1})
    assert cel_selectors._view_key(flag) != cel_selectors._view_key(one)
    is_true = DeviceClass(name="c", selectors=[f'device.attributes["{D}"].x == true'])
    assert matches(is_true, flag)
    assert select_devices(is_true, [one]).error is not None
