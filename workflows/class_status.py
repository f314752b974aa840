"""Conditions of an InferenceServiceClass (Validated, Ready). Pure.

``Validated`` is about the class itself: what a schema cannot say (the CRD already refuses most
malformed classes at write time), so a stored class normally validates. ``Ready`` is about the class
in this cluster: it is valid *and* every object it names exists — the DeviceClasses of
``acceleratorPolicy.allowedDeviceClasses``, the PriorityClasses of
``scalingPolicy.allowedPriorityClassNames``, the StorageClass of ``modelStorageClassName``, and the
cert-manager ClusterIssuer of ``exposurePolicy.https.certManager``. A missing one keeps ``Validated``
True (nothing in the class is wrong: create the object, or edit the class) and makes ``Ready`` False
with a reason naming its kind (``DeviceClassNotFound`` ...) and a message naming each missing
object and what to do. The watcher informs on those kinds and judges again when one changes, so
the class turns Ready by itself once the object exists (level-triggered).

What the cluster has is given as :class:`ClassReferences`: per kind, the names that exist, or
None where that kind is not judged (not informed on); a kind that is not served at all — cert-manager
not installed — is :data:`NOT_SERVED`: its reference cannot be judged, so it does not hold the class
back, and the message says it was not checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from inference_api.reasons import Reason
from inference_api.types import ConditionStatus, ConditionType, InferenceServiceClass
from workflows.status import set_condition


class Unserved(Enum):
    """A kind the API server does not serve (its CRD is not installed)."""

    KIND = "not served"


NOT_SERVED = Unserved.KIND
# What the cluster has of one kind: the names that exist, NOT_SERVED, or None (not judged).
Names = frozenset[str] | Unserved | None

# status.phase of a class: valid and everything it names exists / valid, waiting for what it names /
# not valid.
PHASE_READY = "Ready"
PHASE_PENDING = "Pending"
PHASE_INVALID = "Invalid"


@dataclass(frozen=True)
class ClassReferences:
    """The names of each kind a class may name that exist in the cluster. None: not judged (the kind
    is not informed on); :data:`NOT_SERVED`: the kind is not served (its CRD is not installed)."""

    deviceClasses: Names = None
    priorityClasses: Names = None
    storageClasses: Names = None
    clusterIssuers: Names = None


@dataclass(frozen=True)
class MissingReference:
    """Objects of one kind that the class names and the cluster does not have."""

    reason: Reason
    kind: str  # e.g. "DeviceClass"
    field: str  # where the class names them
    names: tuple[str, ...]
    todo: str  # what to do, after "create it" / "remove it"

    def message(self) -> str:
        quoted = ", ".join(f'"{n}"' for n in self.names)
        kinds = self.kind if len(self.names) == 1 else _plural(self.kind)
        it = "it" if len(self.names) == 1 else "them"
        does = "does" if len(self.names) == 1 else "do"
        return f"{self.field} names {kinds} {quoted}, which {does} not exist: {self.todo.format(it=it)}"


@dataclass(frozen=True)
class ClassVerdict:
    """What the class's status says: each condition (status, reason, message) and the phase."""

    validated: tuple[ConditionStatus, Reason, str]
    ready: tuple[ConditionStatus, Reason, str]
    phase: str


def _plural(kind: str) -> str:
    return kind + "es" if kind.endswith("s") else kind + "s"


def class_problems(cls: InferenceServiceClass) -> list[str]:
    """What is wrong with the class itself (Validated)."""
    problems: list[str] = []
    if not cls.spec.modelPolicy.allowedEndpointTypes:
        problems.append("modelPolicy.allowedEndpointTypes is empty: no API contract can be picked")
    policy = cls.spec.acceleratorPolicy
    if policy and policy.minSharePercent and policy.maxSharePercent and policy.minSharePercent > policy.maxSharePercent:
        problems.append("acceleratorPolicy.minSharePercent exceeds maxSharePercent")
    scaling = cls.spec.scalingPolicy
    if scaling and scaling.minReplicas > scaling.maxReplicas:
        problems.append("scalingPolicy.minReplicas exceeds maxReplicas")
    return problems


def _absent(named: list[str] | None, existing: Names) -> tuple[str, ...]:
    """The names of ``named`` (in their order, once each) that ``existing`` lacks; none when the kind
    is not judged or not served."""
    if not named or existing is None or existing is NOT_SERVED:
        return ()
    return tuple(dict.fromkeys(n for n in named if n not in existing))


def issuer_name(cls: InferenceServiceClass) -> str | None:
    """The cert-manager ClusterIssuer the class's External endpoints are signed by, if any."""
    https = cls.spec.exposurePolicy.https
    return https.certManager.clusterIssuerName if https is not None and https.certManager is not None else None


def missing_references(cls: InferenceServiceClass, refs: ClassReferences) -> list[MissingReference]:
    """What the class names that the cluster does not have, by kind, in a fixed order (DeviceClass,
    PriorityClass, StorageClass, ClusterIssuer): the first one gives ``Ready``'s reason."""
    out: list[MissingReference] = []
    accelerator = cls.spec.acceleratorPolicy
    if names := _absent(accelerator.allowedDeviceClasses if accelerator else None, refs.deviceClasses):
        out.append(
            MissingReference(
                Reason.DEVICE_CLASS_NOT_FOUND,
                "DeviceClass",
                "spec.acceleratorPolicy.allowedDeviceClasses",
                names,
                "create {it} (resource.k8s.io/v1; the GPU driver's DRA plugin usually does), or remove {it} "
                "from the list (kubectl get deviceclass shows those that exist)",
            )
        )
    scaling = cls.spec.scalingPolicy
    if names := _absent(scaling.allowedPriorityClassNames if scaling else None, refs.priorityClasses):
        out.append(
            MissingReference(
                Reason.PRIORITY_CLASS_NOT_FOUND,
                "PriorityClass",
                "spec.scalingPolicy.allowedPriorityClassNames",
                names,
                "create {it} (scheduling.k8s.io/v1), or remove {it} from the list (kubectl get priorityclass); "
                "the API server refuses the pods of an order whose PriorityClass does not exist",
            )
        )
    storage = cls.spec.modelStorageClassName
    if names := _absent([storage] if storage else None, refs.storageClasses):
        out.append(
            MissingReference(
                Reason.STORAGE_CLASS_NOT_FOUND,
                "StorageClass",
                "spec.modelStorageClassName",
                names,
                "create {it} (storage.k8s.io/v1), or name one that exists (kubectl get storageclass); "
                "the model volumes of new orders would stay Pending without it",
            )
        )
    issuer = issuer_name(cls)
    if names := _absent([issuer] if issuer else None, refs.clusterIssuers):
        out.append(
            MissingReference(
                Reason.ISSUER_NOT_FOUND,
                "ClusterIssuer",
                "spec.exposurePolicy.https.certManager.clusterIssuerName",
                names,
                "create {it} (cert-manager.io/v1), or name one that exists (kubectl get clusterissuer); "
                "the certificates of the class's endpoints are never issued without it",
            )
        )
    return out


def _unchecked(cls: InferenceServiceClass, refs: ClassReferences) -> list[str]:
    """References that cannot be judged because their kind is not served (said on Ready=True)."""
    issuer = issuer_name(cls)
    if issuer and refs.clusterIssuers is NOT_SERVED:
        return [
            f'cert-manager is not installed (the API server serves no ClusterIssuer kind), so ClusterIssuer "{issuer}" '
            "is not checked and no certificate is issued for the class's endpoints until it is"
        ]
    return []


def class_verdict(cls: InferenceServiceClass, refs: ClassReferences | None = None) -> ClassVerdict:
    """Validated: the class's own consistency. Ready: Validated, and everything the class names exists
    (``refs`` None: references are not judged)."""
    problems = class_problems(cls)
    if problems:
        invalid = (ConditionStatus.FALSE, Reason.CLASS_INVALID, "; ".join(problems))
        return ClassVerdict(validated=invalid, ready=invalid, phase=PHASE_INVALID)
    validated = (ConditionStatus.TRUE, Reason.CLASS_VALID, "the class is valid")
    if refs is None:
        return ClassVerdict(validated=validated, ready=validated, phase=PHASE_READY)
    missing = missing_references(cls, refs)
    if missing:
        one = sum(len(m.names) for m in missing) == 1
        when = "once it exists" if one else "once they exist"
        message = "; ".join(m.message() for m in missing) + f". The class turns Ready by itself {when}."
        return ClassVerdict(
            validated=validated,
            ready=(ConditionStatus.FALSE, missing[0].reason, message),
            phase=PHASE_PENDING,
        )
    ready_message = "; ".join(["the class is valid and everything it names exists", *_unchecked(cls, refs)])
    return ClassVerdict(
        validated=validated,
        ready=(ConditionStatus.TRUE, Reason.CLASS_VALID, ready_message),
        phase=PHASE_READY,
    )


def class_status_patch(
    cls: InferenceServiceClass, now: datetime, refs: ClassReferences | None = None
) -> dict[str, object] | None:
    """The status to write, or None when the stored one already says it. A condition's
    ``lastTransitionTime`` moves only when its status flips."""
    generation = cls.metadata.generation
    verdict = class_verdict(cls, refs)
    conditions = list(cls.status.conditions)
    for type_, (status, reason, message) in (
        (ConditionType.VALIDATED, verdict.validated),
        (ConditionType.READY, verdict.ready),
    ):
        conditions = set_condition(conditions, type_, status, reason, message, generation, now)
    if (
        cls.status.phase == verdict.phase
        and cls.status.observedGeneration == generation
        and [c.model_dump() for c in cls.status.conditions] == [c.model_dump() for c in conditions]
    ):
        return None
    return {
        "phase": verdict.phase,
        "observedGeneration": generation,
        "conditions": [c.model_dump(mode="json", exclude_none=True) for c in conditions],
    }


def _ready_of(obj: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(status, reason) of a class object's Ready condition, as stored; None without one."""
    for condition in ((obj or {}).get("status") or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == ConditionType.READY.value:
            return str(condition.get("status")), str(condition.get("reason") or "")
    return None


def class_readiness_change(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> str | None:
    """What to tell the orders of a class whose stored ``Ready`` changed its status between two
    versions of the object (a status write: its orders waiting with ``ClassNotReady`` go on, or a
    serving one shows it), or None. Never on the first sight of a class (its orders are told of a
    new class by ``class_changed``) nor on a deletion."""
    if old is None or new is None:
        return None
    before, after = _ready_of(old), _ready_of(new)
    if after is None or (before is not None and before[0] == after[0]):
        return None
    name = ((new.get("metadata") or {}).get("name")) or "?"
    if after[0] == ConditionStatus.TRUE.value:
        return f"InferenceServiceClass {name} is Ready"
    return f"InferenceServiceClass {name} is not Ready ({after[1]})"
