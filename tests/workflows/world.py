"""The fake activity world of the workflow tests (tests/workflows, tests/preemption, the benchmark).

``World`` holds what the order workflow's activities read (orders, classes, the plan the planner
gives, whether the endpoint answers) and records what they write (statuses, applies, events,
finalizers), every order's in one list, in order. Its activities are fakes over that state: the
workflows' decisions are under test here; the real activities run end to end in tests/e2e.

The observer (the watch process) is played by ``FakeObserver``: it looks at the world every tenth
of a second and signals what the real one would — a health flip after ``failureThreshold`` failed
looks, one success after; a new HPA observation of an autoscaled order. A deletion is the world's
``delete_order`` (the order gets its deletionTimestamp) followed by the observer's ``delete`` signal.

With a simulated device class (``sim``, a ``DeviceClassSim``) the world also stands in for the
autoscalers and the scheduler: each order has a *load* (the replicas its HPA would want without
bounds); its HPA wants that, clamped to the class's bounds and the ceiling of its last apply; the
scheduler scales down at once and places pending replicas on free capacity, highest priority first.
The preemption activities stay the real ones (signal-with-start with ``activity.client()``, metrics
into a collector of the test).

Drivers:
  Harness  one order at a time on the order workflow alone (fixture ``harness``, tests/workflows/conftest.py)
  Stand    orders of a simulated device class with the preemption workflow (fixture ``stand``,
           tests/preemption/conftest.py; ``open_stand`` for tests that run their own worker)
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, overload

from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from activities.builders.autoscaling import constraints_status
from activities.metrics import PreemptionMetricsCollector
from activities.preemption import PreemptionActivities
from inference_api.observation import HealthReport, OrderSignal
from inference_api.payloads import (
    ApplyInput,
    ApplyResult,
    ModelResolution,
    OrderEvent,
    OrderRef,
    OrderSnapshot,
    PlanInput,
    ProbeInput,
    ProbeResult,
    StatusUpdate,
    order_workflow_id,
)
from inference_api.plan import PlanOutcome
from inference_api.preemption import HpaCondition, ScalingObservation, preemption_workflow_id
from inference_api.types import (
    ConditionStatus,
    ConstraintsStatus,
    EndpointStatus,
    ExposureType,
    InferenceService,
    InferenceServiceClass,
    Phase,
)
from tests.factories import make_class, make_order, make_plan
from tests.polling import until
from workflows import activity_names as act
from workflows.order import OrderState, OrderTimings, OrderWorkflow
from workflows.preemption import PreemptionState, PreemptionTimings, PreemptionWorkflow

# The order workflow alone: quick probes, a quick give-up, quick retries.
FAST = OrderTimings(healthIntervalSeconds=0.2, failureThreshold=2, retryBaseSeconds=0.5, retryMaxSeconds=1)
# Orders of a simulated device class.
TIMINGS = OrderTimings(healthIntervalSeconds=0.5, failureThreshold=2, retryBaseSeconds=0.5, retryMaxSeconds=1)
PREEMPTION_TIMINGS = PreemptionTimings(idleSeconds=600, metricsRefreshSeconds=600, activityTimeoutSeconds=3)

PRIORITIES = {"inference-low": 100, "inference-normal": 500, "inference-high": 1000}


def scaling_class(name: str, priority_class: str, low: int = 1, high: int = 4) -> InferenceServiceClass:
    return make_class(
        name, scalingPolicy={"minReplicas": low, "maxReplicas": high, "allowedPriorityClassNames": [priority_class]}
    )


# ------------------------------------------------------------------------ simulated device class


@dataclass
class SimOrder:
    key: str
    low: int
    high: int
    unit: int
    priority: int = 0
    load: int = 1
    ceiling: int | None = None
    placed: int = 0
    applied: bool = False

    @property
    def bound(self) -> int:
        return self.high if self.ceiling is None else max(1, min(self.high, self.ceiling))

    @property
    def desired(self) -> int:
        return max(min(self.low, self.bound), min(self.load, self.bound))


@dataclass
class DeviceClassSim:
    capacity: int

    orders: dict[str, SimOrder] = field(default_factory=dict)

    def settle(self) -> None:
        """The HPAs and the scheduler act: scale down at once, place what fits, highest priority first."""
        for order in self.orders.values():
            if order.applied:
                order.placed = min(order.placed, order.desired)
        free = self.capacity - sum(o.placed * o.unit for o in self.orders.values())
        for order in sorted(self.orders.values(), key=lambda o: (-o.priority, o.key)):
            while order.applied and order.placed < order.desired and free >= order.unit:
                order.placed += 1
                free -= order.unit

    def observe(self, key: str, priority: int) -> ScalingObservation:
        self.settle()
        order = self.orders[key]
        order.priority = priority
        self.settle()
        limited = order.load > order.bound
        return ScalingObservation(
            desiredReplicas=order.desired,
            currentReplicas=order.desired,
            minReplicas=min(order.low, order.bound),
            maxReplicas=order.bound,
            placedReplicas=order.placed,
            unschedulableReplicas=order.desired - order.placed,
            conditions=[
                HpaCondition(type="AbleToScale", status="True", reason="ReadyForNewScale"),
                HpaCondition(type="ScalingActive", status="True", reason="ValidMetricFound"),
                HpaCondition(
                    type="ScalingLimited",
                    status="True" if limited else "False",
                    reason="TooManyReplicas" if limited else "DesiredWithinRange",
                ),
            ],
            priority=priority,
        )


# ------------------------------------------------------------------------------------ the world


def _key(name: str) -> str:
    return f"support/{name}"


@dataclass
class World:
    orders: dict[str, InferenceService] = field(default_factory=dict)
    classes: dict[str, InferenceServiceClass] = field(default_factory=dict)
    # What planning answers; None: a plan of device_class at share percent.
    plan: Callable[[PlanInput], PlanOutcome] | None = None
    device_class: str = "nvidia-hopper-s3-shared"
    share: int = 30
    healthy: bool = True
    sim: DeviceClassSim | None = None
    statuses: list[StatusUpdate] = field(default_factory=list)
    applies: list[ApplyInput] = field(default_factory=list)
    finalizers: set[str] = field(default_factory=set)
    events: list[OrderEvent] = field(default_factory=list)
    # The workflows the fake observer watches, by order key, with the timings they were started with.
    handles: dict[str, WorkflowHandle[Any, Any]] = field(default_factory=dict)
    timings: dict[str, OrderTimings] = field(default_factory=dict)
    # "hang": no replica ever loads — the apply finds none ready and no ``replica_ready`` comes (a run
    # recorded before the first load moved out of the worker waits in await_serving until cancelled).
    first_probe: str | None = None
    # Orders (by key) whose replicas are not ready yet: the apply finds none ready; a test tells the
    # workflow ``replica_ready`` when it lets one load (``let_load``).
    loading: set[str] = field(default_factory=set)
    # The waitSeconds each await_serving (runs recorded before the patch) was asked for.
    serve_waits: list[float | None] = field(default_factory=list)
    # The waitSeconds each probe_serving was asked for (the short probe once a replica is ready).
    probe_waits: list[float | None] = field(default_factory=list)
    # Stands in for the apply step when set (an API server that refuses, say).
    apply_override: Callable[[ApplyInput], Awaitable[ApplyResult]] | None = None
    # When set, a status write after the first apply is held until the gate opens (``publish_held``
    # tells it is held): a test decides what else happens while that step runs.
    publish_gate: asyncio.Event | None = None
    publish_held: asyncio.Event = field(default_factory=asyncio.Event)
    # When set, probe_serving waits until the gate opens (``probe_held`` tells it waits): a test
    # decides what the observer says while the order probes.
    probe_gate: asyncio.Event | None = None
    probe_held: asyncio.Event = field(default_factory=asyncio.Event)

    def delete_order(self, name: str) -> None:
        """What `kubectl delete` does to an order with a finalizer: it gets a deletionTimestamp."""
        order = self.orders[_key(name)]
        order.metadata.deletionTimestamp = "2026-11-30T12:00:00Z"

    async def let_load(self, name: str) -> None:
        """A replica of the order gets ready: what the observer then tells its workflow."""
        self.loading.discard(_key(name))
        await self.handles[_key(name)].signal(OrderSignal.REPLICA_READY, 1)

    def ready_replicas(self, key: str) -> int:
        return 0 if self.first_probe == "hang" or key in self.loading else 1

    @overload
    def last(self) -> StatusUpdate: ...
    @overload
    def last(self, name: str) -> StatusUpdate | None: ...
    def last(self, name: str | None = None) -> StatusUpdate | None:
        """The latest status written (of any order), or the latest of order ``name`` (None: none yet)."""
        if name is None:
            return self.statuses[-1]
        return next((s for s in reversed(self.statuses) if s.ref.key == _key(name)), None)

    def applies_of(self, name: str) -> list[ApplyInput]:
        return [a for a in self.applies if a.ref.key == _key(name)]

    def phase(self, name: str) -> tuple[Phase | None, str | None]:
        last = self.last(name)
        return (last.phase, last.reason) if last else (None, None)

    def condition(self, name: str, type_: str) -> tuple[ConditionStatus, str] | None:
        last = self.last(name)
        found = next((c for c in last.conditions if c.type == type_), None) if last else None
        return (found.status, found.reason) if found else None

    def activities(self) -> list[Callable[..., Any]]:
        world = self

        @activity.defn(name=act.READ_ORDER)
        async def read_order(ref: OrderRef) -> OrderSnapshot:
            order = world.orders.get(ref.key)
            cls = world.classes.get(order.spec.inferenceServiceClassName) if order else None
            return OrderSnapshot(order=order, cls=cls)

        @activity.defn(name=act.ENSURE_FINALIZER)
        async def ensure_finalizer(ref: OrderRef) -> None:
            world.finalizers.add(ref.key)

        @activity.defn(name=act.RESOLVE_MODEL)
        async def resolve_model(order: InferenceService) -> ModelResolution:
            return ModelResolution(servedName=order.spec.model.ref.name, source=order.spec.model.ref.name)

        @activity.defn(name=act.PLAN_LAUNCH)
        async def plan_launch(request: PlanInput) -> PlanOutcome:
            if world.plan is not None:
                return world.plan(request)
            return PlanOutcome(plan=make_plan(device_class=world.device_class, share=world.share))

        @activity.defn(name=act.APPLY_WORKLOAD)
        async def apply_workload(request: ApplyInput) -> ApplyResult:
            if world.apply_override is not None:
                return await world.apply_override(request)
            world.applies.append(request)
            endpoint = EndpointStatus(url=f"https://{request.ref.name}.example", type=ExposureType.EXTERNAL)
            if world.sim is None:
                # No simulated device class: one replica of a class bounded at one to two.
                return ApplyResult(
                    endpoint=endpoint,
                    authSecretName=f"{request.ref.name}-auth",
                    constraints=ConstraintsStatus(minReplicas=1, maxReplicas=2),
                    readyReplicas=world.ready_replicas(request.ref.key),
                )
            policy = request.cls.spec.scalingPolicy
            assert policy is not None
            sim = world.sim.orders.setdefault(
                request.ref.key,
                SimOrder(key=request.ref.key, low=policy.minReplicas, high=policy.maxReplicas, unit=world.share),
            )
            sim.ceiling = request.replicaCeiling
            sim.applied = True
            world.sim.settle()
            return ApplyResult(
                endpoint=endpoint,
                constraints=constraints_status(request.cls, None, request.replicaCeiling),
                readyReplicas=max(1, sim.placed) if world.ready_replicas(request.ref.key) else 0,
            )

        @activity.defn(name=act.AWAIT_SERVING)
        async def await_serving(request: ProbeInput) -> ProbeResult:
            world.serve_waits.append(request.waitSeconds)
            while not world.ready_replicas(request.ref.key):
                # a replica that does not load: only a cancellation (or the load) ends the wait
                activity.heartbeat("no replica is ready yet")
                await asyncio.sleep(0.1)
            return ProbeResult(
                ok=world.healthy, workloadReady=True, detail="200 /v1/models" if world.healthy else "503"
            )

        @activity.defn(name=act.PROBE_SERVING)
        async def probe_serving(request: ProbeInput) -> ProbeResult:
            world.probe_waits.append(request.waitSeconds)
            if world.probe_gate is not None:
                world.probe_held.set()
                await world.probe_gate.wait()
            return ProbeResult(ok=world.healthy, detail="200 /v1/models" if world.healthy else "503")

        @activity.defn(name=act.PUBLISH_STATUS)
        async def publish_status(update: StatusUpdate) -> None:
            if world.publish_gate is not None and world.applies:
                world.publish_held.set()
                await world.publish_gate.wait()
            world.statuses.append(update)

        @activity.defn(name=act.RECORD_EVENT)
        async def record_event(event: OrderEvent) -> None:
            world.events.append(event)

        @activity.defn(name=act.FINALIZE_ORDER)
        async def finalize_order(ref: OrderRef) -> None:
            world.finalizers.discard(ref.key)
            world.orders.pop(ref.key, None)
            if world.sim is not None:
                world.sim.orders.pop(ref.key, None)

        return [
            read_order,
            ensure_finalizer,
            resolve_model,
            plan_launch,
            apply_workload,
            await_serving,
            probe_serving,
            publish_status,
            record_event,
            finalize_order,
        ]


def new_world(capacity: int) -> World:
    """A world with a simulated device class of ``capacity`` share percent (400: four whole devices),
    whole-device plans and a low, a normal and a high priority class."""
    world = World(device_class=f"dc-{uuid.uuid4().hex[:8]}", share=100, sim=DeviceClassSim(capacity=capacity))
    world.classes["low-class"] = scaling_class("low-class", "inference-low")
    world.classes["high-class"] = scaling_class("high-class", "inference-high")
    world.classes["normal-class"] = scaling_class("normal-class", "inference-normal")
    return world


async def start_order(
    client: Client,
    task_queue: str,
    world: World,
    order: InferenceService,
    timings: OrderTimings,
    *,
    start_signal: str = "spec_changed",
    start_signal_args: list[Any] | None = None,
) -> WorkflowHandle[Any, Any]:
    """The order in the world and its workflow started as the observer starts it (signal-with-start)."""
    key = _key(order.metadata.name)
    world.orders[key] = order
    ref = OrderRef(namespace="support", name=order.metadata.name, uid=order.metadata.uid or "")
    handle = await client.start_workflow(
        OrderWorkflow.run,
        OrderState(ref=ref, timings=timings),
        id=order_workflow_id(ref.namespace, ref.name, ref.uid),
        task_queue=task_queue,
        start_signal=start_signal,
        start_signal_args=[order.metadata.generation or 1] if start_signal_args is None else start_signal_args,
    )
    world.handles[key] = handle
    world.timings[key] = timings
    return handle


class FakeObserver:
    """What the observer signals, read off the world: health flips and HPA observations."""

    def __init__(self, world: World, interval: float = 0.1) -> None:
        self.world = world
        self.interval = interval
        self.failures: dict[str, int] = {}
        self.told_healthy: dict[str, bool] = {}
        self.told_scaling: dict[str, tuple[object, ...]] = {}

    async def run(self) -> None:
        while True:
            for key, handle in list(self.world.handles.items()):
                try:
                    await self._look(key, handle)
                except Exception:  # a workflow that ended takes no signals: the next look skips it
                    self.world.handles.pop(key, None)
            await asyncio.sleep(self.interval)

    async def _look(self, key: str, handle: WorkflowHandle[Any, Any]) -> None:
        world = self.world
        last = world.last(key.split("/", 1)[1])
        serving = last is not None and last.phase in (Phase.READY, Phase.DEGRADED, Phase.FAILED)
        if serving:
            await self._health(key, handle)
        sim = world.sim
        order = world.orders.get(key)
        if sim is not None and order is not None and key in sim.orders and sim.orders[key].applied:
            cls = world.classes.get(order.spec.inferenceServiceClassName)
            names = cls.spec.scalingPolicy.allowedPriorityClassNames if cls and cls.spec.scalingPolicy else []
            observation = sim.observe(key, PRIORITIES.get(names[0] if names else "", 0))
            if self.told_scaling.get(key) != observation.signature():
                self.told_scaling[key] = observation.signature()
                await handle.signal(OrderSignal.SCALING_CHANGED, observation)

    async def _health(self, key: str, handle: WorkflowHandle[Any, Any]) -> None:
        healthy = self.world.healthy
        told = self.told_healthy.get(key, True)
        if healthy:
            self.failures[key] = 0
            if not told:
                self.told_healthy[key] = True
                await handle.signal(OrderSignal.HEALTH_CHANGED, HealthReport(healthy=True, detail="200"))
            return
        self.failures[key] = self.failures.get(key, 0) + 1
        threshold = self.world.timings[key].failureThreshold
        if told and self.failures[key] >= threshold:
            self.told_healthy[key] = False
            report = HealthReport(healthy=False, detail="503", failures=self.failures[key])
            await handle.signal(OrderSignal.HEALTH_CHANGED, report)


@asynccontextmanager
async def observing(world: World) -> AsyncIterator[FakeObserver]:
    observer = FakeObserver(world)
    task = asyncio.create_task(observer.run())
    try:
        yield observer
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# ---------------------------------------------------------------------------------------- drivers


@dataclass
class Harness:
    """One order at a time on the order workflow alone."""

    client: Client
    world: World
    task_queue: str

    async def start(self, order: InferenceService, timings: OrderTimings = FAST) -> WorkflowHandle[Any, Any]:
        return await start_order(self.client, self.task_queue, self.world, order, timings)

    async def until(
        self, predicate: Callable[[], object] | Callable[[], Awaitable[object]], timeout: float = 20, what: str = ""
    ) -> None:
        await until(predicate, timeout=timeout, what=what)

    def phase_is(self, phase: Phase, reason: str | None = "any") -> Callable[[], bool]:
        def check() -> bool:
            if not self.world.statuses:
                return False
            last = self.world.last()
            return last.phase == phase and (reason == "any" or last.reason == reason)

        return check


def _replaying_order_workflows(task_queue: str) -> dict[str, Any]:
    """Worker options for the order workflow replayed from the start at every task (no cache), so
    nondeterminism fails the test."""
    return {
        "task_queue": task_queue,
        "workflows": [OrderWorkflow],
        "max_cached_workflows": 0,
        "workflow_failure_exception_types": [workflow.NondeterminismError],
    }


@asynccontextmanager
async def open_harness(client: Client) -> AsyncIterator[Harness]:
    """A worker of the order workflow over a new world (with the bundled default-llm class); every
    workflow task replays the history from the start (no cache), so nondeterminism fails the test."""
    world = World()
    task_queue = f"orders-{uuid.uuid4()}"
    async with Worker(client, activities=world.activities(), **_replaying_order_workflows(task_queue)):
        world.classes["default-llm"] = make_class()
        async with observing(world):
            yield Harness(client, world, task_queue)


async def delete_as_a_step_finishes(client: Client, world: World, name: str) -> WorkflowHandle[Any, Any]:
    """An order deleted as the step its reconcile waits on (the status write after the apply) finishes:
    both reach the workflow in one task, because no workflow worker polls while they happen. Then a
    workflow worker polls again for up to 30 s, until the workflow ends; its handle is returned (its
    workers are stopped by then, ended or not)."""
    world.publish_gate = asyncio.Event()
    world.classes.setdefault("default-llm", make_class())
    queue = f"orders-{uuid.uuid4()}"
    workflow_worker = _replaying_order_workflows(queue)
    async with Worker(client, task_queue=queue, activities=world.activities()):
        async with Worker(client, **workflow_worker):
            handle = await start_order(client, queue, world, make_order(name), FAST)
            await asyncio.wait_for(world.publish_held.wait(), 20)
        world.delete_order(name)
        await handle.signal(OrderWorkflow.delete)
        world.publish_gate.set()

        async def step_finished() -> bool:
            return not (await handle.describe()).raw_description.pending_activities

        await until(step_finished, what="the status write completed")
        async with Worker(client, **workflow_worker):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(handle.result()), 30)
    return handle


@dataclass
class Stand:
    """Orders of a simulated device class, with the preemption workflow."""

    client: Client
    world: World
    task_queue: str
    metrics: PreemptionMetricsCollector
    handles: dict[str, WorkflowHandle[Any, Any]] = field(default_factory=dict)

    def sim(self, name: str) -> SimOrder:
        return self._sim_orders()[_key(name)]

    def _sim_orders(self) -> dict[str, SimOrder]:
        assert self.world.sim is not None, "a Stand's world simulates a device class (new_world)"
        return self.world.sim.orders

    async def start(self, name: str, class_name: str, load: int = 1) -> WorkflowHandle[Any, Any]:
        order = make_order(name, class_name=class_name)
        handle = await start_order(self.client, self.task_queue, self.world, order, TIMINGS, start_signal_args=[1])
        self.handles[name] = handle
        await self.until(lambda: _key(name) in self._sim_orders(), what=f"{name} applied")
        self.sim(name).load = load
        return handle

    def preemption(self) -> WorkflowHandle[Any, Any]:
        return self.client.get_workflow_handle(preemption_workflow_id(self.task_queue, self.world.device_class))

    async def preemption_state(self) -> PreemptionState:
        return await self.preemption().query(PreemptionWorkflow.query_state)

    async def order_state(self, name: str) -> OrderState:
        return await self.handles[name].query(OrderWorkflow.query_state)

    async def until(
        self, predicate: Callable[[], object] | Callable[[], Awaitable[object]], timeout: float = 30, what: str = ""
    ) -> None:
        await until(predicate, timeout=timeout, what=what)

    def phase_is(self, name: str, phase: Phase, reason: str | None = "any") -> Callable[[], bool]:
        def check() -> bool:
            got, why = self.world.phase(name)
            return got == phase and (reason == "any" or why == reason)

        return check


@asynccontextmanager
async def running_worker(
    client: Client,
    task_queue: str,
    world: World,
    metrics: PreemptionMetricsCollector,
    extra: list[Callable[..., Any]] | None = None,
) -> AsyncIterator[Worker]:
    """A worker like the module's: both workflows, the world's activities and the real preemption ones
    (``extra`` replaces activities of the same name)."""
    preemption = PreemptionActivities(metrics=metrics, timings=PREEMPTION_TIMINGS)
    replaced = {getattr(fn, "__temporal_activity_definition").name for fn in extra or []}
    activities = [
        fn
        for fn in [*world.activities(), *preemption.all()]
        if getattr(fn, "__temporal_activity_definition").name not in replaced
    ]
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[OrderWorkflow, PreemptionWorkflow],
        activities=[*activities, *(extra or [])],
        max_cached_workflows=0,
        workflow_failure_exception_types=[workflow.NondeterminismError],
    )
    running = asyncio.create_task(worker.run())
    try:
        async with observing(world):
            yield worker
    finally:
        try:
            await asyncio.wait_for(worker.shutdown(), 60)
            await asyncio.wait_for(running, 10)
        except TimeoutError:
            for task in asyncio.all_tasks():
                print("TASK", task.get_name(), file=sys.stderr)
                task.print_stack(file=sys.stderr, limit=15)
            raise AssertionError("the worker did not shut down in 60 s") from None


@asynccontextmanager
async def open_stand(client: Client, capacity: int = 400, prefix: str = "preemption") -> AsyncIterator[Stand]:
    """A stand over ``new_world(capacity)`` with its worker running on a task queue of its own."""
    world = new_world(capacity=capacity)
    metrics = PreemptionMetricsCollector()
    task_queue = f"{prefix}-{uuid.uuid4().hex[:8]}"
    async with running_worker(client, task_queue, world, metrics):
        yield Stand(client, world, task_queue, metrics)


async def runs_of(client: Client, workflow_id: str, run_id: str | None = None) -> list[list[HistoryEvent]]:
    """The events of run ``run_id`` (None: the workflow's first) and of every run it continued as new
    into, one list a run."""
    if run_id is None:
        run_id = (
            await client.get_workflow_handle(workflow_id).describe()
        ).raw_description.workflow_execution_info.first_run_id
    runs: list[list[HistoryEvent]] = []
    following: str | None = run_id
    while following:
        events = [e async for e in client.get_workflow_handle(workflow_id, run_id=following).fetch_history_events()]
        runs.append(events)
        following = None
        if events and events[-1].event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            following = events[-1].workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    return runs
