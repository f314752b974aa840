"""What the observer (the watch process) tells an order's workflow, and how it names that workflow.

The observer watches Kubernetes and probes serving orders; an order's workflow is woken only by a
change it acts on. These are the payloads of those signals and the names both sides agree on.
Secrets never travel here: a probe's detail says what answered, never with which token.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

# The order workflow's type. Version 2 is the level-triggered one (observation outside the workflow,
# no activity outlives a step). A running order workflow of a legacy type is moved onto this one by
# the observer's resync: it is terminated and started again as this type, its state rebuilt from
# Kubernetes (the order, its status and what it owns).
ORDER_WORKFLOW_TYPE = "OrderWorkflowV2"
LEGACY_ORDER_WORKFLOW_TYPES: tuple[str, ...] = ("OrderWorkflow",)


class OrderSignal:
    """Signal names of the order workflow (one home: the workflow's handlers and the observer)."""

    SPEC_CHANGED = "spec_changed"  # arg: the order's metadata.generation
    CLASS_CHANGED = "class_changed"  # arg: the class's metadata.generation (spec edits only)
    OBSERVED = "observed"  # arg: ObservedChange — an owned object deleted/changed, replicas, a model appeared
    HEALTH_CHANGED = "health_changed"  # arg: HealthReport — a flip, never every probe
    SCALING_CHANGED = "scaling_changed"  # arg: ScalingObservation — the HPA decided something new
    SETTINGS_CHANGED = "settings_changed"  # arg: the release fingerprint now in force
    DELETE = "delete"  # no arg; obeyed only once the workflow itself reads a deletionTimestamp
    REPLAN = "replan"  # no arg (also an update with a validator)
    # arg: the StatefulSet's readyReplicas — its first replica got ready while the order loads (the
    # workflow waits for this instead of holding an activity; it then probes the API once, briefly)
    REPLICA_READY = "replica_ready"
    # no arg: the observer's repack (observer.repack) asks a serving order to look for a place that takes
    # less of a device, planned beside the one it holds and moved to before the old one goes
    MOVE = "move"


class _Payload(BaseModel):
    # A workflow payload (input, signal, update, activity argument or result, state): it drops fields it
    # does not know instead of refusing them, so a release rolled back to reads what a later release
    # wrote (docs/upgrade.md). Users' input is refused by the CRD schemas, not here.
    model_config = ConfigDict(extra="ignore")


class ObservedChange(_Payload):
    """Something the observer saw that the order's next reconcile must act on."""

    # One line for the Temporal UI and the logs: "StatefulSet support/chat deleted".
    what: str
    # The kind of the object that changed (StatefulSet, Service, Pod, Model, ...).
    kind: str = ""


class HealthReport(_Payload):
    """The observer's verdict on a serving order's API after a flip (failureThreshold in a row, or one success)."""

    healthy: bool
    detail: str = ""
    # Failures in a row that led to an unhealthy verdict (0 for a healthy one).
    failures: int = Field(default=0, ge=0)
