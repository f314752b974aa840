"""The order workflow (type ``OrderWorkflowV2``): one per InferenceService, the user guide's steps in order.

1. validate the order against its class, 2. resolve the model's facts, 3. plan placement and the
recipe, 4. apply the workload (every object the order should own; what it no longer wants goes),
5. publish the endpoint, 6. probe the API, 7. serve — asleep on one long timer until the observer
(the watch process) wakes it with a change it acts on: a spec or class edit, an owned object
deleted or changed, replicas that changed, a health flip, an HPA decision, a model that appeared,
a new release or settings.

Level-triggered: each reconcile reads the order, its class and the settings in force and converges
on them; nothing is remembered that Kubernetes cannot tell again. Plans are stable: the planner is
asked again only when what the plan was made for changed (or on request), and it keeps a placement
that is still allowed and still fits. Deterministic: every read and write is an activity, every
decision a pure function; no activity outlives one step, so a serving order holds no worker slot.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from inference_api.observation import ORDER_WORKFLOW_TYPE, HealthReport, ObservedChange, OrderSignal
    from inference_api.payloads import (
        ApplyInput,
        ApplyResult,
        ModelResolution,
        MoveStep,
        OrderEvent,
        OrderRead,
        OrderSnapshot,
        PlanInput,
        ProbeInput,
        ProbeResult,
        StatusUpdate,
    )
    from inference_api.plan import LaunchPlan, PlanOutcome
    from inference_api.preemption import ScalingObservation
    from inference_api.reasons import CAPACITY_REFUSALS, STATE_REFUSED, EventReason, Reason
    from inference_api.types import (
        ConditionStatus,
        ConditionType,
        EndpointType,
        InferenceService,
        InferenceServiceClass,
    )
    from planner.scaling import autoscaled, class_bounds, priority_class_name
    from workflows import activity_names as act
    from workflows.order_details import details_markdown
    from workflows.order_membership import APPLY_TIMEOUT, K8S_RETRY, SHORT, PreemptionMembership
    from workflows.order_state import (
        REPLICA_TROUBLE,
        OrderState,
        OrderTimings,
        ReplanOutcome,
        ReplicaTrouble,
        ScalingProfile,
        TroubleAction,
    )
    from workflows.patches import RUN_GENERATION
    from workflows.search_attributes import order_search_attributes
    from workflows.status import (
        READINESS_ORDER,
        TROUBLE_REASONS,
        compute_phase,
        get_condition,
        is_true,
        published_conditions,
        set_condition,
        trouble_advice,
    )
    from workflows.validation import (
        Refusal,
        check_catalog_enabled,
        check_class,
        check_model_policy,
        pick_endpoint_type,
    )

__all__ = ["OrderState", "OrderTimings", "OrderWorkflow", "ReplanOutcome", "ScalingProfile"]

SERVE_SECONDS_PER_GIB = 20.0


# An order with no plan yet tells why it waits when the planner (its service) cannot answer: the plan
# activity is tried a few times, then the order says PlannerUnavailable and plans again on a short
# backoff — instead of retrying unseen with no status at all. Patched: runs that started before retry
# as they did (the activity's retry policy is part of its command).
PLANNER_WAIT_PATCH = "plan-waits-visibly"
PLAN_ATTEMPTS = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=4), maximum_attempts=3
)
PLANNER_RETRY_BASE_SECONDS = 5.0
PLANNER_RETRY_MAX_SECONDS = 30.0

# A delete cancels the reconcile at the step it waits on; when that step finishes in the same workflow
# task, the SDK hands the step's result back instead of the cancellation and the reconcile went on into
# its next step (a first probe of a replica that never loads: the delete waited for the whole serve
# wait). Now no step starts once the reconcile is interrupted. Patched: runs recorded before went on.
INTERRUPT_PATCH = "no-step-after-interrupt"

# The first load waits outside the worker: the order's workflow sleeps on a timer (the serve wait, a
# re-look) until the observer tells it a replica got ready (``replica_ready``), then probes the API in
# one short activity. Before, one activity (await_serving) watched the StatefulSet for the whole load,
# holding one of the worker's activity slots: orders that never load (pods that cannot schedule) took
# every slot and a delete, or a new order, waited behind them. Patched: runs recorded before waited in
# that activity (it stays registered for them).
FIRST_LOAD_PATCH = "first-load-observed"

# A serving order whose replan is refused for capacity keeps its plan (LaunchPlanInForce) and asks the
# planner again on its own backoff (retryBaseSeconds doubling up to replanBackoffMaxSeconds, one hour by
# default), which health checks, observed changes and re-applies do not reset — before, the successful
# probe of each reconcile reset the shared retry counter and the planner was asked every 16 s for as
# long as the edit stood. A new edit or a replan asked by hand asks at once. Patched: runs recorded
# before backed off as they did.
REPLAN_BACKOFF_PATCH = "replan-backs-off"

# A ``health_changed`` signal is a hint, not a verdict: anyone who reaches Temporal can send one. The
# workflow confirms it with one short probe of the order's own endpoint (``probe_serving``, bounded by
# failureThreshold x probeTimeoutSeconds: the API is healthy when it answers once in that window) and
# Ready follows the probe, never the report. Signals heard while a probe runs are coalesced into one
# more probe, and no two confirming probes start closer than that window: a flapping (or forged)
# stream of signals costs one probe a window at most. Patched: runs recorded before believed the report.
HEALTH_HINT_PATCH = "health-signal-is-a-hint"

# What the cluster says is wrong with the order's replicas (the observer's ``replica_trouble``: a node
# lost, a claim the scheduler cannot allocate, a quota refusing the pods, an image that cannot be
# pulled, a download refused, an engine that crashes or is killed for memory) is named on the order at
# once, with the cluster's own message. Where moving helps (Replan) the order plans again, away from
# what failed, on its own backoff (now for a lost node; retryBaseSeconds doubling up to
# replanBackoffMaxSeconds); where it cannot (WaitForEdit) it says who must change what and waits — the
# cluster retries by itself, an edit reconciles. Before, the order waited for the serve wait to run out
# and said HealthCheckFailed. Patched: runs recorded before never heard the signal.
TROUBLE_PATCH = "replica-troubles-named"

# A serving order is woken once a day (its resync) or by the observer, and by then a worker that holds
# fewer workflows in its cache than there are orders has evicted it: the wake replays the run's whole
# history first — about 57 events of its creation, 41 more for each day served, up to maxHistoryEvents
# (2,000: some 40 days). On the 2-core machine a replay of 180 events held a workflow-task slot 6-9 s
# under load, and what came after it queued. Now an order about to sleep on its long resync, with
# nothing pending, whose run holds more than SERVING_RUN_EVENTS events first continues as new: the run
# it sleeps in holds six (started, a workflow task, its search attributes, its timer), and a wake
# replays at most about three days' worth. Past 100, not at once: a fresh order's creation (about 57)
# stays in its run, so a burst of new orders pays no continue-as-new each, and a serving order pays
# about 2.5 events a day (three in the old run, six in the new, one timer fewer, every third day) and
# a closed run kept for the namespace's retention every three days. The bound is part of the patch:
# changing it changes when runs continue, so it takes a patch of its own. Patched: runs recorded
# before slept in the run they had.
SERVING_RUN_PATCH = "serving-run-starts-fresh"
SERVING_RUN_EVENTS = 100

# A trouble that ends before the order showed it (it ended the first-load wait, and its end came while
# the reconcile wrote the status) still wakes an order that does not serve: it applies and probes
# again. Before, the end woke it only when WorkloadReady named the trouble, and an order whose quota
# refusal came and went that way slept on the day-long resync saying WorkloadProgressing while its
# replica served (the fault suite at 100 orders). Patched, asked only on that path: runs recorded before
# slept there, and a run that never takes it records no marker (docs/upgrade.md, rollback).
TROUBLE_END_PATCH = "trouble-end-wakes-loading-order"

# A replica reported ready whose API does not answer, while the cluster names a trouble of the order's
# replicas (an image that cannot be pulled on a pod the node agent first said was ready): the trouble is
# the answer on Ready, as it is on WorkloadReady. Before, Ready said HealthCheckFailed beside a
# WorkloadReady that named the trouble, until the loop showed the trouble again (CI read it between the
# two status writes). Patched, asked only on that path: runs recorded before said HealthCheckFailed there
# and backed off; a run that never takes it records no marker.
TROUBLE_OVER_PROBE_PATCH = "trouble-answers-a-failed-probe"

# A run's state is a hint: one started with ``deleting`` (or ``gone``) set by hand, by a holder of a
# module certificate, tore the order's workload down and removed its finalizer while the order stayed.
# The teardown now reads the order first and goes on only when the API server says it is being deleted
# (or is gone); otherwise the run records a DeleteRefused Event and reconciles the order from what the
# cluster says, so a forged run heals by itself. Patched, asked only on those paths: runs recorded
# before tore down without the read; a run that never takes them records no marker.
DELETE_CONFIRMED_PATCH = "teardown-reads-the-order"

# The module's finalizer was put on only when the order had none at all: with another controller's
# finalizer on it, an order whose module finalizer was removed (the disable hook removes it, so that a
# delete while the module is off finishes) never got it back once enabled, and a later delete skipped
# the teardown. Now it is put on whenever the module's is missing. Patched, asked only on that path:
# runs recorded before did not call the activity there; a run that never takes it records no marker.
FINALIZER_BESIDE_OTHERS_PATCH = "finalizer-beside-others"
# The module's finalizer (activities.order.FINALIZER; the workflow imports no activity code).
ORDER_FINALIZER = "ai.deckhouse.io/inference-service"


# While a move surges, the order looks at it again this often (the observer's word on ready replicas
# usually comes first): the apply retires the old replicas, or withdraws a move that cannot finish.
MOVE_LOOK_AGAIN_SECONDS = 300.0


def _smaller_move(current: LaunchPlan | None, new: LaunchPlan | None) -> bool:
    """A repack's plan is worth a move: it takes less of a device per replica (count x share) than
    the plan in force, so a move gives some back."""
    if current is None or new is None:
        return False
    return new.deviceCount * new.sharePercent < current.deviceCount * current.sharePercent


def _places(plan: LaunchPlan) -> set[str]:
    """Every ``node/device`` the plan names (each replica's placement, else the first's)."""
    placements = plan.replicaPlacements or []
    if placements:
        return {f"{p.nodeName}/{name}" for p in placements for name in p.deviceNames}
    return {f"{plan.nodeName}/{name}" for name in plan.deviceNames} if plan.nodeName else set()


def _worth_moving(current: LaunchPlan | None, new: LaunchPlan | None, target: str | None) -> bool:
    """A repack's plan is worth a move. Untargeted: it takes less of a device (``_smaller_move``).
    Targeted (a consolidating move, ``node/device``): one device, the target, which the order does
    not hold, taking no more of a device than the plan in force: the device it leaves comes free."""
    if target is None:
        return _smaller_move(current, new)
    if current is None or new is None or new.deviceCount != 1:
        return False
    if new.deviceCount * new.sharePercent > current.deviceCount * current.sharePercent:
        return False
    return _places(new) == {target} and target not in _places(current)


def _duration(seconds: float) -> str:
    """A delay as people read it: 15 s, 8 min, 1 h."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.0f} h"


@workflow.defn(name=ORDER_WORKFLOW_TYPE)
class OrderWorkflow(PreemptionMembership):
    @workflow.init
    def __init__(self, state: OrderState) -> None:
        # Set before any handler runs: signal-with-start delivers the signal before run() starts.
        self.state: OrderState | None = state
        # Set while a delete interrupts the running reconcile: no activity starts from then on.
        self._interrupting = False

    # ------------------------------------------------------------------ handlers

    @workflow.signal(name=OrderSignal.SPEC_CHANGED)
    def spec_changed(self, generation: int) -> None:
        state = self._require_state()
        # Signals from an observer that relisted can be old: only a newer generation counts.
        if generation > state.generation:
            state.generation = generation
            state.dirty = True

    @workflow.signal(name=OrderSignal.CLASS_CHANGED)
    def class_changed(self, generation: int) -> None:
        state = self._require_state()
        # Any other generation than the one held: an edit, a deletion (0), a class made again.
        state.classSeen = True
        if generation != state.classGeneration:
            state.classGeneration = generation
            state.dirty = True

    @workflow.signal(name=OrderSignal.OBSERVED)
    def observed(self, change: ObservedChange) -> None:
        state = self._require_state()
        state.lastObserved = change.what
        state.dirty = True

    @workflow.signal(name=OrderSignal.HEALTH_CHANGED)
    def health_changed(self, report: HealthReport) -> None:
        state = self._require_state()
        if state.everReady and state.applied is not None:
            state.pendingHealth = report

    @workflow.signal(name=OrderSignal.SCALING_CHANGED)
    def scaling_changed(self, observation: ScalingObservation) -> None:
        self._require_state().pendingScaling = observation

    @workflow.signal(name=OrderSignal.REPLICA_READY)
    def replica_ready(self, ready_replicas: int) -> None:
        """From the observer: a replica of the applied workload got ready while the order loads."""
        if ready_replicas >= 1:
            self._require_state().replicaReady = True

    @workflow.signal(name=REPLICA_TROUBLE)
    def replica_trouble(self, trouble: ReplicaTrouble) -> None:
        """From the observer: what the cluster says is wrong with the replicas now (cleared: nothing)."""
        state = self._require_state()
        state.trouble = None if trouble.cleared else trouble
        state.troublePending = True

    @workflow.signal(name=OrderSignal.SETTINGS_CHANGED)
    def settings_changed(self, release: str) -> None:
        state = self._require_state()
        if release != state.release:
            state.dirty = True

    @workflow.signal(name=OrderSignal.DELETE)
    def delete(self) -> None:
        # A request, not an order: the workflow reads the order and obeys only its deletionTimestamp.
        self._require_state().deleteRequested = True

    @workflow.signal(name="set_replica_ceiling")
    def set_replica_ceiling(self, ceiling: int | None) -> None:
        """From the preemption workflow: this order, a donor, runs under a lowered maxReplicas (None lifts it)."""
        self._ceiling_changed(ceiling)

    @workflow.signal(name="scaling_blocked")
    def scaling_blocked(self, reason: str | None) -> None:
        """From the preemption workflow: why this order cannot grow (None: it can again)."""
        self._blocked_changed(reason)

    @workflow.signal(name=OrderSignal.REPLAN)
    def replan_signal(self) -> None:
        state = self._require_state()
        state.replanRequested = True
        state.dirty = True

    @workflow.signal(name=OrderSignal.MOVE)
    def move(self, target: str | None = None) -> None:
        """From the observer's repack: look for a place beside this one that takes less of a device,
        or (``target``, ``node/device``) that one device, so the device the order leaves comes free.
        A hint: the planner judges the target's room, the apply the class's update policy."""
        state = self._require_state()
        if state.everReady and state.plan is not None and not state.deleting:
            state.moveRequested = True
            state.moveTarget = target if isinstance(target, str) and 0 < len(target) <= 512 else None
            state.dirty = True

    @workflow.update(name=OrderSignal.REPLAN)
    async def replan(self) -> ReplanOutcome:
        state = self._require_state()
        state.replanRequested = True
        state.dirty = True
        # The first reconcile to start from now on carries this request (one may be running already).
        answering = state.reconcilesStarted + 1
        await workflow.wait_condition(lambda: state.lastReconcileCompleted >= answering or state.deleting)
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
        # The run's first task says which code generation started it (workflows/patches.py): what a
        # release that retires a patch counts. Only the content of the upsert every run begins with.
        self._show(run_generation=RUN_GENERATION)
        while True:
            if state.gone:
                if not await self._still_gone():
                    continue
                await self._report_leaving()
                return "order gone"
            if state.deleteRequested:
                state.deleteRequested = False
                await self._confirm_deletion()
                continue
            if state.deleting:
                if await self._teardown():
                    return "deleted"
                continue
            if state.dirty:
                state.dirty = False
                state.reconcilesStarted += 1
                number = state.reconcilesStarted
                if await self._interruptible(self._reconcile()):
                    await self._after_reconcile_scaling()
                    await self._publish()
                    # Counted once published: a replan's answer reads the status it wrote.
                    state.reconciles += 1
                    state.lastReconcileCompleted = number
                continue
            if state.troublePending and workflow.patched(TROUBLE_PATCH):
                state.troublePending = False
                if self._on_trouble():
                    await self._publish()
                continue
            if state.pendingHealth is not None:
                if workflow.patched(HEALTH_HINT_PATCH):
                    if await self._confirm_health():
                        await self._publish()
                    continue
                report, state.pendingHealth = state.pendingHealth, None
                if self._set_health(report.healthy, report.detail):
                    await self._publish()
                continue
            if state.pendingScaling is not None:
                observation, state.pendingScaling = state.pendingScaling, None
                await self._on_scaling(observation)
                continue
            if state.reapplyPending:
                state.reapplyPending = False
                await self._reapply()
                await self._publish()
                continue
            if state.publishPending:
                await self._publish()
                continue
            if self._sleeps_in_a_fresh_run():
                workflow.continue_as_new(state)
            await self._wait()
            if self._should_continue_as_new():
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(state)

    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        state = self._require_state()
        return info.is_continue_as_new_suggested() or (
            info.get_current_history_length() > state.timings.maxHistoryEvents
        )

    def _sleeps_in_a_fresh_run(self) -> bool:
        """About to sleep on the long resync (no retry, no trouble's replan, nothing pending, no
        handler running) in a run longer than SERVING_RUN_EVENTS: continue as new first (see
        SERVING_RUN_PATCH). The patch is asked last, so a run that stays records no marker."""
        state = self._require_state()
        return (
            state.retryDelaySeconds is None
            and self._trouble_replan_in() is None
            and not self._woken()
            and workflow.all_handlers_finished()
            and workflow.info().get_current_history_length() > SERVING_RUN_EVENTS
            and workflow.patched(SERVING_RUN_PATCH)
        )

    def _woken(self) -> bool:
        state = self._require_state()
        return (
            state.dirty
            or state.deleteRequested
            or state.deleting
            or state.reapplyPending
            or state.publishPending
            or state.pendingHealth is not None
            or state.pendingScaling is not None
            or state.troublePending
        )

    async def _wait(self) -> None:
        """Until a signal the order acts on — or a timer: a retry's backoff, else the long resync."""
        state = self._require_state()
        retry = state.retryDelaySeconds
        replan_in = self._trouble_replan_in()
        if replan_in is not None:
            retry = max(0.0, replan_in) if retry is None else min(retry, max(0.0, replan_in))
        seconds = retry if retry is not None else state.timings.resyncSeconds
        try:
            await workflow.wait_condition(
                self._woken,
                timeout=timedelta(seconds=seconds),
                timeout_summary=f"retry in {seconds:.0f}s" if retry is not None else "resync",
            )
        except TimeoutError:
            state.dirty = True

    async def _interruptible(self, step: Coroutine[Any, Any, None]) -> bool:
        """Run a reconcile; a delete request cancels whatever activity it waits on. True when it finished."""
        state = self._require_state()
        task = asyncio.ensure_future(step)
        await workflow.wait_condition(lambda: task.done() or state.deleteRequested)
        if task.done():
            task.result()
            return True
        self._interrupting = True
        task.cancel()
        try:
            await task
        except ActivityError:
            pass
        except asyncio.CancelledError:
            # The step's end, as asked: swallowed. Unless this coroutine itself is being cancelled: the
            # SDK cancels every task of a workflow it evicts from its cache, and an eviction swallowed
            # here would run the order's loop on (no commands: the SDK refuses them while evicting).
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
        finally:
            self._interrupting = False
        # Whatever the cancelled step left half-done is done again unless the order is really going.
        state.dirty = True
        return False

    async def _activity(self, activity: str, arg: Any, **options: Any) -> Any:
        """``workflow.execute_activity``, refused once a delete interrupts the reconcile (see INTERRUPT_PATCH)."""
        if self._interrupting and workflow.patched(INTERRUPT_PATCH):
            raise asyncio.CancelledError("the order is being deleted")
        return await workflow.execute_activity(activity, arg, **options)

    # ------------------------------------------------------------------ reconcile

    async def _read(self, deleting: bool = False) -> OrderSnapshot:
        state = self._require_state()
        # What the run knows of the order travels with the read: the worker's cache answers only when it
        # is at least that fresh (activities/order_cache.py). An activity's input is not part of replay.
        read = OrderRead(
            **state.ref.model_dump(),
            generation=state.generation,
            classGeneration=state.classGeneration or None,
            firstClassRead=not state.classSeen,
            deleting=deleting,
        )
        snapshot: OrderSnapshot = await self._activity(
            act.READ_ORDER,
            read,
            result_type=OrderSnapshot,
            start_to_close_timeout=SHORT,
            retry_policy=K8S_RETRY,
            summary="read order and class",
        )
        if snapshot.timings is not None:
            state.timings = snapshot.timings
        if snapshot.release is not None:
            state.release = snapshot.release
        if snapshot.order is not None:
            state.seenModuleDisabled = snapshot.order.status.reason == Reason.MODULE_DISABLED
        return snapshot

    async def _confirm_deletion(self) -> None:
        state = self._require_state()
        order = (await self._read(deleting=True)).order
        if order is None:
            state.gone = True
        elif order.metadata.deletionTimestamp:
            state.deleting = True
        else:
            workflow.logger.warning("delete signal ignored: the order is not being deleted")

    async def _reconcile(self) -> None:
        state = self._require_state()
        state.retryDelaySeconds = None
        if state.everReady or state.stepMark is None:
            state.stepSeconds = {}
            state.stepMark = workflow.now().timestamp()
        else:
            # Not Ready yet: the steps add up across reconciles, with the waits between them, to the
            # order's time to Ready (the details panel's table).
            self._step_done("waiting to retry")
        snapshot = await self._read()
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
        finalizers = order.metadata.finalizers or []
        if not finalizers or (ORDER_FINALIZER not in finalizers and workflow.patched(FINALIZER_BESIDE_OTHERS_PATCH)):
            await self._activity(
                act.ENSURE_FINALIZER,
                state.ref,
                start_to_close_timeout=SHORT,
                retry_policy=K8S_RETRY,
                summary="finalizer",
            )
        state.className = order.spec.inferenceServiceClassName
        cls = snapshot.cls
        state.classGeneration = (cls.metadata.generation or 0) if cls is not None else 0
        state.classSeen = True
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

        fresh = await self._plan(order, cls, resolution, endpoint_type)
        self._step_done("planning")
        if state.plan is None:
            return
        if fresh:
            # The plan was made for this spec: it is now the one the order runs.
            state.heldSpec = order.spec
            state.resolution = resolution
            state.endpointType = endpoint_type
        if state.heldSpec is None or state.resolution is None or state.endpointType is None:
            return
        held = order.model_copy(update={"spec": state.heldSpec})
        await self._apply_and_probe(held, cls, state.plan, state.resolution, state.endpointType)

    async def _resolve_model(self, order: InferenceService, cls: InferenceServiceClass) -> ModelResolution | None:
        state = self._require_state()
        refusal = check_catalog_enabled(order, state.timings.catalogEnabled)
        if refusal is not None:
            self._refuse(ConditionType.MODEL_RESOLVED, refusal)
            return None
        resolution: ModelResolution = await self._activity(
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
        contract = pick_endpoint_type(cls, resolution.facts)
        self._cond(
            ConditionType.MODEL_RESOLVED,
            True,
            Reason.MODEL_RESOLVED,
            f"model {resolution.servedName} is served as {contract}",
        )
        return resolution

    def _plan_key(self, order: InferenceService, cls: InferenceServiceClass, resolution: ModelResolution) -> str:
        state = self._require_state()
        generation = order.metadata.generation or 0
        return f"{generation}/{cls.metadata.generation or 0}/{state.release or ''}/{resolution.servedName}"

    async def _plan(
        self,
        order: InferenceService,
        cls: InferenceServiceClass,
        resolution: ModelResolution,
        endpoint_type: EndpointType,
    ) -> bool:
        """Plan when what the plan was made for changed (or on request). True when a new plan was made."""
        state = self._require_state()
        key = self._plan_key(order, cls, resolution)
        requested = asked = state.replanRequested
        state.replanRequested = False
        # A move is asked of a serving order only, and gives way to any other reason to plan.
        moving = state.moveRequested and state.plan is not None and state.everReady and state.healthy
        target = state.moveTarget
        state.moveRequested, state.moveTarget = False, None
        if moving and (requested or key != state.planKey):
            moving = False
        elif moving:
            requested = True
        if self._trouble_replan_due():
            # The replicas cannot run where the plan put them (a node lost, a claim not allocatable):
            # plan again, and again on a backoff while the trouble stands.
            requested = True
            self._schedule_trouble_replan()
        if state.plan is not None and key == state.planKey and not requested:
            return False  # stable: nothing the plan depends on changed
        held = self._replan_held(key, requested)
        if held is not None:
            # Refused for this very key a moment ago: the plan in force stays, the planner is not asked
            # before its backoff ends (the workflow wakes then).
            state.retryDelaySeconds = held
            return False
        # A serving order keeps serving on its plan while the planner is away (its status unchanged, its
        # edit not yet observed); one without a plan would show nothing at all: it says why it waits.
        telling = state.plan is None and workflow.patched(PLANNER_WAIT_PATCH)
        try:
            outcome: PlanOutcome = await self._activity(
                act.PLAN_LAUNCH,
                PlanInput(
                    ref=state.ref,
                    order=order,
                    cls=cls,
                    facts=resolution.facts,
                    servedName=resolution.servedName,
                    endpointType=endpoint_type,
                    current=state.plan,
                    source=resolution.source,
                    # The model's commit is taken anew for a new spec or a replan asked by hand only.
                    keepRevision=self._same_spec(key) and not asked,
                    besideCurrent=moving,
                    preferDevice=target if moving else None,
                ),
                result_type=PlanOutcome,
                start_to_close_timeout=timedelta(seconds=60),
                retry_policy=PLAN_ATTEMPTS if telling else K8S_RETRY,
                summary="launch plan",
            )
        except ActivityError as err:
            if not telling or isinstance(err.cause, CancelledError):
                raise
            self._wait_for_planner(err)
            return False
        if moving and not _worth_moving(state.plan, outcome.plan, target):
            # No place that takes less of a device (or no room on the target) beside this one: the
            # order stays, untold (the repack asks again later).
            return False
        if outcome.refusal is not None:
            refusal = Refusal(outcome.refusal.reason, outcome.refusal.message)
            serving = state.plan is not None and state.everReady
            if serving:
                # The order keeps the place and the spec it holds; the refused recomputation is told.
                self._cond(
                    ConditionType.PLANNED,
                    True,
                    Reason.LAUNCH_PLAN_IN_FORCE,
                    f"runs on the launch plan it holds; recomputing it did not succeed: "
                    f"{refusal.reason}: {refusal.message}",
                )
            else:
                state.plan = None
                self._refuse(ConditionType.PLANNED, refusal)
            if refusal.reason == Reason.MODEL_NOT_FOUND and not serving:
                # The hub knows no such repository (or revision) now: it may appear, or be made public.
                state.retryDelaySeconds = self._backoff()
            # A capacity refusal is tried again on a backoff — unless the order serves a plan made for
            # exactly this (a replan asked by hand): that one is told, and the order keeps its place.
            if refusal.reason in CAPACITY_REFUSALS and (not serving or key != state.planKey):
                if serving and workflow.patched(REPLAN_BACKOFF_PATCH):
                    state.retryDelaySeconds = self._hold_replan(key, refusal)
                else:
                    state.retryDelaySeconds = self._backoff()
            return False
        assert outcome.plan is not None
        state.replanHoldKey, state.replanAttempt, state.replanNotBefore = None, 0, None
        if requested or state.plan is not None:
            state.replanCount += 1  # the plan was recomputed (it may well have kept its place)
        state.retryAttempt = 0
        state.plan = outcome.plan
        state.planKey = key
        state.moveApplyPending = moving
        self._cond(
            ConditionType.PLANNED,
            True,
            Reason.LAUNCH_PLAN_CALCULATED,
            f"{outcome.plan.deviceCount}x {outcome.plan.acceleratorProductName} "
            f"({outcome.plan.deviceClass}, {outcome.plan.placementMode}, {outcome.plan.sharingMode}, "
            f"{outcome.plan.sharePercent}%), recipe {outcome.plan.recipe.source}",
        )
        return True

    def _same_spec(self, key: str) -> bool:
        """The order holds a plan made for the spec generation ``key`` is for."""
        state = self._require_state()
        if state.plan is None or state.planKey is None:
            return False
        return state.planKey.split("/", 1)[0] == key.split("/", 1)[0]

    async def _apply(
        self,
        order: InferenceService,
        cls: InferenceServiceClass,
        plan: LaunchPlan,
        resolution: ModelResolution,
        endpoint_type: EndpointType,
    ) -> ApplyResult | None:
        """Every object the order should own, applied; what it no longer wants pruned. None: refused for good."""
        state = self._require_state()
        try:
            applied: ApplyResult = await self._activity(
                act.APPLY_WORKLOAD,
                ApplyInput(
                    ref=state.ref,
                    order=order,
                    cls=cls,
                    plan=plan,
                    resolution=resolution,
                    endpointType=endpoint_type,
                    replicaCeiling=state.replicaCeiling,
                    makeBeforeBreak=state.moveApplyPending,
                ),
                result_type=ApplyResult,
                start_to_close_timeout=APPLY_TIMEOUT,
                retry_policy=K8S_RETRY,
                summary="apply workload",
            )
        except ActivityError as err:
            cause = err.cause
            if isinstance(cause, ApplicationError) and cause.type == STATE_REFUSED:
                # The apply refused this run's own state (a forged plan, recipe, resolution or held spec):
                # after a backoff the order is planned again from what the cluster says, and the new plan's
                # spec, resolution and recipe replace the refused ones (a type no run recorded before, so
                # no patch). The refused plan is only the planner's hint of where the order runs: kept
                # where it is still allowed and fits (the planner judges it), so a serving order stays put.
                state.planKey = None
                state.replanRequested = True
                state.retryDelaySeconds = self._backoff()
                self._refuse(
                    ConditionType.WORKLOAD_READY,
                    Refusal(
                        Reason.WORKLOAD_REFUSED,
                        f"{cause.message}; nothing was written, and the order is planned again from what the "
                        f"cluster says in {_duration(state.retryDelaySeconds)}",
                    ),
                )
                return None
            if isinstance(cause, ApplicationError) and cause.type in (Reason.WORKLOAD_REFUSED, Reason.HOST_NAME_TAKEN):
                # The API server's answer will not change by retrying: wait for an edit. (HostNameTaken: the
                # order's host is another's; a type no run recorded before, so no patch.)
                self._refuse(ConditionType.WORKLOAD_READY, Refusal(Reason(cause.type), cause.message))
                return None
            raise
        return applied

    async def _apply_and_probe(
        self,
        order: InferenceService,
        cls: InferenceServiceClass,
        plan: LaunchPlan,
        resolution: ModelResolution,
        endpoint_type: EndpointType,
    ) -> None:
        state = self._require_state()
        # A replica_ready heard from now on is about this apply's workload.
        state.replicaReady = False
        applied = await self._apply(order, cls, plan, resolution, endpoint_type)
        if applied is None:
            return
        state.applied = applied
        state.moveApplyPending = False
        # Once per divergence: the event says it when the class and the standing volume part ways.
        noted, state.settledRegionNoted = state.settledRegionNoted, applied.settledRegionKept
        if applied.settledRegionKept and not noted:
            await self._activity(
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
        rebuilding = applied.runtimeReason == Reason.WORKLOAD_REBUILDING
        serving = not rebuilding and state.everReady and state.healthy and applied.readyReplicas >= 1
        if applied.moving:
            # A move made before it breaks: the old replicas serve until the new ones are Ready; the
            # observer tells the order when the set's ready replicas change, and the next apply retires
            # the old ones. Looked at again on a timer too, in case a word is lost.
            self._cond(
                ConditionType.WORKLOAD_READY,
                True,
                Reason.WORKLOAD_MOVING,
                f"moving to {plan.deviceCount}x {plan.acceleratorProductName} ({plan.sharePercent}%): the new "
                f"replicas start there and the old ones serve until they are Ready",
            )
            state.retryDelaySeconds = MOVE_LOOK_AGAIN_SECONDS
        elif applied.moveStep == MoveStep.RETIRE:
            await self._activity(
                act.RECORD_EVENT,
                OrderEvent(
                    ref=state.ref,
                    reason=EventReason.MOVED,
                    message=f"moved to {plan.deviceCount}x {plan.acceleratorProductName} ({plan.sharePercent}%) "
                    f"before the old replicas went; "
                    + (
                        f"{applied.gpusWonBack:g} device(s) won back"
                        if applied.gpusWonBack > 0
                        # A consolidating move: as much of a device, beside other orders' shares.
                        else f"its share joined others on {', '.join(sorted(_places(plan)))}, so the device it "
                        "left can come free"
                    ),
                ),
                start_to_close_timeout=SHORT,
                retry_policy=K8S_RETRY,
            )
        if rebuilding:
            # A new placement: the replicas are made again, so the order does not serve until one loads.
            state.healthy = False
            message = f"the workload moves to its new placement; {resolution.servedName} loads again"
            self._cond(ConditionType.WORKLOAD_READY, False, Reason.WORKLOAD_REBUILDING, message)
            self._cond(ConditionType.READY, False, Reason.WORKLOAD_REBUILDING, message)
        elif not serving and state.trouble is not None:
            self._show_trouble(state.trouble)
        elif not serving:
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
        if not serving:
            await self._publish()
        self._step_done("apply")
        # Loading a model takes time in proportion to its size: the wait grows with the volume.
        wait = max(state.timings.serveWaitSeconds, plan.modelVolumeGiB * SERVE_SECONDS_PER_GIB)
        if serving:
            # A replica already serves: this is a health check, not a wait for a load. A failing API
            # is marked unhealthy after failureThreshold probe timeouts instead of holding the
            # reconcile, and the health signals queued behind it, for the whole serve wait.
            wait = min(wait, state.timings.failureThreshold * state.timings.probeTimeoutSeconds)
        if workflow.patched(FIRST_LOAD_PATCH):
            loaded = await self._load_then_probe(applied, wait)
            if loaded is None:
                return  # the order changed while it loaded: the next reconcile applies that
            result = loaded
        else:
            result = await self._activity(
                act.AWAIT_SERVING,
                self._probe_input().model_copy(update={"waitSeconds": wait}),
                result_type=ProbeResult,
                start_to_close_timeout=timedelta(seconds=wait + 60),
                heartbeat_timeout=timedelta(seconds=60),
                retry_policy=K8S_RETRY,
                summary="wait for the first probe",
            )
        self._step_done("probe" if "replica ready" in state.stepSeconds else "pods and probe")
        if result.workloadReady and state.trouble is not None and state.trouble.action != TroubleAction.WAIT:
            self._show_trouble(state.trouble)  # a replica serves; another is still in trouble
        elif result.workloadReady and not applied.moving:  # a move says so until it is over
            self._cond(ConditionType.WORKLOAD_READY, True, Reason.WORKLOAD_APPLIED, "a replica is ready")
        if result.ok:
            self._cond(ConditionType.READY, True, Reason.PROBE_SUCCEEDED, f"the API answers: {result.detail}")
            if applied.runtimeReason == Reason.WORKLOAD_REBUILDING:
                # Rebuilt and serving: the rebuild is over (it lingered until the next apply before).
                self._cond(
                    ConditionType.RUNTIME_CURRENT,
                    True,
                    Reason.RUNTIME_UP_TO_DATE,
                    f"the rebuilt workload serves on runtime release {plan.recipe.runtimeVersion}",
                )
            state.everReady = True
            state.healthy = True
            state.retryAttempt = 0
        elif state.everReady:
            self._set_health(False, result.detail, result.reason)
            state.retryDelaySeconds = self._backoff()
        elif state.trouble is not None and (
            not result.workloadReady
            or state.trouble.action == TroubleAction.WAIT
            or workflow.patched(TROUBLE_OVER_PROBE_PATCH)
        ):
            # No replica got ready and the cluster said why: that is the answer, not a health check.
            # A replica reported ready whose engine the cluster says still loads (a node agent that
            # says Ready before the engine does) is loading, too: the order says so and looks again.
            # One reported ready whose API is silent while the cluster names another trouble: that
            # trouble, and what it waits for (TROUBLE_OVER_PROBE_PATCH).
            self._show_trouble(state.trouble)
            if state.trouble.action == TroubleAction.WAIT:
                state.retryDelaySeconds = self._backoff()
        else:
            # A probe that knows why (an empty token: AuthTokenInvalid) names it; else HealthCheckFailed.
            self._cond(
                ConditionType.READY,
                False,
                result.reason or Reason.HEALTH_CHECK_FAILED,
                f"the API did not answer yet: {result.detail}",
            )
            state.retryDelaySeconds = self._backoff()

    async def _load_then_probe(self, applied: ApplyResult, wait: float) -> ProbeResult | None:
        """Wait for a ready replica without an activity, then probe the API briefly (FIRST_LOAD_PATCH).

        The wait is a condition on the ``replica_ready`` signal with ``wait`` seconds as its timer: a
        loading order holds no worker slot, and a delete (which cancels the reconcile) ends it at once.
        None when a change the next reconcile acts on (an edit, a deleted object) ends the wait first.
        """
        state = self._require_state()
        if applied.readyReplicas < 1 and not state.replicaReady:
            deadline = workflow.now().timestamp() + wait
            timeout = wait
            while True:
                if self._interrupting:
                    raise asyncio.CancelledError("the order is being deleted")
                try:
                    await workflow.wait_condition(
                        lambda: state.replicaReady or state.dirty or state.troublePending,
                        timeout=timedelta(seconds=timeout),
                        timeout_summary="a replica loads the model",
                    )
                except TimeoutError:
                    return ProbeResult(ok=False, workloadReady=False, detail=f"no replica got ready in {wait:.0f} s")
                if state.replicaReady:
                    break
                trouble = state.trouble
                if state.dirty or (trouble is not None and trouble.action != TroubleAction.WAIT):
                    return None  # the next reconcile, or the trouble (the main loop), comes first
                # The engine loads (said at once), or a trouble is over (its replica_ready comes next).
                if workflow.patched(TROUBLE_PATCH):
                    state.troublePending = False
                    if trouble is not None:
                        self._show_trouble(trouble)
                        await self._publish()
                timeout = deadline - workflow.now().timestamp()
                if timeout <= 0:
                    return ProbeResult(ok=False, workloadReady=False, detail=f"no replica got ready in {wait:.0f} s")
        self._step_done("replica ready")
        # A ready replica answers at once; the window only covers the Service catching up with it.
        result = await self._probe_serving("probe the API")
        return result.model_copy(update={"workloadReady": True})

    async def _probe_serving(self, summary: str) -> ProbeResult:
        """One short probe of the order's API, given failureThreshold * probeTimeoutSeconds to answer."""
        state = self._require_state()
        window = state.timings.failureThreshold * state.timings.probeTimeoutSeconds
        result: ProbeResult = await self._activity(
            act.PROBE_SERVING,
            self._probe_input().model_copy(update={"waitSeconds": window}),
            result_type=ProbeResult,
            start_to_close_timeout=timedelta(seconds=window + 60),
            heartbeat_timeout=timedelta(seconds=30),
            # Until it answers: it reads the order's Service and auth Secret, and an API server away for 3 s
            # failed the whole run (a retry policy only: the commands stay, no patch; docs/upgrade.md).
            retry_policy=K8S_RETRY,
            summary=summary,
        )
        return result

    async def _confirm_health(self) -> bool:
        """A ``health_changed`` signal confirmed by one probe of the order's endpoint (HEALTH_HINT_PATCH):
        Ready follows the probe's answer, whatever the report said. True when Ready changed."""
        state = self._require_state()
        window = state.timings.failureThreshold * state.timings.probeTimeoutSeconds
        if state.healthCheckedAt is not None:
            # One confirming probe a window at most: a flapping stream of signals is no hot loop.
            left = state.healthCheckedAt + window - workflow.now().timestamp()
            if left > 0:
                with contextlib.suppress(TimeoutError):
                    await workflow.wait_condition(
                        lambda: state.dirty or state.deleteRequested or state.deleting,
                        timeout=timedelta(seconds=left),
                        timeout_summary="next health check",
                    )
                if state.dirty or state.deleteRequested or state.deleting:
                    return False  # the reconcile (or the delete) comes first; the hint waits
        # Every signal heard until now is answered by this probe; one heard while it runs asks again.
        state.pendingHealth = None
        state.healthCheckedAt = workflow.now().timestamp()
        if state.applied is None or state.resolution is None:
            return False
        try:
            result = await self._probe_serving("confirm a health report")
        except ActivityError:
            return False  # the probe itself failed (not the API): nothing confirmed, Ready stays
        return self._set_health(result.ok, result.detail, result.reason)

    def _set_health(self, healthy: bool, detail: str, reason: str | None = None) -> bool:
        """Ready from a health verdict; True when it changed. ``reason``: the probe's named failure
        (AuthTokenInvalid) instead of ServiceUnhealthy."""
        state = self._require_state()
        if healthy == state.healthy:
            return False
        state.healthy = healthy
        if healthy:
            self._cond(ConditionType.READY, True, Reason.PROBE_SUCCEEDED, f"the API answers: {detail}")
        else:
            self._cond(
                ConditionType.READY,
                False,
                reason or Reason.SERVICE_UNHEALTHY,
                f"the API failed {state.timings.failureThreshold} health checks in a row: {detail}",
            )
        return True

    def _probe_input(self) -> ProbeInput:
        state = self._require_state()
        assert state.applied is not None
        assert state.resolution is not None
        return ProbeInput(
            ref=state.ref,
            endpointUrl=state.applied.endpoint.url or "",
            authSecretName=state.applied.authSecretName,
            servedName=state.resolution.servedName,
            timeoutSeconds=state.timings.probeTimeoutSeconds,
        )

    async def _still_gone(self) -> bool:
        """Whether the order is gone as the API server says (DELETE_CONFIRMED_PATCH); False: a run
        told so by hand, the order is reconciled again."""
        if not workflow.patched(DELETE_CONFIRMED_PATCH):
            return True
        snapshot = await self._read()
        if snapshot.order is None:
            return True
        await self._refuse_teardown("gone")
        return False

    async def _teardown(self) -> bool:
        """Publish Deleting, leave preemption, remove the finalizer: only for an order the API server
        says is being deleted (DELETE_CONFIRMED_PATCH). False: it is not, nothing was done."""
        state = self._require_state()
        if workflow.patched(DELETE_CONFIRMED_PATCH):
            order = (await self._read()).order
            if order is not None and not order.metadata.deletionTimestamp:
                await self._refuse_teardown("deleting")
                return False
        self._cond(ConditionType.READY, False, Reason.DELETING, "the order is being deleted")
        # The last word on the order before its finalizer goes.
        await self._publish()
        await self._report_leaving()
        await self._activity(
            act.FINALIZE_ORDER,
            state.ref,
            start_to_close_timeout=SHORT,
            retry_policy=K8S_RETRY,
            summary="remove finalizer",
        )
        return True

    async def _refuse_teardown(self, told: str) -> None:
        """The run was started saying the order is ``told`` (deleting, gone) and the API server says
        otherwise: say so on the order, then reconcile it from the cluster (the forged run heals)."""
        state = self._require_state()
        run = workflow.info().run_id
        workflow.logger.warning(f"run {run} was told the order is {told}; the API server says it is not")
        state.deleting = False
        state.gone = False
        state.dirty = True
        await self._activity(
            act.RECORD_EVENT,
            OrderEvent(
                ref=state.ref,
                reason=EventReason.DELETE_REFUSED,
                type="Warning",
                message=f"run {run} of this order's workflow was told the order is {told}, but the API server "
                "says it is not: nothing was deleted, and the order is reconciled from the cluster again",
            ),
            start_to_close_timeout=SHORT,
            retry_policy=K8S_RETRY,
        )

    # --------------------------------------------------------------- conditions

    def _on_trouble(self) -> bool:
        """A ``replica_trouble`` acted on (TROUBLE_PATCH). True when the status changed."""
        state = self._require_state()
        trouble = state.trouble
        if state.applied is None or state.plan is None:
            return False  # nothing applied yet: the trouble is not about this order's workload
        if trouble is None:
            state.troubleReplans, state.troubleReplanAt = 0, None
            shown = get_condition(state.conditions, ConditionType.WORKLOAD_READY)
            troubled = shown is not None and shown.reason in TROUBLE_REASONS
            if state.everReady and state.healthy:
                if not troubled:
                    return False
                self._cond(ConditionType.WORKLOAD_READY, True, Reason.WORKLOAD_APPLIED, "a replica is ready")
                return True
            # Not serving: the replicas are well again; the order looks at them (apply, probe) now —
            # whatever the status said (TROUBLE_END_PATCH: asked only where the status did not name it).
            if troubled or workflow.patched(TROUBLE_END_PATCH):
                state.dirty = True
            return False
        if trouble.action == TroubleAction.WAIT and state.everReady and state.healthy:
            return False  # a replica loads beside the serving ones: no news for the order
        if trouble.action != TroubleAction.REPLAN:
            state.troubleReplanAt = None
        if trouble.action == TroubleAction.REPLAN:
            if state.troubleReplanAt is None:
                first = 0.0 if trouble.reason == Reason.NODE_LOST else state.timings.retryBaseSeconds
                state.troubleReplanAt = workflow.now().timestamp() + first
        elif trouble.action == TroubleAction.WAIT_FOR_EDIT:
            # Retrying cannot help: no backoff timer; an edit (or the trouble's end) wakes the order.
            state.retryDelaySeconds = None
        self._show_trouble(trouble)
        return True

    def _show_trouble(self, trouble: ReplicaTrouble) -> None:
        """WorkloadReady (and Ready, before the order ever served) say the trouble and what happens next."""
        state = self._require_state()
        replan_in = self._trouble_replan_in()
        advice = trouble_advice(trouble.reason, replan_in if trouble.action == TroubleAction.REPLAN else None)
        message = f"{trouble.message}; {advice}"
        self._cond(ConditionType.WORKLOAD_READY, False, trouble.reason, message)
        if not state.everReady:
            self._cond(ConditionType.READY, False, trouble.reason, message)

    def _trouble_replan_in(self) -> float | None:
        """Seconds until a trouble's replan is due (<= 0: due), None when none is planned."""
        state = self._require_state()
        trouble = state.trouble
        if trouble is None or trouble.action != TroubleAction.REPLAN or state.troubleReplanAt is None:
            return None
        return state.troubleReplanAt - workflow.now().timestamp()

    def _trouble_replan_due(self) -> bool:
        left = self._trouble_replan_in()
        return left is not None and left <= 0

    def _schedule_trouble_replan(self) -> None:
        """The next replan for the same trouble, should it stand: retryBaseSeconds doubling up to
        replanBackoffMaxSeconds (a trouble that moving does not cure is no hot loop)."""
        state = self._require_state()
        timings = state.timings
        delay = float(min(timings.retryBaseSeconds * (2**state.troubleReplans), timings.replanBackoffMaxSeconds))
        state.troubleReplans += 1
        state.troubleReplanAt = workflow.now().timestamp() + delay

    def _wait_for_planner(self, err: ActivityError) -> None:
        """Planned=False PlannerUnavailable with what failed (the activity's error text: the client never
        puts a token in one), and a plan tried again on a short backoff."""
        state = self._require_state()
        cause = err.cause
        what = f"{cause.type}: {cause.message}" if isinstance(cause, ApplicationError) else str(cause or err)
        delay = min(PLANNER_RETRY_BASE_SECONDS * (2**state.retryAttempt), PLANNER_RETRY_MAX_SECONDS)
        state.retryAttempt += 1
        message = (
            f"waiting for the planner service, which did not answer ({what[:300]}); planning again in {delay:.0f} s"
        )
        self._refuse(ConditionType.PLANNED, Refusal(Reason.PLANNER_UNAVAILABLE, message))
        state.retryDelaySeconds = delay

    def _step_done(self, step: str) -> None:
        state = self._require_state()
        now = workflow.now().timestamp()
        if state.stepMark is not None:
            state.stepSeconds[step] = round(state.stepSeconds.get(step, 0.0) + now - state.stepMark, 3)
        state.stepMark = now

    def _replan_held(self, key: str, requested: bool) -> float | None:
        """Seconds left of a refused replan's backoff for this plan key (None: ask the planner now)."""
        state = self._require_state()
        if requested or state.replanHoldKey != key or state.replanNotBefore is None:
            return None
        left = state.replanNotBefore - workflow.now().timestamp()
        return left if left > 0 else None

    def _hold_replan(self, key: str, refusal: Refusal) -> float:
        """The next backoff of a serving order's refused replan (REPLAN_BACKOFF_PATCH); the Planned
        condition says when the planner is asked again."""
        state = self._require_state()
        if state.replanHoldKey != key:
            state.replanHoldKey, state.replanAttempt = key, 0
        timings = state.timings
        delay = float(min(timings.retryBaseSeconds * (2**state.replanAttempt), timings.replanBackoffMaxSeconds))
        state.replanAttempt += 1
        state.replanNotBefore = workflow.now().timestamp() + delay
        self._cond(
            ConditionType.PLANNED,
            True,
            Reason.LAUNCH_PLAN_IN_FORCE,
            f"runs on the launch plan it holds; recomputing it did not succeed: {refusal.reason}: "
            f"{refusal.message}; asked again in {_duration(delay)} (or at once on an edit or a replan)",
        )
        return delay

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
        message = refusal.message
        if (
            state.everReady
            and state.applied is not None
            and type_
            in (
                ConditionType.CLASS_RESOLVED,
                ConditionType.MODEL_RESOLVED,
            )
        ):
            # Its class (or the class's policy) no longer admits a serving order: nothing is torn down.
            message += (
                "; the order keeps serving on the workload it runs, unchanged until this is resolved "
                "(delete the order to stop it)"
            )
        self._cond(type_, False, refusal.reason, message)
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
        await self._activity(
            act.PUBLISH_STATUS,
            StatusUpdate(
                ref=state.ref,
                phase=phase,
                reason=reason,
                observedGeneration=state.observedGeneration or None,
                conditions=published_conditions(state.conditions),
                endpoint=applied.endpoint if applied else None,
                authSecretName=applied.authSecretName if applied else None,
                endpointType=state.endpointType,
                constraints=applied.constraints if applied else None,
                resolved=resolved,
                seenModuleDisabled=state.seenModuleDisabled,
            ),
            start_to_close_timeout=SHORT,
            retry_policy=K8S_RETRY,
            summary=f"status {phase}" + (f" ({reason})" if reason else ""),
        )
        # Written over the disable's status: a later disable's must again be read before it is replaced.
        state.seenModuleDisabled = False

    def _show(self, run_generation: int | None = None) -> None:
        """Search attributes and the Markdown details panel: the Temporal UI is the progress view."""
        state = self._require_state()
        device = state.plan.deviceClass if state.plan else None
        workflow.upsert_search_attributes(
            order_search_attributes(
                state.ref, state.className, state.phase, state.reason, device, state.release, run_generation
            )
        )
        workflow.set_current_details(details_markdown(state))
