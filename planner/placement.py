"""Stage 1 of a plan, placement: the devices a class lets an order try, grouped for the fit. Pure.

The device classes the class allows (its allow-list ∩ the cluster's DeviceClasses, all of them
without a list), the devices their CEL selectors choose, narrowed to the allowed placement types;
each device with the sharing mode the order would have on it and the hardware family the recipe
tables know it by. What is left out, and why, goes to the trace.
"""

from __future__ import annotations

from dataclasses import dataclass

from inference_api.types import PlacementType, SharingMode
from planner.cel_selectors import SelectorError, select_devices
from planner.inventory import Device
from planner.policy import EffectivePolicy, sharing_mode_for
from planner.recipes import RecipeBook
from planner.refusals import Trace
from planner.snapshot import SnapshotIndex, free_mib


@dataclass(frozen=True)
class Slot:
    """A device a class selects, with the sharing mode the order would have on it."""

    deviceClass: str
    device: Device
    family: str | None
    mode: SharingMode
    # Position of the class in the allow-list (the administrator's order of preference), or in the
    # cluster's list when the class names none.
    classOrder: int = 0


@dataclass
class Group:
    """Devices that may work together in tensor parallel: one class, one node, one product, whole
    devices."""

    slots: list[Slot]
    family: str | None


@dataclass
class Shape:
    """The groups of one class, product, memory, placement, family and sharing mode, across nodes.
    One device of any of them is the same candidate but for the node and the device, so a one-device
    plan looks for the best fit over all of them at once: ``byFree`` holds their slots by (free memory,
    node, name) as the snapshot leaves them, ``frees`` the free memory alone, so that a search starts
    where the model fits."""

    groups: list[Group]
    family: str | None
    byKey: dict[str, Slot]
    byFree: list[tuple[float, str, str, Slot]]
    frees: list[float]
    # Node → its (device key, slot) pairs: the fragmentation-aware search walks the shape node by node.
    byNode: dict[str, list[tuple[str, Slot]]]

    @property
    def first(self) -> Slot:
        return self.groups[0].slots[0]


@dataclass
class Placement:
    """Stage 1's answer: the slots and their shapes."""

    slots: list[Slot]
    shapes: list[Shape]
    # The hardware families of the slots, in the order they first appear.
    families: list[str | None]


@dataclass(frozen=True)
class _Stage1:
    """Stage 1 on one snapshot for one policy and recipe book: the slots, their groups by shape, and
    what the trace records. Allocations change none of it."""

    slots: list[Slot]
    # Per shape: its groups, its slots by device key, its (key, slot) pairs by node.
    shapeGroups: list[tuple[list[Group], dict[str, Slot], dict[str, list[tuple[str, Slot]]]]]
    noDeviceClasses: bool
    missingClasses: list[str]
    undecidable: list[SelectorError]
    emptyClasses: list[str]
    filteredOut: dict[str, set[PlacementType]]


def place(
    index: SnapshotIndex, policy: EffectivePolicy, book: RecipeBook, trace: Trace, *, by_free: bool = True
) -> Placement:
    """The slots the class may try on the index's snapshot, grouped into shapes. ``by_free``: order each
    shape's slots by free memory (the best-fit search needs it)."""
    stage = index.cached(("stage1", policy, id(book)), lambda: (_stage1(index, policy, book), book))[0]
    trace.noDeviceClasses = stage.noDeviceClasses
    trace.missingClasses.extend(stage.missingClasses)
    trace.undecidable.extend(stage.undecidable)
    trace.emptyClasses.extend(stage.emptyClasses)
    for name, placements in stage.filteredOut.items():
        trace.filteredOut.setdefault(name, set()).update(placements)
    shapes = []
    for shape_groups, by_key, by_node in stage.shapeGroups:
        ordered = (
            sorted((free_mib(s.device, index.base[key]), s.device.node, s.device.name, s) for key, s in by_key.items())
            if by_free
            else []
        )
        shapes.append(
            Shape(shape_groups, shape_groups[0].family, by_key, ordered, [f for f, _, _, _ in ordered], by_node)
        )
    return Placement(stage.slots, shapes, list(dict.fromkeys(s.family for s in stage.slots)))


def _stage1(index: SnapshotIndex, policy: EffectivePolicy, book: RecipeBook) -> _Stage1:
    trace = Trace()
    slots = _slots(index, policy, book, trace)
    grouped: dict[tuple[object, ...], list[Slot]] = {}
    for slot in slots:
        d = slot.device
        grouped.setdefault(
            (
                slot.deviceClass,
                d.node,
                d.productName,
                d.memoryMiB,
                d.placement,
                slot.family,
                slot.mode,
                d.capacity_policy("memory"),
            ),
            [],
        ).append(slot)
    by_shape: dict[tuple[object, ...], list[Group]] = {}
    for (device_class, _node, *rest), members in grouped.items():
        # The share is decided on a group's first device: shapes keep that device's sharing too.
        shape_key = (device_class, *rest, members[0].device.allowMultipleAllocations)
        by_shape.setdefault(shape_key, []).append(Group(members, members[0].family))
    shape_groups = []
    for groups in by_shape.values():
        by_key = {s.device.key: s for g in groups for s in g.slots}
        by_node: dict[str, list[tuple[str, Slot]]] = {}
        for key, slot in by_key.items():
            by_node.setdefault(slot.device.node, []).append((key, slot))
        shape_groups.append((groups, by_key, by_node))
    return _Stage1(
        slots,
        shape_groups,
        trace.noDeviceClasses,
        trace.missingClasses,
        trace.undecidable,
        trace.emptyClasses,
        trace.filteredOut,
    )


def class_sets(index: SnapshotIndex) -> dict[str, frozenset[str]]:
    """Device key → the names of the snapshot's device classes that select it (undecidable classes
    select nothing here). Kept on the snapshot."""

    def make() -> dict[str, frozenset[str]]:
        sets: dict[str, set[str]] = {}
        for device_class in index.snapshot.deviceClasses:
            for device in select_devices(device_class, index.snapshot.devices).devices:
                sets.setdefault(device.key, set()).add(device_class.name)
        return {key: frozenset(names) for key, names in sets.items()}

    return index.cached("classSets", make)


def _slots(index: SnapshotIndex, policy: EffectivePolicy, book: RecipeBook, trace: Trace) -> list[Slot]:
    inventory = index.snapshot
    if policy.deviceClasses is None:
        classes = list(inventory.deviceClasses)
        trace.noDeviceClasses = not classes
    else:
        classes = []
        for name in policy.deviceClasses:
            found = inventory.device_class(name)
            if found is None:
                trace.missingClasses.append(name)
            else:
                classes.append(found)

    slots: list[Slot] = []
    for order, device_class in enumerate(classes):
        selection = select_devices(device_class, inventory.devices)
        if selection.error is not None:
            trace.undecidable.append(selection.error)
            continue
        if not selection.devices:
            trace.emptyClasses.append(device_class.name)
            continue
        for device in selection.devices:
            if device.placement not in policy.placementTypes:
                trace.filteredOut.setdefault(device_class.name, set()).add(device.placement)
                continue
            family = book.hardware_family(device.hardwareFamily, device.productName)
            mode = sharing_mode_for(device, policy.sharingModes)
            slots.append(Slot(device_class.name, device, family, mode, order))
    return slots
