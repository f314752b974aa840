"""The inventory snapshot the planner judges: accelerators, DeviceClasses and what is already taken.

A snapshot is plain data. The Kubernetes adapter (another step) fills it from the gpu module's
PhysicalGPU objects, DRA ResourceSlices, DeviceClasses and allocated ResourceClaims; tests build it
by hand. Nothing here reads the cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from inference_api.types import PlacementType
from planner.quantity import Quantity

GPU_DRIVER = "gpu.deckhouse.io"

AttributeValue = str | int | float | bool


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DeviceAllocation(_Model):
    """A slice of a device that an existing ResourceClaim holds."""

    holder: str = Field(
        description="Who holds it: namespace/name of the order (or of its ResourceClaim when no order owns it)."
    )
    sharePercent: int = Field(
        default=100,
        ge=0,
        le=100,
        description="Compute share of the device held (gpu.deckhouse.io/sharePercent); 100 for a whole or "
        "dedicated device, 0 for a memory-only shared claim.",
    )
    memoryMiB: int | None = Field(
        default=None,
        ge=0,
        description="Device memory the claim consumed (gpu.deckhouse.io/memory); "
        "absent: sharePercent of the device's memory.",
    )
    reserved: bool = Field(
        default=False,
        description="A planned place of the holder that no claim of it is allocated on yet (the claim "
        "template's planned placements), held as a claim from the template would hold it.",
    )


class CapacityRange(_Model):
    """``requestPolicy.validRange`` of a DRA device capacity (KEP-5075): quantities as published."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min: str
    max: str | None = None
    step: str | None = None


class CapacityRequestPolicy(_Model):
    """``capacity.<name>.requestPolicy`` of a DRA device (KEP-5075, consumable capacity): how much of the
    capacity a claim consumes. ``default``: what a claim that names no request for it consumes (absent:
    the whole capacity); ``validValues`` (ascending) or ``validRange``: a request is rounded up to the
    next valid amount, and one above every valid amount cannot be allocated on the device."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    default: str | None = None
    validValues: tuple[str, ...] = ()
    validRange: CapacityRange | None = None

    @model_validator(mode="after")
    def _quantities(self) -> Self:
        texts = [self.default, *self.validValues]
        if self.validRange is not None:
            texts += [self.validRange.min, self.validRange.max, self.validRange.step]
        for text in texts:
            if text is not None:
                Quantity.of(text)
        if (
            self.validRange is not None
            and self.validRange.step is not None
            and Quantity.of(self.validRange.step).value <= 0
        ):
            raise ValueError("validRange.step must be positive")
        return self


class Device(_Model):
    """One allocatable DRA device: a whole GPU or a partition (MIG slice) of one."""

    name: str = Field(description="Device name in the ResourceSlice, e.g. gpu-0 or gpu-0-mig-3g.40gb-0.")
    node: str = Field(description="Node the device is on.")
    pool: str | None = Field(default=None, description="ResourceSlice pool; defaults to the node.")
    driver: str = Field(default=GPU_DRIVER, description="DRA driver publishing the device.")
    productName: str | None = Field(default=None, description="e.g. NVIDIA H100 80GB HBM3, Tesla T4.")
    memoryMiB: int | None = Field(
        default=None, ge=0, description="Memory of the device (or partition); absent: unknown."
    )
    hardwareFamily: str | None = Field(
        default=None, description="e.g. hopper, ampere, turing; absent: derived from the product name."
    )
    placement: PlacementType = Field(default=PlacementType.WHOLE_DEVICE, description="WholeDevice or Partition.")
    migProfile: str | None = Field(default=None, description="MIG profile of a partition, e.g. 3g.40gb.")
    allowMultipleAllocations: bool = Field(
        default=False, description="The device may be shared by several claims (a share below 100 needs it)."
    )
    parentDevice: str | None = Field(
        default=None,
        description="A partition: the whole device (same node) it is cut from. A whole device and its partitions "
        "exclude each other.",
    )
    attributes: dict[str, AttributeValue] = Field(
        default_factory=dict,
        description='More DRA attributes for selectors: "domain/name" or a bare name in the driver\'s domain. '
        "They override the attributes derived from the fields above.",
    )
    capacity: dict[str, str | int] = Field(
        default_factory=dict,
        description='More DRA capacities (quantities such as "80Gi"), named like attributes.',
    )
    capacityPolicies: dict[str, CapacityRequestPolicy] = Field(
        default_factory=dict,
        description="The requestPolicy of each capacity that publishes one (KEP-5075), named as in capacity.",
    )
    allocations: list[DeviceAllocation] = Field(
        default_factory=list, description="What existing ResourceClaims already hold of this device."
    )

    @field_validator("capacity")
    @classmethod
    def _quantities(cls, value: dict[str, str | int]) -> dict[str, str | int]:
        for name, raw in value.items():
            try:
                Quantity.of(raw)
            except ValueError as exc:
                raise ValueError(f"capacity {name}: {exc}") from exc
        return value

    @property
    def key(self) -> str:
        return f"{self.node}/{self.name}"

    def capacity_policy(self, bare: str) -> CapacityRequestPolicy | None:
        """The requestPolicy of capacity ``bare`` (``memory``), published bare or in the driver's domain."""
        return self.capacityPolicies.get(bare) or self.capacityPolicies.get(f"{self.driver}/{bare}")

    @property
    def label(self) -> str:
        """How a message names the device."""
        product = self.productName or "unknown product"
        if self.migProfile:
            product = f"{product} {self.migProfile}"
        return f"{product} ({self.key})"


class DeviceClass(_Model):
    """A DRA DeviceClass as far as planning goes: its name and its CEL selectors (all must hold)."""

    name: str
    selectors: list[str] = Field(
        default_factory=list, description="CEL expressions of spec.selectors[].cel.expression; empty selects all."
    )


class Taint(_Model):
    """A node taint (core/v1 Taint)."""

    key: str
    value: str | None = None
    effect: str = Field(description="NoSchedule, PreferNoSchedule or NoExecute.")


class Node(_Model):
    """What the scheduler judges of a node before it binds a pod there: allocatable CPU, memory and
    pods minus what the pods bound there request, taints, and whether it is cordoned."""

    name: str
    cpuMilli: int | None = Field(default=None, ge=0, description="status.allocatable.cpu; absent: not judged.")
    memoryMiB: int | None = Field(default=None, ge=0, description="status.allocatable.memory; absent: not judged.")
    pods: int | None = Field(default=None, ge=0, description="status.allocatable.pods; absent: not judged.")
    requestedCpuMilli: int = Field(default=0, ge=0, description="CPU the pods bound to the node request.")
    requestedMemoryMiB: int = Field(default=0, ge=0, description="Memory the pods bound to the node request.")
    podCount: int = Field(default=0, ge=0, description="Pods bound to the node (not finished).")
    taints: list[Taint] = Field(default_factory=list)
    unschedulable: bool = Field(default=False, description="spec.unschedulable (cordoned).")
    ready: bool = Field(
        default=True,
        description="The node's Ready condition is True. A node that is not takes no new pod, whatever a "
        "blanket toleration of the module's workloads lets past its not-ready/unreachable taints.",
    )
    labels: dict[str, str] = Field(default_factory=dict, description="For the workloads' nodeSelector.")


class InventorySnapshot(_Model):
    devices: list[Device] = Field(default_factory=list)
    deviceClasses: list[DeviceClass] = Field(default_factory=list)
    nodes: list[Node] | None = Field(
        default=None,
        description="The nodes the devices are on, as the scheduler judges them. None: nodes are not judged "
        "(a snapshot built without them); a device whose node is missing from a list is on no schedulable node.",
    )

    # What plans compute of the snapshot that allocations do not change (``planner.snapshot``): the
    # device and node fields other than allocations and requests are not changed once it is built.
    _static: dict[str, object] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _unique(self) -> Self:
        keys = [d.key for d in self.devices]
        if len(keys) != len(set(keys)):
            raise ValueError("devices must be unique by node/name")
        names = [c.name for c in self.deviceClasses]
        if len(names) != len(set(names)):
            raise ValueError("deviceClasses must be unique by name")
        if self.nodes is not None and len({n.name for n in self.nodes}) != len(self.nodes):
            raise ValueError("nodes must be unique by name")
        return self

    def __eq__(self, other: object) -> bool:
        """Equal content (what plans keep on the snapshot does not count)."""
        if not isinstance(other, InventorySnapshot):
            return NotImplemented
        return (self.devices, self.deviceClasses, self.nodes) == (other.devices, other.deviceClasses, other.nodes)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy starts with nothing kept: its devices may differ."""
        copied = super().model_copy(update=update, deep=deep)
        copied._static = {}
        return copied

    def device_class(self, name: str) -> DeviceClass | None:
        return next((c for c in self.deviceClasses if c.name == name), None)


@dataclass(frozen=True)
class Occupancy:
    """What others hold of a device, seen from one order."""

    sharePercent: int
    memoryMiB: int
    # Taken in a way no share can coexist with: a claim on the parent of a partition, a claim on a
    # partition of a whole device, or any claim on a device that cannot be shared.
    exclusive: bool

    @property
    def empty(self) -> bool:
        return self.sharePercent == 0 and self.memoryMiB == 0 and not self.exclusive


# An allocation is named by its device's key and its position in the device's list.
AllocationId = tuple[str, int]


def own_allocations(
    snapshot: InventorySnapshot,
    holder: str | None,
    held_node: str | None = None,
    held_devices: Sequence[str] = (),
    held_share_percent: int | None = None,
    held_memory_mib: int | None = None,
    *,
    by_key: Mapping[str, Device] | None = None,
) -> frozenset[AllocationId]:
    """The allocations that are the order's own, so that a replan does not count them against it.

    Allocations carrying the order's holder are its own. For an inventory that cannot tell holders
    apart (no allocation carries the holder), each device the current plan names lends one allocation
    that looks like the plan's: its
    memory request, or for a whole device the whole device, or else its share. ``by_key`` (device key →
    device) is an index of the snapshot, when built.
    """
    own: set[AllocationId] = set()
    if holder is not None:
        for device in snapshot.devices:
            for i, allocation in enumerate(device.allocations):
                if allocation.holder == holder:
                    own.add((device.key, i))
    owned_devices = {key for key, _ in own}
    if held_node is None or not held_devices or own:
        # An inventory that names the order's allocations tells holders apart: another order's look-alike
        # allocation on the device the plan named is not lent (a steered order's replica the allocator
        # put elsewhere would otherwise count another order's claim as its own).
        return frozenset(own)
    if by_key is None:
        held = [d for d in snapshot.devices if d.node == held_node and d.name in held_devices]
    else:
        found = (by_key.get(f"{held_node}/{name}") for name in dict.fromkeys(held_devices))
        held = [d for d in found if d is not None]
    for device in held:
        if device.key in owned_devices:
            continue
        for i, allocation in enumerate(device.allocations):
            if _looks_held(device, allocation, held_share_percent, held_memory_mib):
                own.add((device.key, i))
                break
    return frozenset(own)


def _looks_held(device: Device, allocation: DeviceAllocation, share: int | None, memory_mib: int | None) -> bool:
    if memory_mib is not None:
        return allocation.memoryMiB == memory_mib
    if share is None or share >= 100:
        return allocation.sharePercent == 100 or (
            allocation.memoryMiB is not None and allocation.memoryMiB == device.memoryMiB
        )
    return allocation.sharePercent == share


def _others(device: Device, own: frozenset[AllocationId]) -> list[DeviceAllocation]:
    if not own:
        return device.allocations
    key = device.key
    return [a for i, a in enumerate(device.allocations) if (key, i) not in own]


def allocated_mib(device: Device, allocation: DeviceAllocation) -> int:
    """The memory an allocation takes of its device: the memory it names, else its share of the device's."""
    if allocation.memoryMiB is not None:
        return allocation.memoryMiB
    if device.memoryMiB is None:
        return 0
    return device.memoryMiB * allocation.sharePercent // 100


def related_devices(snapshot: InventorySnapshot) -> dict[str, tuple[Device, ...]]:
    """Device key → the devices sharing its silicon: a partition's whole device, a whole device's partitions."""
    by_key = {d.key: d for d in snapshot.devices}
    related: dict[str, list[Device]] = {}
    for device in snapshot.devices:
        if device.parentDevice is None:
            continue
        parent = by_key.get(f"{device.node}/{device.parentDevice}")
        if parent is None:
            continue
        related.setdefault(device.key, []).append(parent)
        related.setdefault(parent.key, []).append(device)
    return {key: tuple(devices) for key, devices in related.items()}


EMPTY = Occupancy(sharePercent=0, memoryMiB=0, exclusive=False)


def occupancy(device: Device, own: frozenset[AllocationId] = frozenset(), related: Sequence[Device] = ()) -> Occupancy:
    """What others hold of ``device``; ``related`` are the devices sharing its silicon."""
    if not device.allocations and not any(d.allocations for d in related):
        return EMPTY
    others = _others(device, own)
    share = min(100, sum(a.sharePercent for a in others))
    memory = sum(allocated_mib(device, a) for a in others)
    exclusive = bool(others) and not device.allowMultipleAllocations
    # A whole device and its partitions share the same silicon: a claim on one takes the other.
    if any(_others(d, own) for d in related):
        exclusive = True
    return Occupancy(sharePercent=share, memoryMiB=memory, exclusive=exclusive)
