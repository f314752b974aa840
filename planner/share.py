"""The share rule of phase 2.4: how much of a device an order is assigned.

    The plan takes the smallest whole percent that admits the memory the model needs on the chosen
    device, clamps it into minSharePercent/maxSharePercent of the class, and falls back to a whole
    device when the class permits no sharing, when the chosen placement is not a whole device in a
    sharing mode, or when either memory figure is unknown. A share below 100 also requires the
    selected DRA device to publish allowMultipleAllocations.

Memory is counted in whole MiB so that the arithmetic is exact: a share p admits a need n on a device
of m MiB when p x m >= 100 x n.
"""

from __future__ import annotations

from dataclasses import dataclass

from inference_api.types import PlacementType, SharingMode

WHOLE = 100


def smallest_admitting_percent(need_mib: int, device_mib: int) -> int:
    """ceil(100 x need / device), at least 1; above 100 when the device is too small."""
    if device_mib <= 0:
        raise ValueError("device memory must be positive")
    return max(1, -(-100 * need_mib // device_mib))


def admits(percent: int, need_mib: int, device_mib: int) -> bool:
    return percent * device_mib >= 100 * need_mib


@dataclass(frozen=True)
class ShareDecision:
    percent: int
    # Does the assigned share hold the model? False when the device is too small even whole, or when
    # maxSharePercent clamped the share below the need. Unknown memory is taken on trust (True).
    admitsNeed: bool
    # Why the share is 100, when it is because of a rule rather than the need: for messages and tests.
    wholeBecause: str | None = None

    @property
    def memory_request_needed(self) -> bool:
        """A share of 1..99 is sent with the claim's capacity request gpu.deckhouse.io/memory."""
        return 1 <= self.percent <= 99


def assign_share(
    *,
    need_mib: int | None,
    device_mib: int | None,
    sharing_mode: SharingMode,
    placement: PlacementType,
    allow_multiple_allocations: bool,
    min_share_percent: int | None = None,
    max_share_percent: int | None = None,
) -> ShareDecision:
    """Apply the share rule to one chosen device."""
    fits_whole = need_mib is None or device_mib is None or need_mib <= device_mib
    if sharing_mode is not SharingMode.SHARED:
        return ShareDecision(WHOLE, fits_whole, "the sharing mode is Dedicated")
    if placement is not PlacementType.WHOLE_DEVICE:
        return ShareDecision(WHOLE, fits_whole, "a partition is taken whole")
    if need_mib is None or device_mib is None:
        return ShareDecision(WHOLE, fits_whole, "a memory figure is unknown")
    if not allow_multiple_allocations:
        return ShareDecision(WHOLE, fits_whole, "the device does not publish allowMultipleAllocations")
    low = min_share_percent or 1
    high = max_share_percent or WHOLE
    raw = smallest_admitting_percent(need_mib, device_mib)
    percent = max(low, min(raw, high))
    return ShareDecision(percent, admits(percent, need_mib, device_mib))
