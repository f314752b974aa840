"""The order workflow: one per InferenceService, validate → resolve-model → plan → apply → probe → health-watch.

Deterministic: every read and write is an activity, every decision a pure function. All state
lives in one :class:`OrderState`, which continue-as-new carries.

An autoscaled order also watches its HPA while it serves (``watch_scaling``): ScalingHealthy
mirrors the HPA, and every change is reported to the preemption workflow of the order's device
class (``workflows/preemption.py``), which answers with two signals: ``set_replica_ceiling``
(a donor's lowered maxReplicas, re-applied at once and kept in the state) and
``scaling_blocked`` (ScalingHealthy=False/ScaleUpBlocked, phase Degraded while it serves).
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel, ConfigDict, Field

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
    )
    from inference_api.plan import LaunchPlan, PlanOutcome
    from inference_api.preemption import MemberReport, ScalingObservation, ScalingWatchInput
    from inference_api.reasons import CAPACITY_REFUSALS, EventReason, Reason
    from inference_api.types import (
        Condition,
        ConditionStatus,
        ConditionType,
        EndpointType,
        InferenceService,
        InferenceServiceClass,
        Phase,
    )
    from planner.scaling import autoscaled, class_bounds, priority_class_name, scaling_health
    from workflows import activity_names as act
    from workflows.search_attributes import order_search_attributes
    from workflows.status import READINESS_ORDER, compute_phase, get_condition, is_true, set_condition
    from workflows.validation import (
        Refusal,
        check_catalog_enabled,
        check_class,
        check_model_policy,
        pick_endpoint_type,
    )


class OrderTimings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    healthIntervalSeconds: float = 600
    failureThreshold: int = 3
    # One health-watch activity runs this long before it returns to the workflow: few history events.
    healthWatchMaxSeconds: float = 6 * 3600
    probeTimeoutSeconds: float = 5
    # How long the first probe waits for the workload to load the model.
    serveWaitSeconds: float = 1800
    retryBaseSeconds: float = 15
    retryMaxSeconds: float = 600
    catalogEnabled: bool = True
    # History length past which the run continues as new (the server also suggests it).
    maxHistoryEvents: int = 2000
    # How often the scaling watch reads the HPA and the replicas (inside one activity: no history).
    scalingIntervalSeconds: float = 15


class ScalingProfile(BaseModel):
    """What the class says about scaling, kept from the last reconcile."""

    model_config = ConfigDict(extra="forbid")
    autoscaled: bool = False
    minReplicas: int = 1
    maxReplicas: int = 1
    priorityClassName: str | None = None


class OrderState(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ref: OrderRef
    timings: OrderTimings = Field(default_factory=OrderTimings)
    generation: int = 0
    observedGeneration: int = 0
    dirty: bool = True
    deleting: bool = False
    gone: bool = False
    replanRequested: bool = False
    plan: LaunchPlan | None = None
    planAttempts: int = 0
    replanCount: int = 0
    resolution: ModelResolution | None = None
    endpointType: EndpointType | None = None
    applied: ApplyResult | None = None
    conditions: list[Condition] = Field(default_factory=list)
    phase: Phase = Phase.PENDING
    reason: str | None = None
    everReady: bool = False
    healthy: bool = False
    retryAttempt: int = 0
    retryDelaySeconds: float | None = None
    className: str | None = None
    reconciles: int = 0
    # Seconds each step of the last reconcile took (validation … probe): where time-to-Ready went.
    stepSeconds: dict[str, float] = Field(default_factory=dict)
    stepMark: float | None = None
    # Capacity preemption: the class's scaling, the HPA as last seen, what the preemption
    # workflow of the device class said, and the last report sent to it.
    scalingProfile: ScalingProfile = Field(default_factory=ScalingProfile)
    scaling: ScalingObservation | None = None
    replicaCeiling: int | None = None
    scalingBlocked: str | None = None
    lastReport: MemberReport | None = None
    reapplyPending: bool = False
    publishPending: bool = False


class ReplanOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid")
    planned: bool
    reason: str
    message: str
    replanCount: int


SHORT = timedelta(seconds=30)
SERVE_SECONDS_PER_GIB = 20.0
# Short: a worker killed mid-apply is noticed by this timeout, and the apply is idempotent.
APPLY_TIMEOUT = timedelta(seconds=45)
K8S_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))
# Histories written before the scaling watch existed replay without it.
SCALING_WATCH_PATCH = "scaling-watch"


@workflow.defn(name="OrderWorkflow")
class OrderWorkflow:
    @workflow.init
    def __init__(self, state: OrderState) -> None:
        # Set before any handler runs: signal-with-start delivers the signal before run() starts.
        self.state: OrderState | None = state
        # The two watches of a serving order; they outlive a re-apply or a status write.
        self._health_task: asyncio.Future[HealthChange] | None = None
        self._scaling_task: asyncio.Future[ScalingObservation] | None = None

    # ------------------------------------------------------------------ handlers

    @workflow.signal(name="spec_changed")
    def spec_changed(self, generation: int) -> None:
        state = self._require_state()
        # Signals from a watcher that relisted can be old: only a newer generation counts.
        if generation > state.generation:
            state.generation = generation
            state.dirty = True

    @workflow.signal(name="class_changed")
    def class_changed(self) -> None:
        state = self._require_state()
        state.replanRequested = True
        state.dirty = True

    @workflow.signal(name="delete")
    def delete(self) -> None:
        self._require_state().deleting = True

    @workflow.signal(name="set_replica_ceiling")
    def set_replica_ceiling(self, ceiling: int | None) -> None:
        """From the preemption workflow: this order, a donor, runs under a lowered maxReplicas (None lifts it)."""
        state = self._require_state()
        if ceiling is not None:
            ceiling = max(1, ceiling)
        if ceiling == state.replicaCeiling:
            return
        state.replicaCeiling = ceiling
        if state.applied is not None and not state.deleting:
            state.reapplyPending = True

    @workflow.signal(name="scaling_blocked")
    def scaling_blocked(self, reason: str | None) -> None:
        """From the preemption workflow: why this order cannot grow (None: it can again)."""
        state = self._require_state()
        if reason == state.scalingBlocked:
            return
        state.scalingBlocked = reason
        self._refresh_scaling()
        state.publishPending = True

    @workflow.signal(name="replan")
    def replan_signal(self) -> None:
        state = self._require_state()
        state.replanRequested = True
        state.dirty = True

    @workflow.update(name="replan")
    async def replan(self) -> ReplanOutcome:
        state = self._require_state()
        state.replanRequested = True
        state.dirty = True
        started = state.reconciles
        await workflow.wait_condition(lambda: (state.reconciles > started and not state.dirty) or state.deleting)
        planned = get_condition(state.conditions, ConditionType.PLANNED)
        return ReplanOutcome(
            planned=planned is not None and planned.status == ConditionStatus.TRUE,
            reason=planned.reason if planned else "",
            message=planned.message if planned else "the order was not planned",
            replanCount=state.replanCount,
        )

    @replan.validator
    def validate_replan(self) -> None:
        state = self._require_state()
        if state.deleting or state.gone:
            raise ValueError("the order is being deleted: there is nothing to replan")
        if state.dirty or state.replanRequested:
            raise ValueError("a reconcile is already pending for this order; its plan will be recomputed")
        if not is_true(state.conditions, ConditionType.MODEL_RESOLVED):
            cond = next((c for c in state.conditions if c.status != ConditionStatus.TRUE), None)
            why = f"{cond.type}={cond.status} ({cond.reason})" if cond else "it was not validated yet"
            raise ValueError(f"nothing to replan: the order stops before planning, {why}; fix that first")

    @workflow.query(name="state")
    def query_state(self) -> OrderState:
        return self._require_state()

    def _require_state(self) -> OrderState:
        if self.state is None:  # pragma: no cover - handlers run after run() set it
            raise ApplicationError("order workflow has no state yet")
        return self.state

    # ---------------------------------------------------------------------- main

    @workflow.run
    async def run(self, state: OrderState) -> str:
        state = self._require_state()
        self._show()
        while True:
            if state.gone:
                return "order gone"
            if state.deleting:
                await self._teardown()
                return "deleted"
            if state.dirty:
                state.dirty = False
                # A reconcile never runs beside a watch (its probe target or plan may change).
                await self._stop_watches()
                await self._reconcile()
                state.reconciles += 1
                await self._after_reconcile_scaling()
                await self._publish()
                continue
            if state.reapplyPending:
                state.reapplyPending = False
                await self._reapply()
                await self._publish()
                continue
            if state.publishPending:
                await self._publish()
                continue
            await self._wait()
            if self._should_continue_as_new():
                await self._stop_watches()
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(state)

    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        state = self._require_state()
        return info.is_continue_as_new_suggested() or (
            info.get_current_history_length() > state.timings.maxHistoryEvents
        )

    async def _wait(self) -> None:
        state = self._require_state()

        def interrupted() -> bool:
            return state.dirty or state.deleting

        if state.retryDelaySeconds is not None:
            try:
                await workflow.wait_condition(
                    interrupted,
                    timeout=timedelta(seconds=state.retryDelaySeconds),
                    timeout_summary=f"retry in {state.retryDelaySeconds:.0f}s",
                )
            except TimeoutError:
                state.dirty = True
            return

        def signalled() -> bool:
            return interrupted() or state.reapplyPending or state.publishPending

        if state.everReady and state.applied is not None and state.resolution is not None:
            await self._health_watch()
            return
        await workflow.wait_condition(signalled)

    async def _health_watch(self) -> None:
        """Waits for the health watch, the scaling watch (autoscaled orders) or a signal.

        A re-apply or a status write leaves both watches running (the health watch keeps its count
        of failures in a row); an edit or a deletion cancels them.
        """
        state = self._require_state()
        assert state.applied is not None and state.resolution is not None
        timings = state.timings
        if self._health_task is None:
            self._health_task = asyncio.ensure_future(
                workflow.execute_activity(
                    act.WATCH_HEALTH,
                    HealthWatchInput(
                        probe=self._probe_input(),
                        intervalSeconds=timings.healthIntervalSeconds,
                        failureThreshold=timings.failureThreshold,
                        healthy=state.healthy,
                        maxDurationSeconds=timings.healthWatchMaxSeconds,
                    ),
                    result_type=HealthChange,
                    start_to_close_timeout=timedelta(seconds=timings.healthWatchMaxSeconds + 600),
                    heartbeat_timeout=timedelta(seconds=max(60.0, timings.healthIntervalSeconds * 3)),
                    retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=60)),
                    summary="health watch",
                )
            )
        if self._scaling_task is None and self._scaling_watched() and workflow.patched(SCALING_WATCH_PATCH):
            self._scaling_task = asyncio.ensure_future(
                workflow.execute_activity(
                    act.WATCH_SCALING,
                    ScalingWatchInput(
                        ref=state.ref,
                        priorityClassName=state.scalingProfile.priorityClassName,
                        intervalSeconds=timings.scalingIntervalSeconds,
                        maxDurationSeconds=timings.healthWatchMaxSeconds,
                        last=state.scaling,
                    ),
                    result_type=ScalingObservation,
                    start_to_close_timeout=timedelta(seconds=timings.healthWatchMaxSeconds + 600),
                    heartbeat_timeout=timedelta(seconds=max(10.0, timings.scalingIntervalSeconds * 3)),
                    retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=60)),
                    summary="scaling watch",
                )
            )
        health, scaling = self._health_task, self._scaling_task
        waiter = asyncio.ensure_future(
            workflow.wait_condition(
                lambda: state.dirty or state.deleting or state.reapplyPending or state.publishPending
            )
        )
        watches = [t for t in (health, scaling) if t is not None]
        done, _ = await workflow.wait([*watches, waiter], return_when=asyncio.FIRST_COMPLETED)
        if waiter not in done:
            waiter.cancel()
        if health is not None and health in done:
            self._health_task = None
            try:
                change = health.result()
            except ActivityError as err:
                workflow.logger.warning("health watch failed: %s", err)
            else:
                if change.changed:
                    self._set_health(change.healthy, change.detail)
                    await self._publish()
        if scaling is not None and scaling in done:
            self._scaling_task = None
            try:
                observation = scaling.result()
            except ActivityError as err:
                workflow.logger.warning("scaling watch failed: %s", err)
            else:
                await self._on_scaling(observation)
        if state.dirty or state.deleting:
            await self._stop_watches()

    async def _stop_watches(self) -> None:
        for task in (self._health_task, self._scaling_task):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, ActivityError):
                    await task
        self._health_task = self._scaling_task = None

    # ------------------------------------------------------------------ scaling

    def _scaling_watched(self) -> bool:
        state = self._require_state()
        return state.scalingProfile.autoscaled and state.plan is not None and state.applied is not None

    async def _on_scaling(self, observation: ScalingObservation) -> None:
        state = self._require_state()
        changed = state.scaling is None or observation.signature() != state.scaling.signature()
        state.scaling = observation
        if not changed:
            return
        self._refresh_scaling()
        await self._report(observation)
        await self._publish()

    def _refresh_scaling(self) -> None:
        """ScalingHealthy from the HPA and from what the preemption workflow said (planner.scaling)."""
        state = self._require_state()
        if not state.scalingProfile.autoscaled:
            state.conditions = [c for c in state.conditions if c.type != ConditionType.SCALING_HEALTHY]
            return
        verdict = scaling_health(state.scaling, state.scalingBlocked, state.replicaCeiling)
        if verdict is None:
            return
        status, reason, message = verdict
        state.conditions = set_condition(
            state.conditions,
            ConditionType.SCALING_HEALTHY,
            status,
            reason,
            message,
            state.observedGeneration or None,
            workflow.now(),
        )

    async def _report(self, observation: ScalingObservation) -> None:
        """Tell the preemption workflow of the device class where this order stands (signal-with-start)."""
        state = self._require_state()
        if state.plan is None:
            return
        profile = state.scalingProfile
        report = MemberReport(
            ref=state.ref,
            workflowId=workflow.info().workflow_id,
            deviceClass=state.plan.deviceClass,
            sequence=(state.lastReport.sequence + 1) if state.lastReport else 1,
            priority=observation.priority,
            priorityClassName=profile.priorityClassName,
            minReplicas=profile.minReplicas,
            maxReplicas=profile.maxReplicas,
            unit=max(1, state.plan.sharePercent * state.plan.deviceCount),
            desired=observation.desiredReplicas,
            placed=observation.placedReplicas,
            unschedulable=observation.unschedulableReplicas,
            limited=observation.wantsAboveBound,
        )
        last = state.lastReport
        if last is not None and not last.leaving and report.model_copy(update={"sequence": last.sequence}) == last:
            return  # nothing new to say
        await self._send_report(report)

    async def _report_leaving(self) -> None:
        state = self._require_state()
        last = state.lastReport
        if last is None or last.leaving:
            return
        await self._send_report(last.model_copy(update={"leaving": True, "sequence": last.sequence + 1}))

    async def _send_report(self, report: MemberReport) -> None:
        await workflow.execute_activity(
            act.REPORT_SCALING,
            report,
            start_to_close_timeout=SHORT,
            retry_policy=K8S_RETRY,
            summary=("leave " if report.leaving else "report to ") + f"preemption on {report.deviceClass}",
        )
        self._require_state().lastReport = report

    async def _after_reconcile_scaling(self) -> None:
        """A class that stopped autoscaling, or a plan on another device class: leave the old preemption."""
        state = self._require_state()
        last = state.lastReport
        if last is None or last.leaving:
            self._refresh_scaling()
            return
        moved = state.plan is None or state.plan.deviceClass != last.deviceClass
        if moved or not state.scalingProfile.autoscaled:
            await self._report_leaving()
            state.scaling = None
            state.scalingBlocked = None
        self._refresh_scaling()

    async def _reapply(self) -> None:
        """The workload again, with the replica ceiling the preemption workflow set: no replan, no probe."""
        state = self._require_state()
        snapshot: OrderSnapshot = await workflow.execute_activity(
            act.READ_ORDER,
            state.ref,
            result_type=OrderSnapshot,
            start_to_close_timeout=SHORT,
            retry_policy=K8S_RETRY,
            summary="read order and class",
        )
        order, cls = snapshot.order, snapshot.cls
        if order is None:
            state.gone = True
            return
        if order.metadata.deletionTimestamp:
            state.deleting = True
            return
        if (
            cls is None
            or state.plan is None
            or state.resolution is None
            or state.endpointType is None
            or (order.metadata.generation or 0) > state.observedGeneration
        ):
            # Something else changed too: a full reconcile applies the ceiling with it.
            state.dirty = True
            return
        state.applied = await workflow.execute_activity(
            act.APPLY_WORKLOAD,
            ApplyInput(
                ref=state.ref,
                order=order,
                cls=cls,
                plan=state.plan,
                resolution=state.resolution,
                endpointType=state.endpointType,
                replicaCeiling=state.replicaCeiling,
            ),
            result_type=ApplyResult,
            start_to_close_timeout=APPLY_TIMEOUT,
            retry_policy=K8S_RETRY,
            summary="apply workload" + (f" (maxReplicas {state.replicaCeiling})" if state.replicaCeiling else ""),
        )
        applied = state.applied
        self._cond(
            ConditionType.RUNTIME_CURRENT,
            applied.runtimeCurrent,
            applied.runtimeReason,
            applied.runtimeMessage or state.plan.recipe.runtimeVersion,
        )
        if state.replicaCeiling is not None:
            event = OrderEvent(
                ref=state.ref,
                reason=EventReason.CAPACITY_PREEMPTED,
                message=f"maxReplicas lowered to {state.replicaCeiling} to give capacity on device class "
                f"{state.plan.deviceClass} to higher-priority orders",
            )
        else:
            event = OrderEvent(
                ref=state.ref,
                reason=EventReason.CAPACITY_RESTORED,
                message="the class's maxReplicas applies again: capacity taken by preemption was given back",
            )
        await workflow.execute_activity(act.RECORD_EVENT, event, start_to_close_timeout=SHORT, retry_policy=K8S_RETRY)
        self._refresh_scaling()

    def _set_health(self, healthy: bool, detail: str) -> None:
        state = self._require_state()
        state.healthy = healthy
        if healthy:
            self._cond(ConditionType.READY, True, Reason.PROBE_SUCCEEDED, f"the API answers: {detail}")
        else:
            self._cond(
                ConditionType.READY,
                False,
                Reason.SERVICE_UNHEALTHY,
                f"the API failed {state.timings.failureThreshold} health checks in a row: {detail}",
            )

    # ------------------------------------------------------------------ reconcile

    async def _reconcile(self) -> None:
        state = self._require_state()
        state.retryDelaySeconds = None
        state.stepSeconds = {}
        state.stepMark = workflow.now().timestamp()
        snapshot: OrderSnapshot = await workflow.execute_activity(
            act.READ_ORDER,
            state.ref,
            result_type=OrderSnapshot,
            start_to_close_timeout=SHORT,
            retry_policy=K8S_RETRY,
            summary="read order and class",
        )
        order = snapshot.order
        if order is None:
            state.gone = True
            return
        if order.metadata.deletionTimestamp:
            state.deleting = True
            return
        generation = order.metadata.generation or 0
        state.generation = max(state.generation, generation)
        state.observedGeneration = generation
        if state.reconciles == 0 or not order.metadata.finalizers:
            await workflow.execute_activity(
                act.ENSURE_FINALIZER,
                state.ref,
                start_to_close_timeout=SHORT,
                retry_policy=K8S_RETRY,
                summary="finalizer",
            )
        state.className = order.spec.inferenceServiceClassName
        cls = snapshot.cls
        refusal = check_class(order, cls)
        if refusal is not None or cls is None:
            self._refuse(ConditionType.CLASS_RESOLVED, refusal)
            return
        low, high = class_bounds(cls)
        state.scalingProfile = ScalingProfile(
            autoscaled=autoscaled(cls), minReplicas=low, maxReplicas=high, priorityClassName=priority_class_name(cls)
        )
        self._cond(ConditionType.CLASS_RESOLVED, True, Reason.CLASS_RESOLVED, f"class {cls.metadata.name} is Ready")
        self._step_done("validation")

        resolution = await self._resolve_model(order, cls)
        self._step_done("model facts")
        if resolution is None:
            return
        endpoint_type = pick_endpoint_type(cls, resolution.facts)
        assert endpoint_type is not None  # check_model_policy refused an empty intersection
        state.endpointType = endpoint_type

        plan = await self._plan(order, cls, resolution, endpoint_type)
        self._step_done("planning")
        if plan is None:
            return
        await self._apply_and_probe(order, cls, plan, resolution, endpoint_type)

    async def _resolve_model(self, order: InferenceService, cls: InferenceServiceClass) -> ModelResolution | None:
        state = self._require_state()
        refusal = check_catalog_enabled(order, state.timings.catalogEnabled)
        if refusal is not None:
            self._refuse(ConditionType.MODEL_RESOLVED, refusal)
            return None
        resolution: ModelResolution = await workflow.execute_activity(
            act.RESOLVE_MODEL,
            order,
            result_type=ModelResolution,
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=K8S_RETRY,
            summary="resolve model facts",
        )
        if resolution.refusal is not None:
            self._refuse(ConditionType.MODEL_RESOLVED, Refusal(resolution.refusal, resolution.message))
            if resolution.retryAfterSeconds:
                state.retryDelaySeconds = resolution.retryAfterSeconds
            return None
        policy_refusal = check_model_policy(order, cls, resolution.facts)
        if policy_refusal is not None:
            self._refuse(ConditionType.MODEL_RESOLVED, policy_refusal)
            return None
        state.resolution = resolution
        contract = pick_endpoint_type(cls, resolution.facts)
        self._cond(
            ConditionType.MODEL_RESOLVED,
            True,
            Reason.MODEL_RESOLVED,
            f"model {resolution.servedName} is served as {contract}",
        )
        return resolution

    async def _plan(
        self,
        order: InferenceService,
        cls: InferenceServiceClass,
        resolution: ModelResolution,
        endpoint_type: EndpointType,
    ) -> LaunchPlan | None:
        state = self._require_state()
        if state.planAttempts > 0 and (state.replanRequested or state.plan is not None):
            state.replanCount += 1
        state.planAttempts += 1
        state.replanRequested = False
        outcome: PlanOutcome = await workflow.execute_activity(
            act.PLAN_LAUNCH,
            PlanInput(
                ref=state.ref,
                order=order,
                cls=cls,
                facts=resolution.facts,
                servedName=resolution.servedName,
                endpointType=endpoint_type,
                current=state.plan,
            ),
            result_type=PlanOutcome,
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=K8S_RETRY,
            summary="launch plan",
        )
        if outcome.refusal is not None:
            refusal = Refusal(outcome.refusal.reason, outcome.refusal.message)
            serving = state.plan is not None and state.everReady
            if serving:
                # The order keeps the place it holds; the refused recomputation is told, not enforced.
                self._cond(
                    ConditionType.PLANNED,
                    True,
                    Reason.LAUNCH_PLAN_IN_FORCE,
                    f"runs on the launch plan it holds; recomputing it did not succeed: "
                    f"{refusal.reason}: {refusal.message}",
                )
            else:
                self._refuse(ConditionType.PLANNED, refusal)
            if refusal.reason in CAPACITY_REFUSALS:
                state.retryDelaySeconds = self._backoff()
            return state.plan if serving else None
        assert outcome.plan is not None
        state.retryAttempt = 0
        state.plan = outcome.plan
        self._cond(
            ConditionType.PLANNED,
            True,
            Reason.LAUNCH_PLAN_CALCULATED,
            f"{outcome.plan.deviceCount}x {outcome.plan.acceleratorProductName} "
            f"({outcome.plan.deviceClass}, {outcome.plan.placementMode}, {outcome.plan.sharingMode}, "
            f"{outcome.plan.sharePercent}%), recipe {outcome.plan.recipe.source}",
        )
        return outcome.plan

    async def _apply_and_probe(
        self,
        order: InferenceService,
        cls: InferenceServiceClass,
        plan: LaunchPlan,
        resolution: ModelResolution,
        endpoint_type: EndpointType,
    ) -> None:
        state = self._require_state()
        applied: ApplyResult = await workflow.execute_activity(
            act.APPLY_WORKLOAD,
            ApplyInput(
                ref=state.ref,
                order=order,
                cls=cls,
                plan=plan,
                resolution=resolution,
                endpointType=endpoint_type,
                replicaCeiling=state.replicaCeiling,
            ),
            result_type=ApplyResult,
            start_to_close_timeout=APPLY_TIMEOUT,
            retry_policy=K8S_RETRY,
            summary="apply workload",
        )
        state.applied = applied
        if applied.settledRegionKept:
            await workflow.execute_activity(
                act.RECORD_EVENT,
                OrderEvent(
                    ref=state.ref,
                    reason=EventReason.SETTLED_REGION_KEPT,
                    message=applied.settledRegionKeptMessage
                    or "the class's modelStorageClassName changed; the standing model volume keeps the "
                    "class it was made on",
                ),
                start_to_close_timeout=SHORT,
                retry_policy=K8S_RETRY,
            )
        self._cond(
            ConditionType.WORKLOAD_READY,
            False,
            Reason.WORKLOAD_PROGRESSING,
            f"workload applied; waiting for a replica to load {resolution.servedName}",
        )
        self._cond(
            ConditionType.RUNTIME_CURRENT,
            applied.runtimeCurrent,
            applied.runtimeReason,
            applied.runtimeMessage or plan.recipe.runtimeVersion,
        )
        await self._publish()
        self._step_done("apply")
        # Loading a model takes time in proportion to its size: the wait grows with the volume.
        wait = max(state.timings.serveWaitSeconds, plan.modelVolumeGiB * SERVE_SECONDS_PER_GIB)
        result: ProbeResult = await workflow.execute_activity(
            act.AWAIT_SERVING,
            self._probe_input().model_copy(update={"waitSeconds": wait}),
            result_type=ProbeResult,
            start_to_close_timeout=timedelta(seconds=wait + 60),
            heartbeat_timeout=timedelta(seconds=60),
            retry_policy=RetryPolicy(maximum_attempts=3),
            summary="wait for the first probe",
        )
        self._step_done("pods and probe")
        if result.workloadReady:
            self._cond(ConditionType.WORKLOAD_READY, True, Reason.WORKLOAD_APPLIED, "a replica is ready")
        if result.ok:
            self._cond(ConditionType.READY, True, Reason.PROBE_SUCCEEDED, f"the API answers: {result.detail}")
            state.everReady = True
            state.healthy = True
            state.retryAttempt = 0
        elif state.everReady:
            self._set_health(False, result.detail)
        else:
            self._cond(
                ConditionType.READY,
                False,
                Reason.HEALTH_CHECK_FAILED,
                f"the API did not answer yet: {result.detail}",
            )
            state.retryDelaySeconds = self._backoff()

    def _probe_input(self) -> ProbeInput:
        state = self._require_state()
        assert state.applied is not None and state.resolution is not None
        return ProbeInput(
            ref=state.ref,
            endpointUrl=state.applied.endpoint.url or "",
            authSecretName=state.applied.authSecretName,
            servedName=state.resolution.servedName,
            timeoutSeconds=state.timings.probeTimeoutSeconds,
        )

    async def _teardown(self) -> None:
        state = self._require_state()
        self._cond(ConditionType.READY, False, Reason.DELETING, "the order is being deleted")
        await self._stop_watches()
        # The last word on the order before its finalizer goes.
        await self._publish()
        await self._report_leaving()
        await workflow.execute_activity(
            act.FINALIZE_ORDER,
            state.ref,
            start_to_close_timeout=SHORT,
            retry_policy=K8S_RETRY,
            summary="remove finalizer",
        )

    # --------------------------------------------------------------- conditions

    def _step_done(self, step: str) -> None:
        state = self._require_state()
        now = workflow.now().timestamp()
        if state.stepMark is not None:
            state.stepSeconds[step] = round(now - state.stepMark, 3)
        state.stepMark = now

    def _backoff(self) -> float:
        state = self._require_state()
        delay = min(state.timings.retryBaseSeconds * (2**state.retryAttempt), state.timings.retryMaxSeconds)
        state.retryAttempt += 1
        return float(delay)

    def _cond(self, type_: ConditionType, ok: bool, reason: Reason | str, message: str) -> None:
        state = self._require_state()
        state.conditions = set_condition(
            state.conditions,
            type_,
            ConditionStatus.TRUE if ok else ConditionStatus.FALSE,
            reason,
            message,
            state.observedGeneration or None,
            workflow.now(),
        )

    def _refuse(self, type_: ConditionType, refusal: Refusal | None) -> None:
        state = self._require_state()
        assert refusal is not None
        self._cond(type_, False, refusal.reason, refusal.message)
        if refusal.reason in CAPACITY_REFUSALS and state.retryDelaySeconds is None:
            state.retryDelaySeconds = self._backoff()
        # Later steps wait; a standing workload stays untouched and keeps its own conditions.
        for later in READINESS_ORDER[READINESS_ORDER.index(type_) + 1 :]:
            if get_condition(state.conditions, later) is None:
                self._cond(later, False, Reason.WAITING_FOR_PREVIOUS_STEP, f"waits for {type_}")

    async def _publish(self) -> None:
        state = self._require_state()
        state.publishPending = False
        phase, reason = compute_phase(state.conditions)
        state.phase, state.reason = phase, reason
        # Search attributes first: they land with this workflow task, before the status write.
        self._show()
        resolved = state.plan.resolved(state.replanCount) if state.plan else None
        applied = state.applied
        await workflow.execute_activity(
            act.PUBLISH_STATUS,
            StatusUpdate(
                ref=state.ref,
                phase=phase,
                reason=reason,
                observedGeneration=state.observedGeneration or None,
                conditions=state.conditions,
                endpoint=applied.endpoint if applied else None,
                authSecretName=applied.authSecretName if applied else None,
                endpointType=state.endpointType,
                constraints=applied.constraints if applied else None,
                resolved=resolved,
            ),
            start_to_close_timeout=SHORT,
            retry_policy=K8S_RETRY,
            summary=f"status {phase}" + (f" ({reason})" if reason else ""),
        )

    def _show(self) -> None:
        """Search attributes and the Markdown details panel: the Temporal UI is the progress view."""
        state = self._require_state()
        device = state.plan.deviceClass if state.plan else None
        workflow.upsert_search_attributes(
            order_search_attributes(state.ref, state.className, state.phase, state.reason, device)
        )
        rows = "\n".join(
            f"| {c.type} | {c.status} | {c.reason} | {c.message.replace('|', '/')} |" for c in state.conditions
        )
        workflow.set_current_details(
            f"## {state.ref.namespace}/{state.ref.name}\n\n"
            f"**Phase:** {state.phase}" + (f" — {state.reason}" if state.reason else "") + "\n\n"
            f"**Class:** {state.className or '?'} · **Device:** {device or '—'} · "
            f"**Replans:** {state.replanCount}"
            + (f" · **maxReplicas held at:** {state.replicaCeiling} (preemption)" if state.replicaCeiling else "")
            + "\n\n"
            + (
                "**Last reconcile:** " + " · ".join(f"{k} {v:.1f}s" for k, v in state.stepSeconds.items()) + "\n\n"
                if state.stepSeconds
                else ""
            )
            + "| condition | status | reason | message |\n|---|---|---|---|\n"
            + rows
        )
