"""Conditions of an InferenceServiceClass (Validated, Ready). Pure.

The CRD already refuses malformed classes at write time; what is left to judge here is what
a schema cannot say, so a stored class normally validates.
"""

from __future__ import annotations

from datetime import datetime

from inference_api.reasons import Reason
from inference_api.types import ConditionStatus, ConditionType, InferenceServiceClass
from workflows.status import set_condition


def class_problems(cls: InferenceServiceClass) -> list[str]:
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


def class_status_patch(cls: InferenceServiceClass, now: datetime) -> dict[str, object] | None:
    """The status to write, or None when the stored one already says it."""
    generation = cls.metadata.generation
    problems = class_problems(cls)
    ok = not problems
    message = "the class is valid" if ok else "; ".join(problems)
    status = ConditionStatus.TRUE if ok else ConditionStatus.FALSE
    reason = Reason.CLASS_VALID if ok else Reason.CLASS_INVALID
    conditions = list(cls.status.conditions)
    for type_ in (ConditionType.VALIDATED, ConditionType.READY):
        conditions = set_condition(conditions, type_, status, reason, message, generation, now)
    phase = "Ready" if ok else "Invalid"
    if (
        cls.status.phase == phase
        and cls.status.observedGeneration == generation
        and [c.model_dump() for c in cls.status.conditions] == [c.model_dump() for c in conditions]
    ):
        return None
    return {
        "phase": phase,
        "observedGeneration": generation,
        "conditions": [c.model_dump(mode="json", exclude_none=True) for c in conditions],
    }
