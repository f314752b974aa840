"""An order's membership in the preemption of its device class (part of the order workflow).

An autoscaled order reports where it stands (the HPA's decisions, as the observer saw them) to the
preemption workflow of its device class (``workflows/preemption.py``), which answers with two
signals: ``set_replica_ceiling`` (a donor's lowered maxReplicas, re-applied at once and kept in the
state) and ``scaling_blocked`` (ScalingHealthy=False/ScaleUpBlocked, phase Degraded while it serves).
"""

from __future__ import annotations

from abc import abstractmethod
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from inference_api.payloads import ApplyInput, ApplyResult, ModelResolution, OrderEvent, OrderRef, OrderSnapshot
    from inference_api.plan import LaunchPlan
    from inference_api.preemption import MemberReport, ScalingObservation
    from inference_api.reasons import EventReason
    from inference_api.types import (
        BUNDLED_CLASS_NAME,
        ConditionType,
        EndpointType,
        InferenceService,
        InferenceServiceClass,
    )
    from planner.scaling import scaling_health
    from workflows import activity_names as act
    from workflows.order_state import OrderState, applied_ceiling
    from workflows.retry_policies import K8S_RETRY as K8S_RETRY  # the order workflow imports it from here
    from workflows.status import set_condition

SHORT = timedelta(seconds=30)
# Short: a worker killed mid-apply is noticed by this timeout, and the apply is idempotent.
APPLY_TIMEOUT = timedelta(seconds=45)

# A ``set_replica_ceiling`` can be sent by hand: the apply honours only the ceiling the preemption
# workflow's ledger holds (activities/trusted_apply.py), and the re-apply's event now says what the
# apply applied — CapacityPreempted or CapacityRestored only when the applied maxReplicas moved — with
# a refused apply (WorkloadRefused) a condition, not a failed run. Patched: runs recorded before wrote
# the event from the signal's value and let a refusal fail the workflow task.
REAPPLY_PATCH = "reapply-follows-applied-ceiling"


class PreemptionMembership:
    """Scaling and preemption steps of the order workflow; the workflow class mixes this in."""

    @abstractmethod
    def _require_state(self) -> OrderState: ...

    @abstractmethod
    async def _publish(self) -> None: ...

    @abstractmethod
    async def _read(self) -> OrderSnapshot: ...

    @abstractmethod
    async def _apply(
        self,
        order: InferenceService,
        cls: InferenceServiceClass,
        plan: LaunchPlan,
        resolution: ModelResolution,
        endpoint_type: EndpointType,
    ) -> ApplyResult | None: ...

    @abstractmethod
    def _cond(self, type_: ConditionType, ok: bool, reason: str, message: str) -> None: ...

    def _ceiling_changed(self, ceiling: int | None) -> None:
        state = self._require_state()
        if ceiling is not None:
            ceiling = max(1, ceiling)
        if ceiling == state.replicaCeiling:
            return
        state.replicaCeiling = ceiling
        if state.applied is not None and not state.deleting:
            state.reapplyPending = True

    def _blocked_changed(self, reason: str | None) -> None:
        state = self._require_state()
        if reason == state.scalingBlocked:
            return
        state.scalingBlocked = reason
        self._refresh_scaling()
        state.publishPending = True

    async def _on_scaling(self, observation: ScalingObservation) -> None:
        state = self._require_state()
        if not (state.scalingProfile.autoscaled and state.plan is not None and state.applied is not None):
            return
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
        verdict = scaling_health(state.scaling, state.scalingBlocked, applied_ceiling(state))
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
        if state.plan is None or state.className == BUNDLED_CLASS_NAME:
            return  # the bundled default-llm stays out of background preemption (phase 2.4, step 6)
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
            limited=observation.wants_above_bound,
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
        snapshot = await self._read()
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
            or state.heldSpec is None
            or (order.metadata.generation or 0) > state.observedGeneration
        ):
            # Something else changed too: a full reconcile applies the ceiling with it.
            state.dirty = True
            return
        if workflow.patched(REAPPLY_PATCH):
            held = order.model_copy(update={"spec": state.heldSpec})
            await self._reapply_checked(held, cls, state.plan, state.resolution, state.endpointType)
            return
        state.applied = await workflow.execute_activity(
            act.APPLY_WORKLOAD,
            ApplyInput(
                ref=state.ref,
                order=order.model_copy(update={"spec": state.heldSpec}),
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
        event = capacity_event(state.ref, state.replicaCeiling, state.plan.deviceClass)
        await workflow.execute_activity(act.RECORD_EVENT, event, start_to_close_timeout=SHORT, retry_policy=K8S_RETRY)
        self._refresh_scaling()

    async def _reapply_checked(
        self,
        order: InferenceService,
        cls: InferenceServiceClass,
        plan: LaunchPlan,
        resolution: ModelResolution,
        endpoint_type: EndpointType,
    ) -> None:
        """The re-apply of REAPPLY_PATCH: the workflow's own apply step (a refusal is WorkloadRefused),
        and an event only when the maxReplicas the apply applied moved."""
        state = self._require_state()
        before = applied_ceiling(state)
        applied = await self._apply(order, cls, plan, resolution, endpoint_type)
        if applied is None:
            return  # refused: the condition says why, the workload stands as it was
        state.applied = applied
        self._cond(
            ConditionType.RUNTIME_CURRENT,
            applied.runtimeCurrent,
            applied.runtimeReason,
            applied.runtimeMessage or plan.recipe.runtimeVersion,
        )
        after = applied_ceiling(state)
        if after != before:
            event = capacity_event(state.ref, after, plan.deviceClass)
            await workflow.execute_activity(
                act.RECORD_EVENT, event, start_to_close_timeout=SHORT, retry_policy=K8S_RETRY
            )
        self._refresh_scaling()


def capacity_event(ref: OrderRef, ceiling: int | None, device_class: str) -> OrderEvent:
    """The Event of a donor's ceiling: lowered to ``ceiling`` (CapacityPreempted), or lifted (None)."""
    if ceiling is not None:
        return OrderEvent(
            ref=ref,
            reason=EventReason.CAPACITY_PREEMPTED,
            message=f"maxReplicas lowered to {ceiling} to give capacity on device class "
            f"{device_class} to higher-priority orders",
        )
    return OrderEvent(
        ref=ref,
        reason=EventReason.CAPACITY_RESTORED,
        message="the class's maxReplicas applies again: capacity taken by preemption was given back",
    )
