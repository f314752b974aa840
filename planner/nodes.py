"""What the scheduler judges of a node before it binds a replica's pod there. Pure.

A node takes the pod when it is not cordoned, every NoSchedule/NoExecute taint is tolerated by the
workload's tolerations (module settings ``workload.tolerations``), it has a pod slot left, and its
allocatable CPU and memory minus what the pods bound there request (and what the planner's own
bookings will bring) hold the pod's requests. The same rules as kube-scheduler's NodeUnschedulable,
TaintToleration and NodeResourcesFit filters; a node the snapshot does not describe is not judged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from inference_api.plan import Toleration
from planner.inventory import Node, Taint

BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


class NodeProblem(StrEnum):
    MISSING = "missing"
    NOT_READY = "not-ready"
    CORDONED = "cordoned"
    SELECTOR = "selector"
    TAINTED = "tainted"
    PODS = "pods"
    CPU = "cpu"
    MEMORY = "memory"


@dataclass(frozen=True)
class PodDemand:
    """What one replica's pod requests of its node."""

    cpuMilli: int
    memoryMiB: int


# The endpoint front beside the engine in every replica's pod (activities/builders/endpoint_front.py builds
# its requests from this): the scheduler adds it to the engine's requests, so the planner does too.
ENDPOINT_FRONT_DEMAND = PodDemand(cpuMilli=100, memoryMiB=128)


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """core/v1 Toleration.ToleratesTaint."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    operator = toleration.operator or "Equal"
    if operator == "Exists":
        return True
    if not toleration.key:  # an empty key with Equal matches nothing (the API refuses it anyway)
        return False
    return (toleration.value or "") == (taint.value or "")


def untolerated(node: Node, tolerations: Sequence[Toleration]) -> list[Taint]:
    """The node's taints that keep the pod off it."""
    return [
        t for t in node.taints if t.effect in BLOCKING_EFFECTS and not any(tolerates(tol, t) for tol in tolerations)
    ]


def node_problem(
    node: Node | None,
    demand: PodDemand,
    tolerations: Sequence[Toleration],
    extra_cpu_milli: int = 0,
    extra_memory_mib: int = 0,
    node_selector: Mapping[str, str] | None = None,
) -> NodeProblem | None:
    """Why the node cannot take the pod, or None when it can. ``extra_*`` are what is already held
    there beyond the node's own record (bookings not yet bound)."""
    if node is None:
        return None
    if not node.ready:
        return NodeProblem.NOT_READY
    if node.unschedulable:
        return NodeProblem.CORDONED
    if node_selector and any(node.labels.get(k) != v for k, v in node_selector.items()):
        return NodeProblem.SELECTOR
    if untolerated(node, tolerations):
        return NodeProblem.TAINTED
    if node.pods is not None and node.podCount + 1 > node.pods:
        return NodeProblem.PODS
    if node.cpuMilli is not None and node.requestedCpuMilli + extra_cpu_milli + demand.cpuMilli > node.cpuMilli:
        return NodeProblem.CPU
    if node.memoryMiB is not None and node.requestedMemoryMiB + extra_memory_mib + demand.memoryMiB > node.memoryMiB:
        return NodeProblem.MEMORY
    return None


def free_cpu_milli(node: Node) -> int | None:
    return None if node.cpuMilli is None else node.cpuMilli - node.requestedCpuMilli


def free_memory_mib(node: Node) -> int | None:
    return None if node.memoryMiB is None else node.memoryMiB - node.requestedMemoryMiB


__all__ = [
    "BLOCKING_EFFECTS",
    "ENDPOINT_FRONT_DEMAND",
    "NodeProblem",
    "PodDemand",
    "free_cpu_milli",
    "free_memory_mib",
    "node_problem",
    "tolerates",
    "untolerated",
]
