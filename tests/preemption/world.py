"""A simulated device class for the preemption workflow tests: autoscalers, a scheduler, fake activities.

``DeviceClassSim`` stands in for the cluster: each order has a *load* (the replicas its HPA
would want without bounds); its HPA wants that, clamped to the class's bounds and the ceiling of
its last apply; the scheduler scales down at once and places pending replicas on free capacity,
highest priority first. The order workflow's activities read and write this simulation; the
preemption activities are the real ones (signal-with-start with ``activity.client()``, metrics
into a collector of the test).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from activities.builders.autoscaling import constraints_status
from activities.health import watch_health_loop
from activities.metrics import PreemptionMetricsCollector
from activities.preemption import PreemptionActivities
from activities.scaling import watch_scaling_loop
from inference_api.payloads import (
    ApplyInput,
    ApplyResult,
    HealthChange,
    HealthWatchInput,
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
from inference_api.preemption import HpaCondition, ScalingObservation, ScalingWatchInput, preemption_workflow_id
from inference_api.types import (
    ConditionStatus,
    EndpointStatus,
    ExposureType,
    InferenceService,
    InferenceServiceClass,
    Phase,
)
from tests.workflows.test_order_workflow import make_class, make_order, make_plan
from workflows import activity_names as act
from workflows.order import OrderState, OrderTimings, OrderWorkflow
from workflows.preemption import PreemptionState, PreemptionTimings, PreemptionWorkflow

PRIORITIES = {"inference-low": 100, "inference-normal": 500, "inference-high": 1000}

TIMINGS = OrderTimings(
    healthIntervalSeconds=0.5,
    failureThreshold=2,
    healthWatchMaxSeconds=30,
    retryBaseSeconds=0.5,
    retryMaxSeconds=1,
    scalingIntervalSeconds=0.1,
)
PREEMPTION_TIMINGS = PreemptionTimings(idleSeconds=600, metricsRefreshSeconds=600, activityTimeoutSeconds=3)


def scaling_class(name: str, priority_class: str, low: int = 1, high: int = 4) -> InferenceServiceClass:
    return make_class(
        name, scalingPolicy={"minReplicas": low, "maxReplicas": high, "allowedPriorityClassNames": [priority_class]}
    )


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


@dataclass
class PreemptionWorld:
    device_class: str
    sim: DeviceClassSim
    orders: dict[str, InferenceService] = field(default_factory=dict)
    classes: dict[str, InferenceServiceClass] = field(default_factory=dict)
    statuses: dict[str, list[StatusUpdate]] = field(default_factory=dict)
    applies: dict[str, list[ApplyInput]] = field(default_factory=dict)
    events: list[OrderEvent] = field(default_factory=list)
    share: int = 100

    def last(self, name: str) -> StatusUpdate | None:
        updates = self.statuses.get(f"support/{name}")
        return updates[-1] if updates else None

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
            return None

        @activity.defn(name=act.RESOLVE_MODEL)
        async def resolve_model(order: InferenceService) -> ModelResolution:
            return ModelResolution(servedName=order.spec.model.ref.name, source=order.spec.model.ref.name)

        @activity.defn(name=act.PLAN_LAUNCH)
        async def plan_launch(request: PlanInput) -> PlanOutcome:
            return PlanOutcome(plan=make_plan(device_class=world.device_class, share=world.share))

        @activity.defn(name=act.APPLY_WORKLOAD)
        async def apply_workload(request: ApplyInput) -> ApplyResult:
            world.applies.setdefault(request.ref.key, []).append(request)
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
                endpoint=EndpointStatus(url=f"https://{request.ref.name}.example", type=ExposureType.EXTERNAL),
                constraints=constraints_status(request.cls, None, request.replicaCeiling),
                readyReplicas=max(1, sim.placed),
            )

        @activity.defn(name=act.AWAIT_SERVING)
        async def await_serving(request: ProbeInput) -> ProbeResult:
            return ProbeResult(ok=True, detail="200 /v1/models")

        @activity.defn(name=act.WATCH_HEALTH)
        async def watch_health(request: HealthWatchInput) -> HealthChange:
            async def probe() -> ProbeResult:
                return ProbeResult(ok=True, detail="200")

            return await watch_health_loop(request, probe, asyncio.sleep, activity.heartbeat)

        @activity.defn(name=act.WATCH_SCALING)
        async def watch_scaling(request: ScalingWatchInput) -> ScalingObservation:
            priority = PRIORITIES.get(request.priorityClassName or "", 0)

            async def read() -> ScalingObservation:
                return world.sim.observe(request.ref.key, priority)

            return await watch_scaling_loop(request, read, asyncio.sleep, activity.heartbeat)

        @activity.defn(name=act.PUBLISH_STATUS)
        async def publish_status(update: StatusUpdate) -> None:
            world.statuses.setdefault(update.ref.key, []).append(update)

        @activity.defn(name=act.RECORD_EVENT)
        async def record_event(event: OrderEvent) -> None:
            world.events.append(event)

        @activity.defn(name=act.FINALIZE_ORDER)
        async def finalize_order(ref: OrderRef) -> None:
            world.orders.pop(ref.key, None)
            world.sim.orders.pop(ref.key, None)

        return [
            read_order,
            ensure_finalizer,
            resolve_model,
            plan_launch,
            apply_workload,
            await_serving,
            watch_health,
            watch_scaling,
            publish_status,
            record_event,
            finalize_order,
        ]


@dataclass
class Stand:
    client: Client
    world: PreemptionWorld
    task_queue: str
    metrics: PreemptionMetricsCollector
    handles: dict[str, WorkflowHandle[Any, Any]] = field(default_factory=dict)

    def sim(self, name: str) -> SimOrder:
        return self.world.sim.orders[f"support/{name}"]

    async def start(self, name: str, class_name: str, load: int = 1) -> WorkflowHandle[Any, Any]:
        order = make_order(name, class_name=class_name)
        self.world.orders[f"support/{name}"] = order
        ref = OrderRef(namespace="support", name=name, uid=order.metadata.uid or "")
        handle = await self.client.start_workflow(
            OrderWorkflow.run,
            OrderState(ref=ref, timings=TIMINGS),
            id=order_workflow_id(ref.namespace, ref.name, ref.uid),
            task_queue=self.task_queue,
            start_signal="spec_changed",
            start_signal_args=[1],
        )
        self.handles[name] = handle
        await self.until(lambda: f"support/{name}" in self.world.sim.orders, what=f"{name} applied")
        self.sim(name).load = load
        return handle

    def preemption(self) -> WorkflowHandle[Any, Any]:
        return self.client.get_workflow_handle(preemption_workflow_id(self.task_queue, self.world.device_class))

    async def preemption_state(self) -> PreemptionState:
        return await self.preemption().query(PreemptionWorkflow.query_state)

    async def order_state(self, name: str) -> OrderState:
        return await self.handles[name].query(OrderWorkflow.query_state)

    async def until(self, predicate: Callable[[], bool], timeout: float = 30, what: str = "") -> None:
        async def poll() -> None:
            while not predicate():
                await asyncio.sleep(0.05)

        try:
            await asyncio.wait_for(poll(), timeout)
        except TimeoutError:
            raise AssertionError(f"timed out waiting for {what or predicate}") from None

    async def until_async(self, predicate: Callable[[], Any], timeout: float = 30, what: str = "") -> None:
        async def poll() -> None:
            while not await predicate():
                await asyncio.sleep(0.1)

        try:
            await asyncio.wait_for(poll(), timeout)
        except TimeoutError:
            raise AssertionError(f"timed out waiting for {what or predicate}") from None

    def phase_is(self, name: str, phase: Phase, reason: str | None = "any") -> Callable[[], bool]:
        def check() -> bool:
            got, why = self.world.phase(name)
            return got == phase and (reason == "any" or why == reason)

        return check


def new_world(capacity: int) -> PreemptionWorld:
    world = PreemptionWorld(device_class=f"dc-{uuid.uuid4().hex[:8]}", sim=DeviceClassSim(capacity=capacity))
    world.classes["low-class"] = scaling_class("low-class", "inference-low")
    world.classes["high-class"] = scaling_class("high-class", "inference-high")
    world.classes["normal-class"] = scaling_class("normal-class", "inference-normal")
    return world


@asynccontextmanager
async def running_worker(
    client: Client,
    task_queue: str,
    world: PreemptionWorld,
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
        yield worker
    finally:
        try:
            await asyncio.wait_for(worker.shutdown(), 60)
            await asyncio.wait_for(running, 10)
        except TimeoutError:
            import sys

            for task in asyncio.all_tasks():
                print("TASK", task.get_name(), file=sys.stderr)
                task.print_stack(file=sys.stderr, limit=15)
            raise AssertionError("the worker did not shut down in 60 s") from None
