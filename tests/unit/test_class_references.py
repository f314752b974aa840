"""A class's conditions (workflows/class_status.py): Validated says whether the class itself is
consistent; Ready whether, besides, everything it names exists in the cluster — DeviceClasses,
PriorityClasses, its StorageClass and its cert-manager ClusterIssuer — with a reason per kind and a
message naming each missing object and what to do. Pure: every combination of each reference named
or not, present or missing, its kind judged, not judged or not served."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from inference_api.reasons import Reason
from inference_api.types import ConditionStatus, InferenceServiceClass
from workflows.class_status import (
    NOT_SERVED,
    PHASE_INVALID,
    PHASE_PENDING,
    PHASE_READY,
    ClassReferences,
    Names,
    class_readiness_change,
    class_status_patch,
    class_verdict,
    missing_references,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

# kind -> (the ClassReferences field, the Reason, what a message names, the spec field, a name)
KINDS: dict[str, tuple[str, Reason, str, str]] = {
    "DeviceClass": (
        "deviceClasses",
        Reason.DEVICE_CLASS_NOT_FOUND,
        "spec.acceleratorPolicy.allowedDeviceClasses",
        "gpu-a",
    ),
    "PriorityClass": (
        "priorityClasses",
        Reason.PRIORITY_CLASS_NOT_FOUND,
        "spec.scalingPolicy.allowedPriorityClassNames",
        "inference-high",
    ),
    "StorageClass": ("storageClasses", Reason.STORAGE_CLASS_NOT_FOUND, "spec.modelStorageClassName", "fast-nvme"),
    "ClusterIssuer": (
        "clusterIssuers",
        Reason.ISSUER_NOT_FOUND,
        "spec.exposurePolicy.https.certManager.clusterIssuerName",
        "letsencrypt",
    ),
}
ORDER_OF_REASONS = [KINDS[k][1] for k in ("DeviceClass", "PriorityClass", "StorageClass", "ClusterIssuer")]


def spec_naming(named: dict[str, list[str]]) -> dict[str, Any]:
    spec: dict[str, Any] = {"modelPolicy": {"allowedEndpointTypes": ["Chat"]}}
    if "DeviceClass" in named:
        spec["acceleratorPolicy"] = {"allowedDeviceClasses": named["DeviceClass"]}
    if "PriorityClass" in named:
        spec["scalingPolicy"] = {
            "minReplicas": 1,
            "maxReplicas": 2,
            "allowedPriorityClassNames": named["PriorityClass"],
        }
    if "StorageClass" in named:
        (spec["modelStorageClassName"],) = named["StorageClass"]
    if "ClusterIssuer" in named:
        (issuer,) = named["ClusterIssuer"]
        spec["exposurePolicy"] = {
            "type": "External",
            "authentication": "Token",
            "https": {"mode": "CertManager", "certManager": {"clusterIssuerName": issuer}},
        }
    return spec


def make_class(
    named: dict[str, list[str]], generation: int = 1, status: dict[str, Any] | None = None
) -> InferenceServiceClass:
    return InferenceServiceClass.model_validate(
        {
            "metadata": {"name": "llm", "generation": generation, "resourceVersion": "1"},
            "spec": spec_naming(named),
            "status": status or {},
        }
    )


def refs(**names: Names) -> ClassReferences:
    return ClassReferences(**names)


# Each kind: not named by the class; named and present; named and missing; named, kind not judged
# (None: not informed on); named, kind not served (its CRD absent).
STATES = ("unnamed", "present", "missing", "unjudged", "unserved")


def setup_for(states: dict[str, str]) -> tuple[InferenceServiceClass, ClassReferences]:
    named = {kind: [KINDS[kind][3]] for kind, state in states.items() if state != "unnamed"}
    cluster: dict[str, Names] = {}
    for kind, state in states.items():
        field, _, _, name = KINDS[kind]
        cluster[field] = {
            "unnamed": frozenset({"something-else"}),
            "present": frozenset({name, "something-else"}),
            "missing": frozenset({"something-else"}),
            "unjudged": None,
            "unserved": NOT_SERVED,
        }[state]
    return make_class(named), refs(**cluster)


@pytest.mark.parametrize("combination", list(itertools.product(STATES, repeat=len(KINDS))), ids=lambda c: "-".join(c))
def test_every_combination_of_references(combination: tuple[str, ...]) -> None:
    states = dict(zip(KINDS, combination, strict=True))
    cls, cluster = setup_for(states)
    verdict = class_verdict(cls, cluster)
    missing_kinds = [kind for kind, state in states.items() if state == "missing"]

    # Validated is about the class itself: never the references.
    assert verdict.validated == (ConditionStatus.TRUE, Reason.CLASS_VALID, "the class is valid")
    status, reason, message = verdict.ready
    if not missing_kinds:
        assert (status, reason, verdict.phase) == (ConditionStatus.TRUE, Reason.CLASS_VALID, PHASE_READY)
        assert message.startswith("the class is valid and everything it names exists")
        # An issuer of a kind that is not served is not checked, and Ready=True says so.
        unchecked = states["ClusterIssuer"] == "unserved"
        assert ("cert-manager is not installed" in message) is unchecked
        assert ('"letsencrypt" is not checked' in message) is unchecked
        return
    assert status == ConditionStatus.FALSE
    assert verdict.phase == PHASE_PENDING
    # The reason is the first missing kind's, in a fixed order; the message names every missing one.
    assert reason == next(r for r in ORDER_OF_REASONS if r in {KINDS[k][1] for k in missing_kinds})
    for kind in KINDS:
        _, _, field, name = KINDS[kind]
        assert (f'{kind} "{name}"' in message) is (kind in missing_kinds), kind
        assert (field in message) is (kind in missing_kinds), kind
    assert "which does not exist" in message
    assert message.endswith(
        "The class turns Ready by itself once it exists." if len(missing_kinds) == 1 else "once they exist."
    )
    assert [m.reason for m in missing_references(cls, cluster)] == [
        r for r in ORDER_OF_REASONS if r in {KINDS[k][1] for k in missing_kinds}
    ]


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_missing_reference_says_what_to_do(kind: str) -> None:
    cls, cluster = setup_for({k: "missing" if k == kind else "unnamed" for k in KINDS})
    _, reason, message = class_verdict(cls, cluster).ready
    _field, expected, where, name = KINDS[kind]
    assert reason == expected
    assert message.startswith(f'{where} names {kind} "{name}", which does not exist: create it')
    listing = {
        "DeviceClass": "kubectl get deviceclass",
        "PriorityClass": "kubectl get priorityclass",
        "StorageClass": "kubectl get storageclass",
        "ClusterIssuer": "kubectl get clusterissuer",
    }[kind]
    assert listing in message


def test_several_missing_names_of_one_kind_are_named_once_each_in_the_class_order() -> None:
    cls = make_class({"DeviceClass": ["b-gpu", "a-gpu", "present", "b-gpu"], "PriorityClass": ["high", "low"]})
    cluster = refs(deviceClasses=frozenset({"present"}), priorityClasses=frozenset({"low"}))
    status, reason, message = class_verdict(cls, cluster).ready
    assert (status, reason) == (ConditionStatus.FALSE, Reason.DEVICE_CLASS_NOT_FOUND)
    assert 'allowedDeviceClasses names DeviceClasses "b-gpu", "a-gpu", which do not exist: create them' in message
    assert 'allowedPriorityClassNames names PriorityClass "high", which does not exist: create it' in message
    assert '"present"' not in message
    assert '"low"' not in message
    assert message.endswith("once they exist.")


def test_an_empty_device_class_list_names_nothing() -> None:
    cls = make_class({"DeviceClass": []})
    assert class_verdict(cls, refs(deviceClasses=frozenset())).ready[0] == ConditionStatus.TRUE


@pytest.mark.parametrize("cluster", [None, refs(), refs(deviceClasses=frozenset(), storageClasses=frozenset())])
def test_an_invalid_class_is_invalid_whatever_the_cluster_has(cluster: ClassReferences | None) -> None:
    # The CRD refuses minReplicas > maxReplicas on write; a class read from an older schema may say it.
    cls = make_class({"DeviceClass": ["gone"], "StorageClass": ["gone"], "PriorityClass": ["gone"]})
    cls.spec.scalingPolicy = cls.spec.scalingPolicy.model_copy(update={"minReplicas": 3, "maxReplicas": 1})  # type: ignore[union-attr]
    verdict = class_verdict(cls, cluster)
    assert verdict.phase == PHASE_INVALID
    assert verdict.validated[:2] == (ConditionStatus.FALSE, Reason.CLASS_INVALID)
    assert verdict.ready == verdict.validated
    assert "minReplicas exceeds maxReplicas" in verdict.ready[2]


def test_without_references_the_verdict_is_the_class_alone() -> None:
    cls = make_class({"DeviceClass": ["gone"]})
    verdict = class_verdict(cls, None)
    assert verdict.ready == verdict.validated == (ConditionStatus.TRUE, Reason.CLASS_VALID, "the class is valid")


def conditions_of(patch: dict[str, object]) -> dict[str, dict[str, Any]]:
    conditions = patch["conditions"]
    assert isinstance(conditions, list)
    return {c["type"]: c for c in conditions}


def test_last_transition_time_moves_only_when_a_status_flips() -> None:
    named = {"PriorityClass": ["high"]}
    missing, present = refs(priorityClasses=frozenset()), refs(priorityClasses=frozenset({"high"}))

    first = class_status_patch(make_class(named), T0, missing)
    assert first is not None
    c = conditions_of(first)
    assert first["phase"] == PHASE_PENDING
    assert (c["Validated"]["status"], c["Ready"]["status"], c["Ready"]["reason"]) == (
        "True",
        "False",
        "PriorityClassNotFound",
    )
    assert c["Validated"]["lastTransitionTime"] == c["Ready"]["lastTransitionTime"] == "2026-03-01T12:00:00Z"

    # Nothing changed: nothing to write.
    stored = make_class(named, status=first)
    assert class_status_patch(stored, T0 + timedelta(minutes=5), missing) is None

    # Another PriorityClass missing too: the message changes, the status does not: the time stays.
    two = make_class({"PriorityClass": ["high", "low"]}, generation=2, status=first)
    second = class_status_patch(two, T0 + timedelta(minutes=10), missing)
    assert second is not None
    assert conditions_of(second)["Ready"]["lastTransitionTime"] == "2026-03-01T12:00:00Z"
    assert '"high", "low"' in conditions_of(second)["Ready"]["message"]
    assert second["observedGeneration"] == 2

    # It appears: Ready flips (its time moves); Validated stays (its time stays).
    third = class_status_patch(
        make_class({"PriorityClass": ["high", "low"]}, generation=2, status=second),
        T0 + timedelta(minutes=20),
        refs(priorityClasses=frozenset({"high", "low"})),
    )
    assert third is not None
    c = conditions_of(third)
    assert third["phase"] == PHASE_READY
    assert (c["Ready"]["status"], c["Ready"]["reason"]) == ("True", "ClassValid")
    assert c["Ready"]["lastTransitionTime"] == "2026-03-01T12:20:00Z"
    assert c["Validated"]["lastTransitionTime"] == "2026-03-01T12:00:00Z"
    assert class_status_patch(make_class(named, status=third), T0 + timedelta(hours=1), present) is not None


def test_a_class_written_by_the_previous_release_turns_ready_false_with_the_reason() -> None:
    old = {
        "phase": "Ready",
        "observedGeneration": 1,
        "conditions": [
            {
                "type": t,
                "status": "True",
                "reason": "ClassValid",
                "message": "the class is valid",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
            for t in ("Validated", "Ready")
        ],
    }
    patch = class_status_patch(make_class({"StorageClass": ["gone"]}, status=old), T0, refs(storageClasses=frozenset()))
    assert patch is not None
    c = conditions_of(patch)
    assert c["Validated"]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert (c["Ready"]["reason"], c["Ready"]["lastTransitionTime"]) == ("StorageClassNotFound", "2026-03-01T12:00:00Z")


def stored(ready: str | None, reason: str = "ClassValid") -> dict[str, Any]:
    conditions = [] if ready is None else [{"type": "Ready", "status": ready, "reason": reason}]
    return {"metadata": {"name": "llm"}, "status": {"conditions": conditions}}


@pytest.mark.parametrize(
    ("old", "new", "told"),
    [
        (stored(None), stored("True"), "InferenceServiceClass llm is Ready"),
        (stored("False", "DeviceClassNotFound"), stored("True"), "InferenceServiceClass llm is Ready"),
        (
            stored("True"),
            stored("False", "DeviceClassNotFound"),
            "InferenceServiceClass llm is not Ready (DeviceClassNotFound)",
        ),
        (stored(None), stored("False", "ClassInvalid"), "InferenceServiceClass llm is not Ready (ClassInvalid)"),
        # No flip: a message or a reason that changes, or nothing at all, tells nothing.
        (stored("False", "DeviceClassNotFound"), stored("False", "StorageClassNotFound"), None),
        (stored("True"), stored("True"), None),
        (stored(None), stored(None), None),
        (stored("True"), stored(None), None),
        # A class seen for the first time, or deleted: class_changed says it.
        (None, stored("True"), None),
        (stored("True"), None, None),
    ],
)
def test_orders_are_told_when_their_classs_ready_flips(
    old: dict[str, Any] | None, new: dict[str, Any] | None, told: str | None
) -> None:
    assert class_readiness_change(old, new) == told
