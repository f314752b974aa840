"""A ``health_changed`` signal is a hint (``health-signal-is-a-hint``): anyone who reaches Temporal can
send one, so the workflow probes the order's own endpoint once and Ready follows the probe, never the
report. A forged report changes nothing; the observer's real flips still flip; a flood of reports costs
one probe a window (failureThreshold x probeTimeoutSeconds) at most.
"""

from __future__ import annotations

import asyncio
import time

from inference_api.observation import HealthReport, OrderSignal
from inference_api.types import Phase
from tests.factories import make_order
from tests.workflows.world import FAST, Harness

# A one-second probe window (2 x 0.5 s): confirming probes are spaced by it.
TIMINGS = FAST.model_copy(update={"probeTimeoutSeconds": 0.5})
WINDOW = TIMINGS.failureThreshold * TIMINGS.probeTimeoutSeconds


def phases_since(harness: Harness, name: str, mark: int) -> list[Phase]:
    return [s.phase for s in harness.world.statuses[mark:] if s.ref.name == name]


async def test_a_forged_unhealthy_report_leaves_a_healthy_order_ready(harness: Harness) -> None:
    handle = await harness.start(make_order("forged-down"), TIMINGS)
    await harness.until(harness.phase_is(Phase.READY))
    probes, mark = len(harness.world.probe_waits), len(harness.world.statuses)

    # `temporal workflow signal --name health_changed --input '{"healthy": false}'` on an API that answers.
    await handle.signal(OrderSignal.HEALTH_CHANGED, HealthReport(healthy=False, detail="forged", failures=3))
    await harness.until(
        lambda: len(harness.world.probe_waits) > probes or Phase.FAILED in phases_since(harness, "forged-down", mark),
        what="the report confirmed (or believed)",
    )
    await asyncio.sleep(0.5)  # what the workflow would write after its probe
    assert Phase.FAILED not in phases_since(harness, "forged-down", mark)
    assert harness.world.phase("forged-down")[0] == Phase.READY
    # One probe of the order's own endpoint, sized by the health settings.
    assert harness.world.probe_waits[probes:] == [WINDOW]


async def test_a_forged_healthy_report_leaves_a_failing_order_failed(harness: Harness) -> None:
    handle = await harness.start(make_order("forged-up"), TIMINGS)
    await harness.until(harness.phase_is(Phase.READY))
    harness.world.healthy = False  # the observer flips it, the workflow's probe confirms
    await harness.until(harness.phase_is(Phase.FAILED))
    probes, mark = len(harness.world.probe_waits), len(harness.world.statuses)

    await handle.signal(OrderSignal.HEALTH_CHANGED, HealthReport(healthy=True, detail="forged"))
    await harness.until(
        lambda: len(harness.world.probe_waits) > probes or Phase.READY in phases_since(harness, "forged-up", mark),
        what="the report confirmed (or believed)",
    )
    await asyncio.sleep(0.5)
    assert Phase.READY not in phases_since(harness, "forged-up", mark)
    assert harness.world.phase("forged-up")[0] == Phase.FAILED


async def test_the_observers_real_flips_still_flip(harness: Harness) -> None:
    await harness.start(make_order("flaps"), TIMINGS)
    await harness.until(harness.phase_is(Phase.READY))
    probes = len(harness.world.probe_waits)
    harness.world.healthy = False
    await harness.until(harness.phase_is(Phase.FAILED))
    harness.world.healthy = True
    await harness.until(harness.phase_is(Phase.READY))
    # Each flip confirmed by one probe.
    assert harness.world.probe_waits[probes:] == [WINDOW, WINDOW]


async def test_a_flood_of_reports_costs_one_probe_a_window(harness: Harness) -> None:
    handle = await harness.start(make_order("flood"), TIMINGS)
    await harness.until(harness.phase_is(Phase.READY))
    probes = len(harness.world.probe_waits)
    began = time.monotonic()
    for i in range(40):
        await handle.signal(OrderSignal.HEALTH_CHANGED, HealthReport(healthy=i % 2 == 1, detail="forged"))
        await asyncio.sleep(0.05)
    await asyncio.sleep(WINDOW + 0.5)  # the last coalesced report is confirmed
    elapsed = time.monotonic() - began
    made = len(harness.world.probe_waits) - probes
    assert 1 <= made <= elapsed / WINDOW + 1, (made, elapsed)
    assert harness.world.phase("flood")[0] == Phase.READY
