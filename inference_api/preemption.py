"""Payloads of capacity preemption: the order's autoscaler as observed, and what an order reports
to the preemption workflow of its device class.

Plain data, no I/O. The order workflow's scaling watch returns a :class:`ScalingObservation` when
the autoscaler's state changes; the order turns it into a :class:`MemberReport` for the
preemption workflow (``workflows/preemption.py``), whose pure decisions live in
``planner/preemption.py``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from inference_api.payloads import OrderRef

# HPA condition types (autoscaling/v2) and the reasons this module reads.
ABLE_TO_SCALE = "AbleToScale"
SCALING_ACTIVE = "ScalingActive"
SCALING_LIMITED = "ScalingLimited"
TOO_MANY_REPLICAS = "TooManyReplicas"
TOO_FEW_REPLICAS = "TooFewReplicas"


def preemption_workflow_id(task_queue: str, device_class: str) -> str:
    """One preemption workflow per device class (and per task queue: one deployment of the module)."""
    return f"preemption/{task_queue}/{device_class}"


class _Payload(BaseModel):
    # A workflow payload (input, signal, update, activity argument or result, state): it drops fields it
    # does not know instead of refusing them, so a release rolled back to reads what a later release
    # wrote (docs/upgrade.md). Users' input is refused by the CRD schemas, not here.
    model_config = ConfigDict(extra="ignore")


class HpaCondition(_Payload):
    type: str
    status: str
    reason: str = ""
    message: str = ""


class ScalingObservation(_Payload):
    """The autoscaler of an order and its replicas, as read from the cluster."""

    autoscalerFound: bool = True
    # HPA status (desiredReplicas is clamped by the HPA to its own min/max).
    desiredReplicas: int = 0
    currentReplicas: int = 0
    # HPA spec: the effective bounds, a preemption ceiling included.
    minReplicas: int = 0
    maxReplicas: int = 0
    # Replicas bound to a node (they hold devices) and replicas the scheduler cannot place.
    placedReplicas: int = 0
    unschedulableReplicas: int = 0
    conditions: list[HpaCondition] = Field(default_factory=list)
    # Value of the PriorityClass the order's pods run with (0 without one, as in Kubernetes).
    priority: int = 0

    def condition(self, type_: str) -> HpaCondition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    def signature(self) -> tuple[object, ...]:
        """What counts as a change: numbers and condition (type, status, reason), not messages —
        an HPA rewrites its messages with live values, which would make every poll a change."""
        return (
            self.autoscalerFound,
            self.desiredReplicas,
            self.currentReplicas,
            self.minReplicas,
            self.maxReplicas,
            self.placedReplicas,
            self.unschedulableReplicas,
            tuple(sorted((c.type, c.status, c.reason) for c in self.conditions)),
            self.priority,
        )

    @property
    def wants_above_bound(self) -> bool:
        """The HPA would go higher than its maxReplicas (ScalingLimited=True, TooManyReplicas)."""
        limited = self.condition(SCALING_LIMITED)
        return limited is not None and limited.status == "True" and limited.reason == TOO_MANY_REPLICAS


class MemberReport(_Payload):
    """One order's standing on its device class, signalled to that class's preemption workflow.

    ``sequence`` grows with every report of one order workflow, so a late or repeated report is
    dropped. ``leaving``: the order was deleted, moved to another device class or stopped scaling.
    """

    ref: OrderRef
    workflowId: str
    deviceClass: str
    sequence: int
    leaving: bool = False
    priority: int = 0
    priorityClassName: str | None = None
    # The class's bounds (not the lowered ceiling).
    minReplicas: int = 1
    maxReplicas: int = 1
    # Capacity one replica holds: share percent x device count.
    unit: int = 100
    desired: int = 0
    placed: int = 0
    unschedulable: int = 0
    # The autoscaler wants more than its (possibly lowered) maxReplicas.
    limited: bool = False


class ReplicaCount(_Payload):
    namespace: str
    name: str
    value: int


class PreemptionMetrics(_Payload):
    """Absolute values of one device class's series: setting them twice changes nothing."""

    deviceClass: str
    preemptions: list[ReplicaCount] = Field(default_factory=list)
    held: list[ReplicaCount] = Field(default_factory=list)
