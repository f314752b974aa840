"""The share rule of phase 2.4: how much of a device an order is assigned.

    The plan takes the smallest whole percent that admits the memory the model needs on the chosen
    device, clamps it into minSharePercent/maxSharePercent of the class, and falls back to a whole
    device when the class permits no sharing, when the chosen placement is not a whole device in a
    sharing mode, or when either memory figure is unknown. A share below 100 also requires the
    selected DRA device to publish allowMultipleAllocations.

Memory is counted in whole MiB so that the arithmetic is exact: a share p admits a need n on a device
of m MiB when p x m >= 100 x n.

The device's published share policy (KEP-5075 ``requestPolicy`` of its ``memory`` capacity) is applied
as the DRA allocator applies it (``consumed_capacity``): the memory a share asks is rounded up to the
policy's next valid amount (``validRange`` min and step, ``validValues``) before the share is sized, so
the claim requests, the plan books and the allocation consumes the same amount; a need above every
valid amount is no share of that device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from inference_api.types import PlacementType, SharingMode
from planner.inventory import CapacityRequestPolicy
from planner.quantity import MIB, Quantity

WHOLE = 100


def _value(text: str) -> Fraction:
    return Quantity.of(text).value


def _integer(value: Fraction) -> int:
    """resource.Quantity.Value(): the value rounded up to a whole number."""
    return math.ceil(value)


def consumed_capacity(
    requested: Fraction | None, capacity: Fraction, policy: CapacityRequestPolicy | None
) -> Fraction | None:
    """What the DRA allocator consumes of one capacity for one claim (KEP-5075, the structured
    allocator's ``calculateConsumedCapacity`` then ``violatesPolicy``), in the capacity's base unit
    (bytes for memory); None when the request violates the policy (the device cannot be allocated).

    * no request: the policy's ``default``, else the whole capacity;
    * a request and no policy: the request;
    * ``validRange``: below ``min`` → ``min``; with a ``step``, rounded up to ``min + n x step``
      (whole numbers, as the allocator computes it); above ``max`` → refused;
    * ``validValues``: the smallest valid value at least the request; above them all → refused.

    Whether it also fits beside the device's other allocations (the sum up to the capacity) is the
    capacity rule's, not this one's."""
    if requested is None:
        if policy is not None and policy.default is not None:
            return _value(policy.default)
        return capacity
    if policy is None:
        return requested
    consumed = requested
    if policy.validRange is not None:
        low = _value(policy.validRange.min)
        if requested < low:
            consumed = low
        elif policy.validRange.step is not None:
            step, base = _integer(_value(policy.validRange.step)), _integer(low)
            steps = -(-(_integer(requested) - base) // step)
            consumed = Fraction(base + step * steps)
    elif policy.validValues:
        consumed = next((v for v in map(_value, policy.validValues) if requested <= v), requested)
    if _violates(consumed, policy):
        return None
    return consumed


def _violates(consumed: Fraction, policy: CapacityRequestPolicy) -> bool:
    if policy.default is not None and consumed == _value(policy.default):
        return False
    if policy.validRange is not None:
        top = policy.validRange.max
        if top is not None and consumed > _value(top):
            return True
        if policy.validRange.step is not None:
            step = _integer(_value(policy.validRange.step))
            return (_integer(consumed) - _integer(_value(policy.validRange.min))) % step != 0
        return False
    if policy.validValues:
        return all(consumed != _value(v) for v in policy.validValues)
    return False


def memory_request_mib(need_mib: int, device_mib: int, policy: CapacityRequestPolicy | None) -> int | None:
    """The memory a share of the device requests (and the allocator then consumes), whole MiB, for a
    model needing ``need_mib``: the need rounded up by the device's memory requestPolicy, to an amount
    the policy keeps as it is (the claim sends ``<n>Mi``, so a step finer than a MiB is rounded up
    once more); None when the policy admits no request that large, or it exceeds the device."""
    request = need_mib
    for _ in range(4):
        consumed = consumed_capacity(Fraction(request * MIB), Fraction(device_mib * MIB), policy)
        if consumed is None:
            return None
        rounded = math.ceil(consumed / MIB)
        if rounded == request:
            break
        request = rounded
    else:
        return None
    return request if request <= device_mib else None


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
    # A share of 1..99: the device memory the claim requests, the need rounded up by the device's
    # requestPolicy (what the allocator consumes and the plan books). None for a whole device.
    requestMiB: int | None = None

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
    memory_policy: CapacityRequestPolicy | None = None,
) -> ShareDecision:
    """Apply the share rule to one chosen device; ``memory_policy``: the requestPolicy the device
    publishes for its memory capacity."""
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
    if need_mib > device_mib:
        return ShareDecision(max(low, min(smallest_admitting_percent(need_mib, device_mib), high)), False)
    request = memory_request_mib(need_mib, device_mib, memory_policy)
    if request is None:
        # The model does not fit the device, or its share policy admits no request that large. Whole: a
        # claim with no memory request consumes the policy's default, so only when that is all of it.
        default = memory_policy.default if memory_policy is not None else None
        whole = default is None or Quantity.of(default).value >= device_mib * MIB
        return ShareDecision(WHOLE, fits_whole and whole, "the device's share policy admits no such request")
    raw = smallest_admitting_percent(request, device_mib)
    percent = max(low, min(raw, high))
    if percent >= WHOLE:
        return ShareDecision(percent, admits(percent, request, device_mib))
    return ShareDecision(percent, admits(percent, request, device_mib), requestMiB=request)
