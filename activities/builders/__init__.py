"""Pure builders of the objects an order owns, one module per kind (KServe style).

No I/O: each function takes the order's ``WorkloadInputs`` (order, class, launch plan, module
settings, the API contract picked, the model artifact) and returns a plain dict ready for
server-side apply with field manager ``ai-inference``. The apply step lives elsewhere.
"""

from activities.builders.auth import auth_secret_name, build_auth_secret, new_token, requires_token
from activities.builders.autoscaling import (
    ReplicaBounds,
    build_autoscaler,
    constraints_status,
    has_autoscaler,
    priority_class_name,
    replica_bounds,
)
from activities.builders.claim import build_claim_template, claim_template_spec_differs, memory_request_mib
from activities.builders.common import (
    FIELD_MANAGER,
    ModelArtifact,
    ObjectNames,
    UnsupportedModelSourceError,
    WorkloadInputs,
    artifact_for_order,
    artifact_from_resolution,
    owner_reference,
)
from activities.builders.exposure import (
    build_ingress,
    build_tls_secret_copy,
    certificate_copy_allowed,
    custom_certificate_source,
    endpoint_status,
    external_host,
)
from activities.builders.network_policy import build_network_policy
from activities.builders.objects import (
    DesiredObject,
    desired_objects,
    settled_region_kept_message,
    storage_class_kept,
)
from activities.builders.runtime import (
    RuntimeVerdict,
    decide_runtime_hold,
    decide_template_hold,
    placement_changed,
    pod_template_digest,
    replica_revisions,
    replica_runtime_versions,
    runtime_current,
    volume_must_grow,
)
from activities.builders.service import build_service
from activities.builders.statefulset import build_statefulset

__all__ = [
    "FIELD_MANAGER",
    "DesiredObject",
    "ModelArtifact",
    "ObjectNames",
    "ReplicaBounds",
    "RuntimeVerdict",
    "UnsupportedModelSourceError",
    "WorkloadInputs",
    "artifact_for_order",
    "artifact_from_resolution",
    "auth_secret_name",
    "build_auth_secret",
    "build_autoscaler",
    "build_claim_template",
    "build_ingress",
    "build_network_policy",
    "build_service",
    "build_statefulset",
    "build_tls_secret_copy",
    "certificate_copy_allowed",
    "claim_template_spec_differs",
    "constraints_status",
    "custom_certificate_source",
    "decide_runtime_hold",
    "decide_template_hold",
    "desired_objects",
    "endpoint_status",
    "external_host",
    "has_autoscaler",
    "memory_request_mib",
    "new_token",
    "owner_reference",
    "placement_changed",
    "pod_template_digest",
    "priority_class_name",
    "replica_bounds",
    "replica_revisions",
    "replica_runtime_versions",
    "requires_token",
    "runtime_current",
    "settled_region_kept_message",
    "storage_class_kept",
    "volume_must_grow",
]
