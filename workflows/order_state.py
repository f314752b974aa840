"""The order workflow's state: one object, which continue-as-new carries.

Everything here can be rebuilt from Kubernetes (the order, its class, its status and what it owns):
a workflow started afresh for a serving order — a lost Temporal database, or a run moved onto a new
workflow version — re-reads them and converges on the same objects, the same plan (plans are
stable) and the same endpoint token (the auth Secret is never rewritten).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from inference_api.observation import HealthReport
from inference_api.payloads import ApplyResult, ModelResolution, OrderRef, OrderTimings
from inference_api.plan import LaunchPlan
from inference_api.preemption import MemberReport, ScalingObservation
from inference_api.types import Condition, EndpointType, InferenceServiceSpec, Phase

__all__ = [
    "REPLICA_TROUBLE",
    "OrderState",
    "OrderTimings",
    "ReplanOutcome",
    "ReplicaTrouble",
    "ScalingProfile",
    "TroubleAction",
]

# The observer's signal of a failure the cluster reports about the order's replicas (arg: ReplicaTrouble).
REPLICA_TROUBLE = "replica_trouble"


class TroubleAction:
    """What the order does about a ReplicaTrouble."""

    # Moving helps (the node is lost, the claim cannot be allocated where the plan put it): plan again.
    REPLAN = "Replan"
    # Retrying cannot help until someone changes something (the order, its class, the quota, the
    # image, the model's repository): the order says which and waits; the cluster retries by itself.
    WAIT_FOR_EDIT = "WaitForEdit"
    # Progress, not a failure (the engine loads its model): the order says so and waits.
    WAIT = "Wait"


class ReplicaTrouble(BaseModel):
    """What the cluster says is wrong with the order's replicas, as the observer read it (its own
    message, cut to fit, never a secret). ``reason`` empty: nothing is wrong any more."""

    model_config = ConfigDict(extra="ignore")
    reason: str = ""
    message: str = ""
    action: str = TroubleAction.WAIT
    # The Pod, Node or StatefulSet the message is about (namespace/name or name).
    subject: str = ""

    @property
    def cleared(self) -> bool:
        return not self.reason


class ScalingProfile(BaseModel):
    """What the class says about scaling, kept from the last reconcile."""

    model_config = ConfigDict(extra="ignore")
    autoscaled: bool = False
    minReplicas: int = 1
    maxReplicas: int = 1
    priorityClassName: str | None = None


class OrderState(BaseModel):
    model_config = ConfigDict(extra="ignore")
    ref: OrderRef
    # Read at every reconcile (the settings and release in force then), never frozen at start.
    timings: OrderTimings = Field(default_factory=OrderTimings)
    release: str | None = None
    generation: int = 0
    observedGeneration: int = 0
    classGeneration: int = 0
    # The run has read its class, or was told of it (class_changed): until then any cached class answers
    # its read (OrderRead.firstClassRead), after it only the generation above.
    classSeen: bool = False
    dirty: bool = True
    # A `delete` signal is a request: obeyed once a read of the order shows its deletionTimestamp.
    deleteRequested: bool = False
    deleting: bool = False
    gone: bool = False
    replanRequested: bool = False
    # The observer's repack asked for a move made before it breaks (OrderSignal.MOVE).
    moveRequested: bool = False
    # Where the repack's consolidating move goes (``node/device``); None: a smaller place, anywhere.
    moveTarget: str | None = None
    # A move was planned: the next apply surges onto it (ApplyInput.makeBeforeBreak).
    moveApplyPending: bool = False
    plan: LaunchPlan | None = None
    # What the plan in force was computed for (order generation, class generation, release, model):
    # a reconcile replans only when it changed, or on request.
    planKey: str | None = None
    replanCount: int = 0
    # The spec the plan in force was made for: a refused replan keeps running it (LaunchPlanInForce).
    heldSpec: InferenceServiceSpec | None = None
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
    # A serving order's refused replan (REPLAN_BACKOFF_PATCH): the plan key refused, how many times in a
    # row, and not asked again before this workflow time (seconds) unless by hand or a new edit.
    replanHoldKey: str | None = None
    replanAttempt: int = 0
    replanNotBefore: float | None = None
    className: str | None = None
    # Reconciles completed; reconciles started (numbered); the number of the last one completed: a
    # replan asked now is answered by the first reconcile that starts after it.
    reconciles: int = 0
    reconcilesStarted: int = 0
    lastReconcileCompleted: int = 0
    # Seconds each step of the last reconcile took (validation … probe): where time-to-Ready went.
    stepSeconds: dict[str, float] = Field(default_factory=dict)
    stepMark: float | None = None
    # The class's modelStorageClassName and the standing volume differ (SettledRegionKept, told once).
    settledRegionNoted: bool = False
    # What the observer said last, for the Temporal UI.
    lastObserved: str | None = None
    # From the observer, acted on by the main loop (each needs activities).
    pendingHealth: HealthReport | None = None
    # When (workflow time, seconds) the last health report was confirmed by a probe (HEALTH_HINT_PATCH).
    healthCheckedAt: float | None = None
    pendingScaling: ScalingObservation | None = None
    # Capacity preemption: the class's scaling, the HPA as last seen, what the preemption
    # workflow of the device class said, and the last report sent to it.
    scalingProfile: ScalingProfile = Field(default_factory=ScalingProfile)
    scaling: ScalingObservation | None = None
    replicaCeiling: int | None = None
    scalingBlocked: str | None = None
    lastReport: MemberReport | None = None
    reapplyPending: bool = False
    publishPending: bool = False
    # The order read last said ModuleDisabled (worker/disable.py): the run's status writes may replace it.
    seenModuleDisabled: bool = False
    # The observer saw a replica of the applied workload get ready (replica_ready) since the last apply:
    # the first load's wait (no activity, a timer) ends and the API is probed.
    replicaReady: bool = False
    # The last ReplicaTrouble the observer told (None: none, or cleared); a new one waits to be acted on.
    trouble: ReplicaTrouble | None = None
    troublePending: bool = False
    # Replans a trouble asked for in a row (its backoff), and not before this workflow time (seconds).
    troubleReplans: int = 0
    troubleReplanAt: float | None = None


class ReplanOutcome(BaseModel):
    model_config = ConfigDict(extra="ignore")
    planned: bool
    reason: str
    message: str
    replanCount: int


def applied_ceiling(state: OrderState) -> int | None:
    """The lowered maxReplicas the last apply actually applied (None: the class's own bounds).

    Read off what the apply returned (``status.constraints``), never off the workflow's
    ``replicaCeiling``, which a forged signal can set."""
    applied = state.applied
    if applied is None or applied.constraints.maxReplicas is None:
        return None
    high = applied.constraints.maxReplicas
    return high if high < state.scalingProfile.maxReplicas else None
