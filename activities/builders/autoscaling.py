"""Replica bounds: the HorizontalPodAutoscaler ``{order}`` and ``status.constraints``.

A class without ``scalingPolicy`` gives one replica and no autoscaler; a class whose
``maxReplicas`` is 1 has nothing to scale either. Above 1, an HPA (autoscaling/v2) owns the
replica count between the class's bounds — and then the StatefulSet is applied WITHOUT
``spec.replicas`` (see ``statefulset.py``), since two writers of one field fight forever.

The metric is vLLM's queue, not CPU: a GPU-bound server's CPU use says nothing about load (the
engine's loop keeps a core busy whether it serves one request or a hundred). The runtime
exports ``vllm:num_requests_waiting`` — requests admitted but not yet scheduled because the
running batch is full — which is exactly "this replica is saturated". The custom metrics API
serves it per pod as ``vllm_num_requests_waiting`` (Prometheus adapter rule renaming the
colon, which metric API names cannot carry). Without a metrics API the HPA holds the replica
count where it is and reports why in its own conditions; the order keeps serving.

Scaling is deliberately slow in both directions: a new replica loads its model for minutes,
so flapping would cost more than it saves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from activities.builders.common import WorkloadInputs, object_meta
from inference_api.types import ConstraintsStatus, InferenceServiceClass, ModelScope
from planner.scaling import autoscaled, class_bounds, priority_class_name

QUEUE_METRIC = "vllm_num_requests_waiting"
# Two queued requests per replica on average: above it latency grows with the queue.
QUEUE_TARGET_AVERAGE = "2"


@dataclass(frozen=True)
class ReplicaBounds:
    min: int
    max: int
    autoscaled: bool


# What the class's scalingPolicy says is read in one place, planner.scaling (the order workflow reads
# it there too): an HPA exists exactly when ``autoscaled`` holds; the priority class is the first the
# class allows. ``has_autoscaler`` is the builders' name for it.
has_autoscaler = autoscaled


def replica_bounds(service_class: InferenceServiceClass, replica_ceiling: int | None = None) -> ReplicaBounds:
    """The effective bounds: the class's, with a donor's lowered ceiling applied.

    A ceiling may go below the class's minimum (preemption takes what it must); the minimum
    follows it down so that min <= max always holds, as the HPA requires.
    """
    low, high = class_bounds(service_class)
    if replica_ceiling is not None:
        high = max(1, min(high, replica_ceiling))
        low = min(low, high)
    return ReplicaBounds(min=low, max=high, autoscaled=autoscaled(service_class))


def constraints_status(
    service_class: InferenceServiceClass,
    model_scope: ModelScope | None,
    replica_ceiling: int | None = None,
) -> ConstraintsStatus:
    """``status.constraints``: what the class (and any preemption ceiling) imposes on the order."""
    bounds = replica_bounds(service_class, replica_ceiling)
    return ConstraintsStatus(
        minReplicas=bounds.min,
        maxReplicas=bounds.max,
        priorityClassName=priority_class_name(service_class),
        modelScope=model_scope,
    )


def build_autoscaler(inputs: WorkloadInputs) -> dict[str, Any] | None:
    """The HPA of an order whose class allows more than one replica, else None."""
    if not autoscaled(inputs.service_class):
        return None
    bounds = replica_bounds(inputs.service_class, inputs.replica_ceiling)
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": object_meta(inputs, inputs.names.autoscaler, "autoscaler"),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": inputs.names.statefulset},
            "minReplicas": bounds.min,
            "maxReplicas": bounds.max,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": QUEUE_METRIC},
                        "target": {"type": "AverageValue", "averageValue": QUEUE_TARGET_AVERAGE},
                    },
                }
            ],
            "behavior": {
                "scaleUp": {
                    "stabilizationWindowSeconds": inputs.settings.workload.scaleUpStabilizationSeconds,
                    "selectPolicy": "Max",
                    "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
                },
                "scaleDown": {
                    # A replica costs minutes of model loading to bring back: give a dip ten
                    # minutes (the default) before giving a replica up.
                    "stabilizationWindowSeconds": inputs.settings.workload.scaleDownStabilizationSeconds,
                    "selectPolicy": "Max",
                    "policies": [{"type": "Pods", "value": 1, "periodSeconds": 300}],
                },
            },
        },
    }
