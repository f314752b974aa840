"""The health watch loop: probes on an interval inside one heartbeating activity.

Polling inside one activity keeps the order's history small (no events per probe): the
activity returns only when health changes state or after ``maxDurationSeconds``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from inference_api.payloads import HealthChange, HealthWatchInput, ProbeResult


async def watch_health_loop(
    request: HealthWatchInput,
    probe: Callable[[], Awaitable[ProbeResult]],
    sleep: Callable[[float], Awaitable[None]],
    heartbeat: Callable[[str], None],
    clock: Callable[[], float] = time.monotonic,
) -> HealthChange:
    """Sustained failures (failureThreshold in a row) flip healthy → unhealthy; one success flips back."""
    deadline = clock() + request.maxDurationSeconds
    failures = 0
    last = ""
    while clock() < deadline:
        await sleep(request.intervalSeconds)
        result = await probe()
        last = result.detail
        heartbeat(f"ok={result.ok} failures={failures}")
        if result.ok:
            failures = 0
            if not request.healthy:
                return HealthChange(healthy=True, changed=True, detail=result.detail)
        else:
            failures += 1
            if request.healthy and failures >= request.failureThreshold:
                return HealthChange(healthy=False, changed=True, detail=result.detail)
    return HealthChange(healthy=request.healthy, changed=False, detail=last)
