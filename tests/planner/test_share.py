"""The share rule of phase 2.4, table-driven and as properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inference_api.types import PlacementType, SharingMode
from planner.share import admits, assign_share, smallest_admitting_percent

SHARED, DEDICATED = SharingMode.SHARED, SharingMode.DEDICATED
WHOLE, PART = PlacementType.WHOLE_DEVICE, PlacementType.PARTITION
GIB = 1024


@pytest.mark.parametrize(
    ("need", "device", "mode", "placement", "shareable", "low", "high", "percent", "fits"),
    [
        # The smallest whole percent that admits the need.
        (40 * GIB, 80 * GIB, SHARED, WHOLE, True, None, None, 50, True),
        (24 * GIB, 80 * GIB, SHARED, WHOLE, True, None, None, 30, True),
        (24 * GIB + 1, 80 * GIB, SHARED, WHOLE, True, None, None, 31, True),
        (1, 80 * GIB, SHARED, WHOLE, True, None, None, 1, True),
        (0, 80 * GIB, SHARED, WHOLE, True, None, None, 1, True),
        (80 * GIB, 80 * GIB, SHARED, WHOLE, True, None, None, 100, True),
        # Clamped into [minSharePercent, maxSharePercent].
        (8 * GIB, 80 * GIB, SHARED, WHOLE, True, 25, 100, 25, True),
        (60 * GIB, 80 * GIB, SHARED, WHOLE, True, 25, 50, 50, False),
        (40 * GIB, 80 * GIB, SHARED, WHOLE, True, 50, 50, 50, True),
        # Too small even whole.
        (81 * GIB, 80 * GIB, SHARED, WHOLE, True, None, None, 100, False),
        # Whole device: the class permits no sharing.
        (8 * GIB, 80 * GIB, DEDICATED, WHOLE, True, None, None, 100, True),
        (81 * GIB, 80 * GIB, DEDICATED, WHOLE, True, None, None, 100, False),
        # Whole device: a partition is not a whole device in a sharing mode.
        (8 * GIB, 40 * GIB, SHARED, PART, True, None, None, 100, True),
        # Whole device: a memory figure is unknown.
        (None, 80 * GIB, SHARED, WHOLE, True, None, None, 100, True),
        (8 * GIB, None, SHARED, WHOLE, True, None, None, 100, True),
        # Whole device: no allowMultipleAllocations, no share below 100.
        (8 * GIB, 80 * GIB, SHARED, WHOLE, False, None, None, 100, True),
    ],
)
def test_share_table(
    need: int | None,
    device: int | None,
    mode: SharingMode,
    placement: PlacementType,
    shareable: bool,
    low: int | None,
    high: int | None,
    percent: int,
    fits: bool,
) -> None:
    decision = assign_share(
        need_mib=need,
        device_mib=device,
        sharing_mode=mode,
        placement=placement,
        allow_multiple_allocations=shareable,
        min_share_percent=low,
        max_share_percent=high,
    )
    assert decision.percent == percent
    assert decision.admitsNeed is fits
    assert decision.memory_request_needed is (percent < 100)


@pytest.mark.parametrize(
    ("mode", "placement", "need", "device", "shareable", "why"),
    [
        (DEDICATED, WHOLE, 1, 10, True, "Dedicated"),
        (SHARED, PART, 1, 10, True, "partition"),
        (SHARED, WHOLE, None, 10, True, "unknown"),
        (SHARED, WHOLE, 1, 10, False, "allowMultipleAllocations"),
    ],
)
def test_whole_device_says_why(
    mode: SharingMode, placement: PlacementType, need: int | None, device: int, shareable: bool, why: str
) -> None:
    decision = assign_share(
        need_mib=need, device_mib=device, sharing_mode=mode, placement=placement, allow_multiple_allocations=shareable
    )
    assert decision.percent == 100
    assert decision.wholeBecause is not None
    assert why in decision.wholeBecause


def test_smallest_admitting_percent_rejects_an_empty_device() -> None:
    with pytest.raises(ValueError, match="device memory must be positive"):
        smallest_admitting_percent(1, 0)


memory = st.integers(min_value=1, max_value=200 * GIB)
bounds = st.tuples(st.integers(1, 100), st.integers(1, 100)).map(sorted)


@given(need=st.integers(0, 200 * GIB), device=memory, bound=bounds)
def test_share_properties(need: int, device: int, bound: list[int]) -> None:
    low, high = bound
    decision = assign_share(
        need_mib=need,
        device_mib=device,
        sharing_mode=SHARED,
        placement=WHOLE,
        allow_multiple_allocations=True,
        min_share_percent=low,
        max_share_percent=high,
    )
    p = decision.percent
    # Within the class's bounds.
    assert low <= p <= high
    # Admits the need whenever it says so, and says so exactly when it does.
    assert decision.admitsNeed == admits(p, need, device)
    # Minimal: one percent less no longer admits the need, unless the lower bound put it there.
    if decision.admitsNeed and p > low:
        assert not admits(p - 1, need, device)
    # When the need fits within the upper bound, the share admits it.
    if smallest_admitting_percent(need, device) <= high:
        assert decision.admitsNeed


@given(need=st.integers(0, 200 * GIB), device=memory)
def test_unbounded_share_is_the_smallest_admitting_percent(need: int, device: int) -> None:
    decision = assign_share(
        need_mib=need, device_mib=device, sharing_mode=SHARED, placement=WHOLE, allow_multiple_allocations=True
    )
    raw = smallest_admitting_percent(need, device)
    assert decision.percent == min(raw, 100)
    assert decision.admitsNeed == (raw <= 100)


@given(need=st.integers(0, 200 * GIB), device=memory, shareable=st.booleans(), placement=st.sampled_from([WHOLE, PART]))
def test_dedicated_is_always_whole(need: int, device: int, shareable: bool, placement: PlacementType) -> None:
    decision = assign_share(
        need_mib=need,
        device_mib=device,
        sharing_mode=DEDICATED,
        placement=placement,
        allow_multiple_allocations=shareable,
    )
    assert decision.percent == 100
    assert decision.admitsNeed == (need <= device)
