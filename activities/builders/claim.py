"""The ResourceClaimTemplate ``{order}-claim``: the devices one replica gets, through DRA.

Each replica gets a claim of its own made from this template (``resourceClaims`` in the pod
template), so N replicas hold N independent allocations. The plan decides the DeviceClass, the
number of devices and the share; a share of 1..99 percent becomes a consumable-capacity request
(KEP-5075, ``resource.k8s.io/v1`` ``DeviceRequest.exactly.capacity.requests``) for the memory
the model needs, so the scheduler packs several orders onto one physical device. A whole
device (share 100) carries no capacity request: the device class alone selects it.

The plan is what the cluster does: when the plan placed every replica the order may run (``pinned``),
the claim also carries the plan's ``deviceSelector`` (a CEL selector on the unique ``uuid`` attribute
the GPU driver publishes for each device, over every replica's devices) and the pod template a node
affinity to the planned nodes, so the DRA allocator can only allocate planned devices on planned
nodes; the template's annotation ``ai.deckhouse.io/planned-placements`` records each replica's.
"""

from __future__ import annotations

import json
from typing import Any

from activities.builders.autoscaling import replica_bounds
from activities.builders.common import DEVICE_REQUEST, WorkloadInputs, labels, object_meta, parse_quantity
from inference_api.plan import LaunchPlan

RESOURCE_API_VERSION = "resource.k8s.io/v1"
# On the claim template: where the plan put each replica (``planned_placements``).
ANNOTATION_PLANNED_PLACEMENTS = "ai.deckhouse.io/planned-placements"
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
    """Does the workload pin the plan's nodes and devices? When the plan placed every replica the order
    may run (the class's maxReplicas, or its lowered ceiling; one for an order of one replica): the
    claim template selects exactly the planned devices (``deviceSelector``, all the replicas') and the
    pod template requires the planned nodes, so every replica's claim is allocated on planned devices.
    Otherwise (an autoscaled order: the planner places one replica, ``planner.scaling.planned_replicas``;
    or not every replica had room) pinning would leave the unplanned replicas nowhere to go, so they are
    left to the scheduler (the planner's bookings count them, not where they land)."""
    plan = inputs.plan
    if not plan.nodeName:
        return False
    return len(plan.placements()) >= _max_replicas(inputs)


def _max_replicas(inputs: WorkloadInputs) -> int:
    return replica_bounds(inputs.service_class, inputs.replica_ceiling).max


def planned_nodes(plan: LaunchPlan) -> list[str]:
    """The nodes the plan placed its replicas on, each once, in order."""
    return list(dict.fromkeys(p.nodeName for p in plan.placements()))


def planned_placements(plan: LaunchPlan, replicas: int) -> str:
    """The plan's placements of the first ``replicas`` replicas (a preemption ceiling gives the rest
    back) as the claim template's annotation records them (JSON: a list of ``{"node", "devices"}``):
    what the inventory reserves for the order, and what was planned, read back beside what was allocated."""
    placed = plan.placements()[:replicas]
    return json.dumps([{"node": p.nodeName, "devices": p.deviceNames} for p in placed], separators=(",", ":"))


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
        "metadata": object_meta(
            inputs,
            inputs.names.claim_template,
            "accelerator",
            {ANNOTATION_PLANNED_PLACEMENTS: planned_placements(plan, _max_replicas(inputs))}
            if pinned(inputs)
            else None,
        ),
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
