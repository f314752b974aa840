"""The planner's answer is unforgeable (issue 33 item 2): the worker seals each plan for one order, and
the apply writes only a plan whose seal it can check (activities/plan_seal.py).

Pure: every part of a plan that only the planner can judge (node, devices, share, CPU, memory,
volume, selector) changes the seal; another order's plan, an unsealed plan and a plan carried through
a Temporal payload are judged as they must be. On the real API server: the key is the module
namespace's Secret, made once and shared by every worker; without the namespace, a key of its own.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kubernetes.client import ApiClient, CoreV1Api
from temporalio.converter import DataConverter

from activities.plan_seal import SEAL_SECRET, SealKey, seal_problem, sealed
from inference_api.plan import LaunchPlan, ReplicaPlacement
from tests import factories as f

KEY = b"k" * 32
UID = f.UID


def plan() -> LaunchPlan:
    return f.make_plan().model_copy(update={"nodeName": "gpu-node-1", "deviceNames": ["gpu-0"]})


def test_the_workers_own_seal_passes() -> None:
    assert seal_problem(sealed(plan(), UID, KEY), UID, KEY) is None


def test_a_seal_survives_a_temporal_payload() -> None:
    # The plan crosses the workflow's state as JSON: the seal must hold on what comes back.
    converter = DataConverter.default
    payloads = converter.payload_converter.to_payloads([sealed(plan(), UID, KEY)])
    back = converter.payload_converter.from_payloads(payloads, [LaunchPlan])[0]
    assert seal_problem(back, UID, KEY) is None


def test_an_unsealed_plan_is_refused() -> None:
    why = seal_problem(plan(), UID, KEY)
    assert why is not None
    assert "carries no seal" in why


@pytest.mark.parametrize(
    "edit",
    [
        {"nodeName": "gpu-node-2"},
        {"deviceNames": ["gpu-0", "gpu-1"]},
        {"sharePercent": 100},
        {"cpu": "64"},
        {"memory": "512Gi"},
        {"modelVolumeGiB": 4000},
        {"deviceSelector": "true"},
        {"deviceClass": "another-class"},
        {"replicaPlacements": [ReplicaPlacement(nodeName="gpu-node-9", deviceNames=["gpu-7"])]},
        # The commit every replica fetches: an older (vulnerable, say) commit of the same repository.
        {"modelCommit": "0" * 40},
        {"modelNotPinned": "nothing to pin"},
    ],
    ids=lambda e: next(iter(e)),
)
def test_any_edit_of_what_only_the_planner_judges_is_refused(edit: dict[str, Any]) -> None:
    forged = sealed(plan(), UID, KEY).model_copy(update=edit)
    why = seal_problem(forged, UID, KEY)
    assert why is not None
    assert "does not match" in why


def test_a_pinned_commit_is_sealed_and_a_plan_sealed_before_pins_still_passes() -> None:
    pinned = plan().model_copy(update={"modelCommit": "a" * 40})
    assert seal_problem(sealed(pinned, UID, KEY), UID, KEY) is None
    forged = sealed(pinned, UID, KEY).model_copy(update={"modelCommit": None})
    assert seal_problem(forged, UID, KEY) is not None  # unpinning a pinned plan is an edit too
    # The seal of a plan made by the release before pins (its JSON had no such fields), checked now:
    import hashlib
    import hmac
    import json

    body = plan().model_dump(mode="json", exclude={"seal", "modelCommit", "modelNotPinned"})
    canonical = UID.encode() + b"\n" + json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    old_seal = "v1:" + hmac.new(KEY, canonical, hashlib.sha256).hexdigest()
    assert seal_problem(plan().model_copy(update={"seal": old_seal}), UID, KEY) is None


def test_another_orders_plan_is_refused() -> None:
    theirs = sealed(plan(), "another-uid", KEY)
    assert seal_problem(theirs, UID, KEY) is not None


def test_a_seal_made_with_another_key_is_refused() -> None:
    assert seal_problem(sealed(plan(), UID, b"x" * 32), UID, KEY) is not None


@pytest.mark.cluster
def test_the_key_is_the_module_namespaces_secret_made_once_and_shared(kube_admin: ApiClient) -> None:
    core = CoreV1Api(kube_admin)
    namespace = f"seal-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": namespace}})
    try:
        first, second = SealKey(core, namespace), SealKey(core, namespace)
        key = first()
        assert len(key) == 32
        assert second() == key  # another worker replica reads the same key
        secret = core.read_namespaced_secret(SEAL_SECRET, namespace)
        assert secret.metadata.labels["app.kubernetes.io/managed-by"] == "ai-inference"
        # A plan sealed by one replica passes the other's apply.
        assert seal_problem(sealed(plan(), UID, first()), UID, second()) is None
    finally:
        core.delete_namespace(namespace)


@pytest.mark.cluster
def test_without_a_module_namespace_the_worker_seals_with_its_own_key(kube_admin: ApiClient) -> None:
    core = CoreV1Api(kube_admin)
    one, other = SealKey(core, "no-such-namespace-x"), SealKey(core, "no-such-namespace-x")
    assert one() == one()
    assert one() != other()
