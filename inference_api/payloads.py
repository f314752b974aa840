"""Payloads between the order workflow and its activities.

Secrets never travel here: an auth token or an HF token is named by its Secret, never carried.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from inference_api.catalog_types import ModelFacts
from inference_api.plan import LaunchPlan
from inference_api.reasons import Reason
from inference_api.types import (
    Condition,
    ConstraintsStatus,
    EndpointStatus,
    EndpointType,
    InferenceService,
    InferenceServiceClass,
    ModelScope,
    Phase,
    ResolvedStatus,
)


class _Payload(BaseModel):
    # A workflow payload (input, signal, update, activity argument or result, state): it drops fields it
    # does not know instead of refusing them, so a release rolled back to reads what a later release
    # wrote (docs/upgrade.md). Users' input is refused by the CRD schemas, not here.
    model_config = ConfigDict(extra="ignore")


class OrderRef(_Payload):
    namespace: str
    name: str
    uid: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class OrderRead(OrderRef):
    """The order to read (``read_order``), and what the run already knows of it: a read served from the
    worker's informer cache (``activities.order_cache``) must be at least this fresh, else it is a GET.

    ``generation``: the newest spec generation the run was told of (the cached order must be at least
    it); ``classGeneration``: the class's generation the run holds or was told of (the cached class must
    be exactly it; 0 or None: unknown, a GET) — unless ``firstClassRead``: the run has neither read its
    class nor been told of it, so any cached class answers (an edit the cache has not seen yet is
    signalled to the run after it, which reads again); ``deleting``: the run was told the order is being
    deleted (a cached order that does not say so is behind). None and False (a run of an earlier
    release): GET."""

    generation: int | None = None
    classGeneration: int | None = None
    firstClassRead: bool = False
    deleting: bool = False


def order_workflow_id(namespace: str, name: str, uid: str) -> str:
    # The uid keeps a delete-and-recreate from ever signalling the old run.
    return f"order/{namespace}/{name}/{uid}"


class OrderTimings(_Payload):
    """The module settings an order's workflow acts on, read at every reconcile (never frozen)."""

    healthIntervalSeconds: float = 600
    failureThreshold: int = 3
    probeTimeoutSeconds: float = 5
    # How long the first probe waits for the workload to load the model.
    serveWaitSeconds: float = 1800
    retryBaseSeconds: float = 15
    retryMaxSeconds: float = 600
    # A serving order's refused replan (capacity) is asked again after retryBaseSeconds, doubling up to
    # this: at most a few plans in its first hour, then one an hour, health checks and changes between.
    replanBackoffMaxSeconds: float = 3600
    catalogEnabled: bool = True
    # History length past which the run continues as new (the server also suggests it).
    maxHistoryEvents: int = 2000
    # How long a serving order sleeps before it looks at its objects once more by itself (the
    # observer wakes it sooner on any change it acts on): one long timer per serving order.
    resyncSeconds: float = 24 * 3600


class OrderSnapshot(_Payload):
    """The order and its class as read now; order is None when it is gone.

    ``timings`` and ``release`` are the settings and release fingerprint in force when it was read.
    """

    order: InferenceService | None = None
    cls: InferenceServiceClass | None = None
    timings: OrderTimings | None = None
    release: str | None = None


class ModelResolution(_Payload):
    facts: ModelFacts | None = None
    scope: ModelScope | None = None
    servedName: str
    # Where the model fetcher downloads from (HF repo or the catalog's source).
    source: str | None = None
    refusal: Reason | None = None
    message: str = ""
    retryAfterSeconds: float | None = None


class PlanInput(_Payload):
    ref: OrderRef
    order: InferenceService
    cls: InferenceServiceClass
    facts: ModelFacts | None
    servedName: str
    endpointType: EndpointType
    # The plan the order already holds: its own allocation is not counted against it.
    current: LaunchPlan | None = None
    # Where the fetcher downloads from (the resolution's source: a catalog's hf://repo@revision).
    source: str | None = None
    # The plan is made again for the spec the current plan was made for, not asked by hand (a class or
    # release change, a trouble, a move): the model's commit stays the current plan's.
    keepRevision: bool = False
    # A move made before it breaks (the observer's repack): planned beside what the order holds.
    besideCurrent: bool = False
    # A consolidating move's target (``node/device``): the planner ranks it first among equal places.
    preferDevice: str | None = None


class ApplyInput(_Payload):
    ref: OrderRef
    order: InferenceService
    cls: InferenceServiceClass
    plan: LaunchPlan
    resolution: ModelResolution
    endpointType: EndpointType
    # A donor's lowered maxReplicas, set by the preemption workflow; None: the class's bounds.
    replicaCeiling: int | None = None
    # The plan is a move made before it breaks: a serving workload surges onto it (builders/move.py),
    # when its class's update policy allows; the apply checks that, and the set's state, itself.
    makeBeforeBreak: bool = False


class MoveStep(StrEnum):
    """The step of a move made before it breaks an apply wrote (activities/builders/move.py)."""

    NONE = "None"  # no move: n replicas from the first ordinal the set has
    SURGE = "Surge"  # a move starts: 2n replicas, the new template for the n new ones only
    HOLD = "Hold"  # a move under way: the surge kept while the new replicas load
    RETIRE = "Retire"  # the new replicas are ready: the old ones go
    WITHDRAW = "Withdraw"  # a move that cannot finish: n replicas again, rolled (break, then make)


class ApplyResult(_Payload):
    endpoint: EndpointStatus
    authSecretName: str | None = None
    constraints: ConstraintsStatus
    readyReplicas: int = 0
    desiredReplicas: int = 1
    settledRegionKept: bool = False
    # The SettledRegionKept event's message (what was kept, how to move), set with settledRegionKept.
    settledRegionKeptMessage: str | None = None
    # RuntimeCurrent as the apply step judged it from the replicas' recorded runtime releases.
    runtimeCurrent: bool = True
    runtimeReason: str = "RuntimeUpToDate"
    runtimeMessage: str = ""
    # A move made before it breaks is under way: the new replicas start beside the old ones, which serve.
    moving: bool = False
    # The move step this apply wrote (builders/move.MoveStep) and, on Retire, the devices won back.
    moveStep: str = MoveStep.NONE.value
    gpusWonBack: float = 0.0


class ProbeInput(_Payload):
    ref: OrderRef
    endpointUrl: str
    authSecretName: str | None = None
    servedName: str
    timeoutSeconds: float = 5
    # How long the first probe may wait for a replica to load the model (scaled to its size).
    waitSeconds: float | None = None


class ProbeResult(_Payload):
    ok: bool
    detail: str = ""
    # A replica is Ready in Kubernetes terms (the API may still fail its probe).
    workloadReady: bool = True
    # A named failure (a Reason) where the probe knows why, e.g. AuthTokenInvalid; None: HealthCheckFailed.
    reason: str | None = None


class StatusUpdate(_Payload):
    ref: OrderRef
    phase: Phase
    reason: str | None = None
    observedGeneration: int | None = None
    conditions: list[Condition] = Field(default_factory=list)
    endpoint: EndpointStatus | None = None
    authSecretName: str | None = None
    endpointType: EndpointType | None = None
    constraints: ConstraintsStatus | None = None
    resolved: ResolvedStatus | None = None
    # Not written: whether the run read the order saying ModuleDisabled since its last read before. A
    # disabled order's status is replaced only by a run that has seen it (worker/disable.py): a write the
    # run decided before the disable (an activity scheduled then, run after the enable) is stale.
    seenModuleDisabled: bool = False


# StatusUpdate's fields that are the run's, never written on the order.
STATUS_UPDATE_NOT_WRITTEN = frozenset({"ref", "endpointType", "seenModuleDisabled"})


class OrderEvent(_Payload):
    ref: OrderRef
    reason: str
    message: str
    type: str = "Normal"
