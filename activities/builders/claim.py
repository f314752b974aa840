"""The ResourceClaimTemplate ``{order}-claim``: the devices one replica gets, through DRA.

Each replica gets a claim of its own made from this template (``resourceClaims`` in the pod
template), so N replicas hold N independent allocations. The plan decides the DeviceClass, the
number of devices and the share; a share of 1..99 percent becomes a consumable-capacity request
(KEP-5075, ``resource.k8s.io/v1`` ``DeviceRequest.exactly.capacity.requests``) for the memory
the model needs, so the scheduler packs several orders onto one physical device. A whole
device (share 100) carries no capacity request: the device class alone selects it.

The plan is what the cluster does: for an order of one replica, the claim also carries the plan's
``deviceSelector`` (a CEL selector on the unique ``uuid`` attribute the GPU driver publishes for each
device) and the pod template a node affinity to the plan's node (``pinned``), so the DRA allocator
can only allocate the planned devices on the planned node.
"""

from __future__ import annotations

from typing import Any

from activities.builders.autoscaling import replica_bounds
from activities.builders.common import DEVICE_REQUEST, WorkloadInputs, labels, object_meta, parse_quantity
from inference_api.plan import LaunchPlan

RESOURCE_API_VERSION = "resource.k8s.io/v1"
# The capacity the gpu module publishes on shareable devices (allowMultipleAllocations).
MEMORY_CAPACITY = "gpu.deckhouse.io/memory"


def is_partial_share(plan: LaunchPlan) -> bool:
    return 1 <= plan.sharePercent <= 99


def memory_request_mib(plan: LaunchPlan) -> int | None:
    """The device memory one replica claims, MiB; None for a whole device.

    The plan's request is used as is, else the model's memory need the share was sized for. A
    plan with neither falls back to the share of the device's memory, rounded up, so the claim
    never asks for less than the share the plan published in status.resolved.
    """
    if not is_partial_share(plan):
        return None
    if plan.memoryRequestMiB is not None:
        return plan.memoryRequestMiB
    if plan.modelMemoryMiB is not None:
        return plan.modelMemoryMiB
    # Integer ceiling: no float rounding can make the claim smaller than the share.
    return -(-plan.acceleratorMemoryGiB * 1024 * plan.sharePercent // 100)


def pinned(inputs: WorkloadInputs) -> bool:
    """Does the workload pin the plan's node and devices? When the order runs one replica at most: the
    one claim the template makes selects exactly the planned devices and the pod is bound to the
    planned node, so the allocation is the plan. Several replicas share one pod template and one claim
    template, and a plan places one replica: pinning them all to its devices would stack them there,
    so they are left to the scheduler (the planner's bookings count them, not where they land)."""
    return bool(inputs.plan.nodeName) and replica_bounds(inputs.service_class, inputs.replica_ceiling).max == 1


def build_claim_template(inputs: WorkloadInputs) -> dict[str, Any]:
    plan = inputs.plan
    exactly: dict[str, Any] = {
        "deviceClassName": plan.deviceClass,
        "allocationMode": "ExactCount",
        "count": plan.deviceCount,
    }
    if plan.deviceSelector and pinned(inputs):
        exactly["selectors"] = [{"cel": {"expression": plan.deviceSelector}}]
    memory = memory_request_mib(plan)
    if memory is not None:
        exactly["capacity"] = {"requests": {MEMORY_CAPACITY: f"{memory}Mi"}}
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": object_meta(inputs, inputs.names.claim_template, "accelerator"),
        "spec": {
            # The claims made from the template carry the order's labels, so `kubectl get
            # resourceclaims -l ai.deckhouse.io/inference-service=<order>` finds them.
            "metadata": {"labels": labels(inputs.name, "accelerator")},
            "spec": {"devices": {"requests": [{"name": DEVICE_REQUEST, "exactly": exactly}]}},
        },
    }


def claim_template_spec_differs(standing: dict[str, Any] | None, desired: dict[str, Any]) -> bool:
    """Whether a standing template must be replaced: its spec is immutable on the server.

    Only the fields the builder writes are compared, and quantities by amount, so defaults and
    canonical forms the server wrote (``40960Mi`` read back as ``40Gi``) do not read as a change.
    """
    if standing is None:
        return False

    def requests(obj: dict[str, Any]) -> list[tuple[Any, ...]]:
        found = obj.get("spec", {}).get("spec", {}).get("devices", {}).get("requests", []) or []
        out = []
        for request in found:
            exactly = request.get("exactly") or {}
            capacity = (exactly.get("capacity") or {}).get("requests") or {}
            out.append(
                (
                    request.get("name"),
                    exactly.get("deviceClassName"),
                    exactly.get("count", 1),
                    tuple(sorted((key, parse_quantity(amount)) for key, amount in capacity.items())),
                    tuple(((s.get("cel") or {}).get("expression")) for s in exactly.get("selectors") or []),
                )
            )
        return out

    return requests(standing) != requests(desired)
