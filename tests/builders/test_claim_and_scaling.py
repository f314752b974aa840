"""ResourceClaimTemplate (DRA, consumable capacity) and the HPA / status.constraints."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from activities.builders import (
    build_autoscaler,
    build_claim_template,
    claim_template_spec_differs,
    constraints_status,
    memory_request_mib,
    replica_bounds,
)
from inference_api.settings import ModuleSettings, WorkloadSettings
from inference_api.types import ModelScope
from tests import factories as f


def _exactly(rct: dict[str, Any]) -> dict[str, Any]:
    (request,) = rct["spec"]["spec"]["devices"]["requests"]
    assert request["name"] == "gpu"
    exactly: dict[str, Any] = request["exactly"]
    return exactly


def test_claim_template_names_the_device_class_and_count() -> None:
    rct = build_claim_template(f.inputs(the_plan=f.plan(device_count=2)))
    assert rct["apiVersion"] == "resource.k8s.io/v1"
    assert rct["kind"] == "ResourceClaimTemplate"
    assert rct["metadata"]["name"] == "support-llm-claim"
    assert _exactly(rct) == {"deviceClassName": "nvidia-h100-mps-mig", "allocationMode": "ExactCount", "count": 2}
    assert rct["spec"]["metadata"]["labels"]["ai.deckhouse.io/inference-service"] == "support-llm"


def test_share_50_requests_the_models_memory_as_capacity() -> None:
    rct = build_claim_template(f.inputs(the_plan=f.plan(share=50, memory_request_mib=40960)))
    assert _exactly(rct)["capacity"] == {"requests": {"gpu.deckhouse.io/memory": "40960Mi"}}


def test_share_100_has_no_capacity_request() -> None:
    rct = build_claim_template(f.inputs(the_plan=f.plan(share=100, memory_request_mib=40960)))
    assert "capacity" not in _exactly(rct)


@pytest.mark.parametrize(
    ("share", "plan_request", "model_memory", "expected"),
    [
        (1, 800, None, 800),
        (99, None, 20000, 20000),
        (25, None, None, 20480),  # a quarter of 80 GiB
        (33, None, None, 27034),  # rounded up: never less than the share
        (100, 1000, 1000, None),
    ],
)
def test_memory_request(share: int, plan_request: int | None, model_memory: int | None, expected: int | None) -> None:
    the_plan = f.plan(share=share, memory_request_mib=plan_request, model_memory_mib=model_memory)
    assert memory_request_mib(the_plan) == expected


def test_standing_template_with_canonical_quantities_is_not_a_change() -> None:
    desired = build_claim_template(f.inputs(the_plan=f.plan(share=50, memory_request_mib=40960)))
    standing = copy.deepcopy(desired)
    exactly = standing["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    exactly["capacity"]["requests"]["gpu.deckhouse.io/memory"] = "40Gi"  # the server's canonical form
    assert not claim_template_spec_differs(standing, desired)
    assert not claim_template_spec_differs(None, desired)
    exactly["deviceClassName"] = "other"
    assert claim_template_spec_differs(standing, desired)
    other_share = build_claim_template(f.inputs(the_plan=f.plan(share=60, memory_request_mib=49152)))
    assert claim_template_spec_differs(desired, other_share)


def test_no_scaling_policy_no_hpa() -> None:
    assert build_autoscaler(f.inputs(the_class=f.cluster_local_none())) is None
    bounds = replica_bounds(f.cluster_local_none())
    assert (bounds.min, bounds.max, bounds.autoscaled) == (1, 1, False)


def test_max_one_no_hpa() -> None:
    the_class = f.cluster_local_none(scalingPolicy={"minReplicas": 1, "maxReplicas": 1})
    assert build_autoscaler(f.inputs(the_class=the_class)) is None


def test_max_above_one_hpa_with_the_class_bounds() -> None:
    hpa = build_autoscaler(f.inputs())
    assert hpa is not None
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["metadata"]["name"] == "support-llm"
    spec = hpa["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "support-llm"}
    assert (spec["minReplicas"], spec["maxReplicas"]) == (1, 4)
    (metric,) = spec["metrics"]
    assert metric["type"] == "Pods"
    assert metric["pods"]["metric"]["name"] == "vllm_num_requests_waiting"
    assert spec["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 300


def test_a_donors_ceiling_lowers_the_hpa_but_keeps_it() -> None:
    the_class = f.cluster_local_none(scalingPolicy={"minReplicas": 2, "maxReplicas": 4})
    hpa = build_autoscaler(f.inputs(the_class=the_class, replica_ceiling=3))
    assert hpa is not None
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 3)
    hpa = build_autoscaler(f.inputs(the_class=the_class, replica_ceiling=1))
    assert hpa is not None
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 1)
    # A ceiling above the class's bound changes nothing.
    hpa = build_autoscaler(f.inputs(the_class=the_class, replica_ceiling=10))
    assert hpa is not None
    assert hpa["spec"]["maxReplicas"] == 4


def test_ceiling_must_be_positive() -> None:
    with pytest.raises(ValueError, match="replica_ceiling must be at least 1"):
        f.inputs(replica_ceiling=0)


def test_constraints_status() -> None:
    c = constraints_status(f.strict_class(), ModelScope.CLUSTER)
    assert (c.minReplicas, c.maxReplicas, c.priorityClassName, c.modelScope) == (1, 4, "inference-normal", "Cluster")
    c = constraints_status(f.cluster_local_none(), None)
    assert (c.minReplicas, c.maxReplicas, c.priorityClassName, c.modelScope) == (1, 1, None, None)
    c = constraints_status(f.strict_class(), ModelScope.NAMESPACE, replica_ceiling=2)
    assert (c.minReplicas, c.maxReplicas) == (1, 2)


def test_the_stabilization_windows_come_from_the_workload_settings() -> None:
    default = build_autoscaler(f.inputs())
    assert default is not None
    behavior = default["spec"]["behavior"]
    assert (behavior["scaleUp"]["stabilizationWindowSeconds"], behavior["scaleDown"]["stabilizationWindowSeconds"]) == (
        60,
        600,
    )
    quick = ModuleSettings(workload=WorkloadSettings(scaleUpStabilizationSeconds=0, scaleDownStabilizationSeconds=15))
    tuned = build_autoscaler(f.inputs(settings=quick))
    assert tuned is not None
    behavior = tuned["spec"]["behavior"]
    assert (behavior["scaleUp"]["stabilizationWindowSeconds"], behavior["scaleDown"]["stabilizationWindowSeconds"]) == (
        0,
        15,
    )


@pytest.mark.parametrize("field", ["scaleUpStabilizationSeconds", "scaleDownStabilizationSeconds"])
def test_a_window_past_the_hpas_hour_is_refused(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        WorkloadSettings(**{field: 3601})
