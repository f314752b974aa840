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

An autoscaled order (the plan placed fewer replicas than it may run: ``planner.scaling.planned_replicas``)
is **steered**, not pinned: its device request is a DRA prioritized list (``firstAvailable``, KEP-4816):
subrequest ``planned`` selects the planned devices (the same CEL pin), subrequest ``any`` any device of the
class of the same product and placement with the same count and capacity request, so the planned replicas
land where planned and a replica the autoscaler adds later still has somewhere to go. The pod template
prefers the planned nodes (a preferred node affinity) and the annotation records the planned replicas,
which the inventory reserves until a claim of the order is allocated. The allocation's
``results[].request`` (``gpu/planned`` or ``gpu/any``) says which one the allocator chose.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
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


def steered(inputs: WorkloadInputs) -> bool:
    """Is the order steered to its plan (an autoscaled order, or one with fewer placements than replicas):
    its claims try the planned devices first, then any device of the same kind (``firstAvailable``), and
    its pods prefer the planned nodes."""
    plan = inputs.plan
    return bool(plan.nodeName) and not pinned(inputs)


# The scheduling gate on a steered order's pods: the observer's replica placer writes each replica's claim
# allocation on the device it chooses (``activities.replica_placement``), then removes the gate, so the
# replicas the autoscaler adds are placed by the module, not wherever the allocator finds room.
REPLICA_PLACEMENT_GATE = "ai.deckhouse.io/replica-placement"


def waits_for_placement(pod_spec: Mapping[str, Any]) -> bool:
    """Does a pod (its spec) wait behind ``REPLICA_PLACEMENT_GATE``?"""
    return any(g.get("name") == REPLICA_PLACEMENT_GATE for g in pod_spec.get("schedulingGates") or [])


def placement_gated(inputs: WorkloadInputs) -> bool:
    """Are the order's pods made behind ``REPLICA_PLACEMENT_GATE``: a steered order's (a pinned one's
    claims can only be allocated on its planned devices; an order with no plan node is not placed)."""
    return steered(inputs)


# The subrequests of a steered order's device request, in the allocator's order of preference: the
# allocation result names the one chosen as ``<request>/<subrequest>``.
SUBREQUEST_PLANNED = "planned"
SUBREQUEST_ANY = "any"


def chosen_subrequest(result_request: str) -> str | None:
    """The subrequest an allocation result's ``request`` names (``gpu/planned`` → ``planned``); None for a
    request without subrequests."""
    _, slash, sub = result_request.partition("/")
    return sub if slash else None


def kind_selector(plan: LaunchPlan) -> str | None:
    """A CEL selector for devices of the plan's kind: its product, and its placement type and memory (GiB)
    where the device publishes them (guarded with ``has``, so a device without the attribute is judged, not an
    error). None when the plan names no product."""
    if not plan.acceleratorProductName or plan.acceleratorProductName == "unknown":
        return None
    attrs = 'device.attributes["gpu.deckhouse.io"]'
    product = json.dumps(plan.acceleratorProductName)
    placement = json.dumps(str(plan.placementMode))
    return (
        f"has({attrs}.productName) && {attrs}.productName == {product} && "
        f"(!has({attrs}.placement) || {attrs}.placement == {placement}) && "
        f"(!has({attrs}.memoryGiB) || {attrs}.memoryGiB == {int(plan.acceleratorMemoryGiB)})"
    )


def node_affinity(inputs: WorkloadInputs) -> dict[str, Any] | None:
    """The pod template's node affinity: a pinned order requires its planned nodes (matchFields on the
    name, as a DaemonSet's pods are bound); a steered one prefers them (the scheduler's NodeAffinity
    score), so its first replicas land where their planned devices are; else None."""
    plan = inputs.plan
    if not plan.nodeName:
        return None
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": planned_nodes(plan)}]}
    if pinned(inputs):
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": term}]}}


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


def _device_request(inputs: WorkloadInputs) -> dict[str, Any]:
    """The template's one device request: ``exactly`` (pinned: with the planned devices' selector), or
    for a steered order with a device selector the prioritized list ``planned``, then ``any``."""
    plan = inputs.plan

    def exact(selector: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "deviceClassName": plan.deviceClass,
            "allocationMode": "ExactCount",
            "count": plan.deviceCount,
        }
        if selector:
            out["selectors"] = [{"cel": {"expression": selector}}]
        memory = memory_request_mib(plan)
        if memory is not None:
            out["capacity"] = {"requests": {MEMORY_CAPACITY: f"{memory}Mi"}}
        return out

    if steered(inputs) and plan.deviceSelector:
        return {
            "name": DEVICE_REQUEST,
            "firstAvailable": [
                {"name": SUBREQUEST_PLANNED, **exact(plan.deviceSelector)},
                {"name": SUBREQUEST_ANY, **exact(kind_selector(plan))},
            ],
        }
    return {"name": DEVICE_REQUEST, "exactly": exact(plan.deviceSelector if pinned(inputs) else None)}


def request_alternatives(request: dict[str, Any]) -> list[dict[str, Any]]:
    """A claim's (or template's) device request as its alternatives, each shaped like ``exactly``
    (class, count, capacity, selectors): ``[exactly]``, or the ``firstAvailable`` subrequests in order."""
    if request.get("firstAvailable"):
        return [dict(sub) for sub in request["firstAvailable"]]
    return [dict(request.get("exactly") or {})]


def build_claim_template(inputs: WorkloadInputs) -> dict[str, Any]:
    plan = inputs.plan
    recorded = (
        planned_placements(plan, _max_replicas(inputs))
        if pinned(inputs)
        else planned_placements(plan, len(plan.placements()))
        if steered(inputs) and plan.deviceSelector
        else None
    )
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": object_meta(
            inputs,
            inputs.names.claim_template,
            "accelerator",
            {ANNOTATION_PLANNED_PLACEMENTS: recorded} if recorded is not None else None,
        ),
        "spec": {
            # The claims made from the template carry the order's labels, so `kubectl get
            # resourceclaims -l ai.deckhouse.io/inference-service=<order>` finds them.
            "metadata": {"labels": labels(inputs.name, "accelerator")},
            "spec": {"devices": {"requests": [_device_request(inputs)]}},
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
            for exactly in request_alternatives(request):
                capacity = (exactly.get("capacity") or {}).get("requests") or {}
                out.append(
                    (
                        request.get("name"),
                        exactly.get("name"),
                        exactly.get("deviceClassName"),
                        exactly.get("count", 1),
                        tuple(sorted((key, parse_quantity(amount)) for key, amount in capacity.items())),
                        tuple(((s.get("cel") or {}).get("expression")) for s in exactly.get("selectors") or []),
                    )
                )
        return out

    return requests(standing) != requests(desired)
