"""Stable condition reasons: one enum, each value answered on the FAQ page (docs/faq.md)."""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    # Refusals and waits of the order matrix (user guide "When an order does not become ready").
    CLASS_NOT_FOUND = "ClassNotFound"
    CLASS_NOT_READY = "ClassNotReady"
    NAMESPACE_NOT_ALLOWED = "NamespaceNotAllowed"
    AUTH_SECRET_NOT_FOUND = "AuthSecretNotFound"
    MODEL_NOT_FOUND = "ModelNotFound"
    MODEL_NOT_READY = "ModelNotReady"
    ENDPOINT_TYPE_POLICY_CONFLICT = "EndpointTypePolicyConflict"
    FORMAT_NOT_ALLOWED = "FormatNotAllowed"
    PARAMETER_COUNT_NOT_ALLOWED = "ParameterCountNotAllowed"
    CATALOG_DISABLED = "CatalogDisabled"
    # catalog.mode is Enabled, but the ai-models module is not installed: the API server serves no Model
    # and ClusterModel kinds. The order looks again (aiModels.catalogLookup.notReadyRequeueSeconds) and
    # proceeds once ai-models is installed.
    CATALOG_NOT_INSTALLED = "CatalogNotInstalled"
    # The catalog model's source is not one the model fetcher downloads (not a Hugging Face repository).
    UNSUPPORTED_MODEL_SOURCE = "UnsupportedModelSource"
    # Planner refusals.
    NO_CAPACITY = "NoCapacity"
    NO_ACCELERATOR_WITH_ENOUGH_MEMORY = "NoAcceleratorWithEnoughMemory"
    QUANTIZATION_MISMATCH = "QuantizationMismatch"
    NO_COMPATIBLE_RUNTIME_AVAILABLE = "NoCompatibleRuntimeAvailable"
    RESOURCE_CLAIM_EXHAUSTED = "ResourceClaimExhausted"
    PLACEMENT_UNDECIDABLE = "PlacementUndecidable"
    # Devices have room, but no node that holds them can take the replica's pod (CPU, memory, pods,
    # taints, cordoned): the scheduler would leave it Pending.
    NO_SCHEDULABLE_NODE = "NoSchedulableNode"
    # The planner service did not answer (down, unreachable, refusing the worker's token): retried.
    PLANNER_UNAVAILABLE = "PlannerUnavailable"
    # Serving life.
    SCALE_UP_BLOCKED = "ScaleUpBlocked"
    # The autoscaler cannot read or write the workload's scale (ScalingHealthy=False).
    AUTOSCALER_UNABLE_TO_SCALE = "AutoscalerUnableToScale"
    # The autoscaler has no metrics to judge load by, or has not reported yet (ScalingHealthy=Unknown).
    AUTOSCALER_METRICS_UNAVAILABLE = "AutoscalerMetricsUnavailable"
    AUTOSCALER_NOT_OBSERVED = "AutoscalerNotObserved"
    LAUNCH_PLAN_IN_FORCE = "LaunchPlanInForce"
    HEALTH_CHECK_FAILED = "HealthCheckFailed"
    # The class asks for a token and the order's auth Secret holds none that can be used (empty, no
    # token key, not text): the endpoint refuses every request, and the order is not Ready.
    AUTH_TOKEN_INVALID = "AuthTokenInvalid"
    SERVICE_UNHEALTHY = "ServiceUnhealthy"
    REPLICAS_HELD_ON_PREVIOUS_RUNTIME = "ReplicasHeldOnPreviousRuntime"
    WORKLOAD_REBUILDING = "WorkloadRebuilding"
    # A move made before it breaks: new replicas start on the new placement while the old ones serve.
    WORKLOAD_MOVING = "WorkloadMoving"
    # The API server refused an object of the workload with an answer retrying cannot change (422, 403).
    WORKLOAD_REFUSED = "WorkloadRefused"
    # The order's External host is another order's endpoint already, or one of the platform's own
    # (exposure.reservedHosts): nothing is published for it; rename the order, or wait for the other.
    HOST_NAME_TAKEN = "HostNameTaken"
    # Failures the cluster reports about the order's replicas (the observer reads them off the Pods, the
    # StatefulSet's FailedCreate events and the Nodes; the message is the cluster's own, cut to fit).
    # The order re-plans by itself where moving helps:
    NODE_LOST = "NodeLost"
    CLAIM_NOT_ALLOCATABLE = "ClaimNotAllocatable"
    POD_UNSCHEDULABLE = "PodUnschedulable"
    # ... and waits for an edit (of the order, its class, the quota, the image, the repository) where
    # retrying cannot help:
    QUOTA_EXCEEDED = "QuotaExceeded"
    POD_CREATION_REFUSED = "PodCreationRefused"
    IMAGE_PULL_FAILED = "ImagePullFailed"
    MODEL_DOWNLOAD_FAILED = "ModelDownloadFailed"
    RUNTIME_OOM_KILLED = "RuntimeOOMKilled"
    RUNTIME_CRASH_LOOPING = "RuntimeCrashLooping"
    RUNTIME_CANNOT_START = "RuntimeCannotStart"
    # A replica's node is not Ready (its kubelet missed its heartbeats): the order keeps its placement
    # for the grace the cluster's own eviction gives it (observer.nodeNotReadyGraceSeconds), then it is
    # NodeLost and moves.
    NODE_NOT_READY = "NodeNotReady"
    # Progress: the replica's model-fetcher downloads the model (how much arrived, from its log).
    MODEL_DOWNLOADING = "ModelDownloading"
    # Progress: the engine runs and loads its model (its startup probe has not passed yet).
    MODEL_LOADING = "ModelLoading"
    # Positive and progress reasons.
    CLASS_RESOLVED = "ClassResolved"
    MODEL_RESOLVED = "ModelResolved"
    LAUNCH_PLAN_CALCULATED = "LaunchPlanCalculated"
    WORKLOAD_APPLIED = "WorkloadApplied"
    WORKLOAD_PROGRESSING = "WorkloadProgressing"
    PROBE_SUCCEEDED = "ProbeSucceeded"
    SCALING_ALLOWED = "ScalingAllowed"
    RUNTIME_UP_TO_DATE = "RuntimeUpToDate"
    WAITING_FOR_PREVIOUS_STEP = "WaitingForPreviousStep"
    DELETING = "Deleting"
    # The module was disabled (its chart uninstalled): the disable hook stopped the order's workload and
    # wrote this; enabling the module again brings the order back by itself (worker/disable.py).
    MODULE_DISABLED = "ModuleDisabled"
    # Class conditions (Validated, Ready).
    CLASS_VALID = "ClassValid"
    CLASS_INVALID = "ClassInvalid"
    # Class Ready=False (Validated stays True): the class names an object the cluster does not have. The
    # class turns Ready by itself once it exists (the watcher informs on these kinds).
    DEVICE_CLASS_NOT_FOUND = "DeviceClassNotFound"
    PRIORITY_CLASS_NOT_FOUND = "PriorityClassNotFound"
    STORAGE_CLASS_NOT_FOUND = "StorageClassNotFound"
    ISSUER_NOT_FOUND = "IssuerNotFound"


# The type of an apply's refusal of the run's own state (a plan, a recipe, a resolution or a held
# spec the order, its class and the release do not give): shown as WorkloadRefused, and the run drops
# that state and plans again from the cluster (a forged run heals). Not a condition reason.
STATE_REFUSED = "WorkloadStateRefused"


class EventReason(StrEnum):
    """Reasons of Kubernetes Events recorded on an order (not condition reasons)."""

    SETTLED_REGION_KEPT = "SettledRegionKept"
    CAPACITY_PREEMPTED = "CapacityPreempted"
    CAPACITY_RESTORED = "CapacityRestored"
    # The observer force-deleted an order's pod from a lost node (observer.forceDeletePodsOnLostNodes).
    POD_FORCE_DELETED = "PodForceDeleted"
    # A run of the order's workflow was told to delete an order the API server does not delete (a
    # forged state): nothing was deleted, and the order is reconciled from the cluster again.
    DELETE_REFUSED = "DeleteRefused"
    # A move made before it breaks finished: the old replicas went once the new ones were Ready.
    MOVED = "Moved"


# Refusals about capacity: the order waits and retries on a backoff.
CAPACITY_REFUSALS: frozenset[Reason] = frozenset(
    {
        Reason.NO_CAPACITY,
        Reason.NO_ACCELERATOR_WITH_ENOUGH_MEMORY,
        Reason.RESOURCE_CLAIM_EXHAUSTED,
        Reason.NO_SCHEDULABLE_NODE,
        Reason.MODEL_NOT_READY,
        Reason.AUTH_SECRET_NOT_FOUND,
    }
)
