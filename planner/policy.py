"""The class's acceleratorPolicy as the planner applies it: defaults filled in, pure.

No policy: one whole, dedicated device per replica. Inside a policy, empty lists mean what the CRD
says: every device class; Dedicated only; WholeDevice only; no maxAcceleratorCount, one device.
"""

from __future__ import annotations

from dataclasses import dataclass

from inference_api.types import AcceleratorPolicy, PlacementType, SharingMode
from planner.inventory import Device


@dataclass(frozen=True)
class EffectivePolicy:
    """The class's acceleratorPolicy with its defaults applied."""

    deviceClasses: tuple[str, ...] | None
    sharingModes: frozenset[SharingMode]
    placementTypes: frozenset[PlacementType]
    maxAcceleratorCount: int
    minSharePercent: int | None
    maxSharePercent: int | None


def effective_policy(policy: AcceleratorPolicy | None) -> EffectivePolicy:
    """No policy: one whole, dedicated device per replica. Empty lists mean what the CRD says:
    every device class; Dedicated only; WholeDevice only. No maxAcceleratorCount: one device."""
    if policy is None:
        return EffectivePolicy(None, frozenset({SharingMode.DEDICATED}), frozenset({PlacementType.WHOLE_DEVICE}), 1,
                               None, None)  # fmt: skip
    return EffectivePolicy(
        deviceClasses=tuple(policy.allowedDeviceClasses) if policy.allowedDeviceClasses else None,
        sharingModes=frozenset(policy.allowedSharingModes or [SharingMode.DEDICATED]),
        placementTypes=frozenset(policy.allowedPlacementTypes or [PlacementType.WHOLE_DEVICE]),
        maxAcceleratorCount=policy.maxAcceleratorCount or 1,
        minSharePercent=policy.minSharePercent,
        maxSharePercent=policy.maxSharePercent,
    )


def sharing_mode_for(device: Device, modes: frozenset[SharingMode]) -> SharingMode:
    """Shared when the class allows it and the device can be shared (or Dedicated is not allowed, in
    which case the share rule gives the whole device anyway); Dedicated otherwise."""
    if SharingMode.SHARED in modes and (device.allowMultipleAllocations or SharingMode.DEDICATED not in modes):
        return SharingMode.SHARED
    return SharingMode.DEDICATED


def tensor_parallel_sizes(max_count: int) -> list[int]:
    """vLLM splits attention heads evenly across devices: powers of two are the sizes that divide the
    head counts of practically every model."""
    sizes, n = [], 1
    while n <= max_count:
        sizes.append(n)
        n *= 2
    return sizes
