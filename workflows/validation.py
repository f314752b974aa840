"""The order matrix of the user guide, as pure functions (no I/O: safe inside a workflow).

Each check returns ``None`` when the order passes, or a :class:`Refusal` carrying the stable
Reason and a message that says what is wrong and what to do about it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from inference_api.catalog_types import ModelFacts
from inference_api.reasons import Reason
from inference_api.types import (
    ConditionStatus,
    ConditionType,
    EndpointType,
    InferenceService,
    InferenceServiceClass,
    ModelSource,
)

_MAGNITUDE = {"k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}
_COUNT = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([KkMmBbTt])$")
# A size token inside a repository name: "Qwen2.5-32B-Instruct" → 32B, "SmolLM-360M" → 360M.
# It must stand alone between separators so "Qwen2.5" or "e5" are not taken for sizes.
_NAME_TOKEN = re.compile(r"(?:^|[-_/.])([0-9]+(?:\.[0-9]+)?)([KkMmBbTt])(?=$|[-_/.])")


@dataclass(frozen=True)
class Refusal:
    reason: Reason
    message: str


def parse_parameter_count(value: str | None) -> int | None:
    """'32B' → 32_000_000_000; None or a malformed value → None."""
    if not value:
        return None
    match = _COUNT.match(value.strip())
    if not match:
        return None
    return int(float(match.group(1)) * _MAGNITUDE[match.group(2).lower()])


def parameter_count_from_name(model_name: str) -> int | None:
    """The size token of a model name (the last one wins: the repo part comes after the org)."""
    tokens = _NAME_TOKEN.findall(model_name)
    if not tokens:
        return None
    number, magnitude = tokens[-1]
    return int(float(number) * _MAGNITUDE[magnitude.lower()])


def judged_parameter_count(order: InferenceService, facts: ModelFacts | None) -> int | None:
    """Catalog fact, then the order's value, then the model name's size token (phase 2.4.1)."""
    for candidate in (facts.parameterCount if facts else None, order.spec.model.parameterCount):
        count = parse_parameter_count(candidate)
        if count is not None:
            return count
    return parameter_count_from_name(order.spec.model.ref.name)


def format_count(count: int) -> str:
    for suffix, size in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if count >= size:
            value = count / size
            return f"{value:g}{suffix}"
    return str(count)


def class_is_ready(cls: InferenceServiceClass) -> bool:
    return any(c.type == ConditionType.READY and c.status == ConditionStatus.TRUE for c in cls.status.conditions)


def check_class(order: InferenceService, cls: InferenceServiceClass | None) -> Refusal | None:
    """Step 1 of the user guide: the class exists, is Ready, declares contracts, admits the namespace."""
    name = order.spec.inferenceServiceClassName
    if cls is None:
        return Refusal(
            Reason.CLASS_NOT_FOUND,
            f"InferenceServiceClass {name!r} does not exist. Check spec.inferenceServiceClassName against "
            "the classes your administrator ships (the bundled one is default-llm).",
        )
    if not cls.spec.modelPolicy.allowedEndpointTypes:
        return Refusal(
            Reason.CLASS_NOT_READY,
            f"InferenceServiceClass {name!r} declares no modelPolicy.allowedEndpointTypes, so no API contract "
            "can be picked. Ask your administrator to fix the class.",
        )
    if not class_is_ready(cls):
        return Refusal(
            Reason.CLASS_NOT_READY,
            f"InferenceServiceClass {name!r} is not Ready yet; the order waits for it. If it stays so, ask "
            "your administrator why the class did not validate.",
        )
    namespace = order.metadata.namespace or ""
    admission = cls.spec.admissionPolicy
    allowed = admission.allowedNamespaces if admission else ["*"]
    if "*" not in allowed and namespace not in allowed:
        return Refusal(
            Reason.NAMESPACE_NOT_ALLOWED,
            f"InferenceServiceClass {name!r} does not admit namespace {namespace!r} "
            f"(admissionPolicy.allowedNamespaces: {', '.join(allowed) or 'none'}). Use a class that admits "
            "your namespace, or ask your administrator to add it.",
        )
    return None


def pick_endpoint_type(cls: InferenceServiceClass, facts: ModelFacts | None) -> EndpointType | None:
    """First element of the class's list narrowed by what the model can serve.

    A source without facts (a bare Hugging Face reference) narrows nothing: the whole list stands.
    """
    allowed = list(cls.spec.modelPolicy.allowedEndpointTypes)
    if facts is None or not facts.endpointTypes:
        return allowed[0] if allowed else None
    offered = set(facts.endpointTypes)
    effective = [t for t in allowed if t in offered]
    return effective[0] if effective else None


def check_model_policy(order: InferenceService, cls: InferenceServiceClass, facts: ModelFacts | None) -> Refusal | None:
    """The class's modelPolicy against what the order's path resolved about the model."""
    policy = cls.spec.modelPolicy
    class_name = cls.metadata.name
    model = order.spec.model.ref.name
    if pick_endpoint_type(cls, facts) is None:
        offered = ", ".join(facts.endpointTypes) if facts else "nothing"
        return Refusal(
            Reason.ENDPOINT_TYPE_POLICY_CONFLICT,
            f"Model {model!r} serves {offered}, class {class_name!r} allows "
            f"{', '.join(policy.allowedEndpointTypes)}: they do not intersect. Use a class that allows a "
            "contract the model serves.",
        )
    if policy.allowedFormats:
        refusal = _check_format(model, class_name, policy.allowedFormats, facts)
        if refusal is not None:
            return refusal
    limit = parse_parameter_count(policy.maxParameterCount)
    if limit is not None:
        count = judged_parameter_count(order, facts)
        if count is None:
            return Refusal(
                Reason.PARAMETER_COUNT_NOT_ALLOWED,
                f"Class {class_name!r} admits models up to {policy.maxParameterCount}, and the size of "
                f"{model!r} is unknown: the catalog has no fact and the name carries no size token. On the "
                "direct path set spec.model.parameterCount (e.g. 7B).",
            )
        if count > limit:
            return Refusal(
                Reason.PARAMETER_COUNT_NOT_ALLOWED,
                f"Model {model!r} has {format_count(count)} parameters; class {class_name!r} admits at most "
                f"{policy.maxParameterCount}. Choose a smaller model, or another class.",
            )
    return None


# Formats a repository name announces by its tokens. A GGUF repository holds GGUF files; an AWQ or
# GPTQ repository holds safetensors quantized that way (a class may name either word).
_FORMAT_TOKENS: dict[str, frozenset[str]] = {
    "gguf": frozenset({"gguf"}),
    "awq": frozenset({"awq", "safetensors"}),
    "gptq": frozenset({"gptq", "safetensors"}),
}


def formats_from_name(model_name: str) -> frozenset[str]:
    """The formats a model's name announces ("Qwen2.5-7B-Instruct-GGUF" → gguf); empty when it says none."""
    tokens = {t for t in re.split(r"[-_/.]", model_name.lower()) if t}
    found: set[str] = set()
    for token, formats in _FORMAT_TOKENS.items():
        if token in tokens:
            found |= formats
    return frozenset(found)


def _check_format(model: str, class_name: str, allowed_formats: list[str], facts: ModelFacts | None) -> Refusal | None:
    allowed = {f.lower() for f in allowed_formats}
    admitted = ", ".join(allowed_formats)
    if facts is not None and facts.format:
        if facts.format.lower() in allowed:
            return None
        return Refusal(
            Reason.FORMAT_NOT_ALLOWED,
            f"Model {model!r} is in format {facts.format!r}; class {class_name!r} admits {admitted}. "
            "Choose a model in an admitted format, or another class.",
        )
    # The direct path: no catalog fact, so the name's tokens are all there is to judge by.
    announced = formats_from_name(model)
    if not announced:
        return Refusal(
            Reason.FORMAT_NOT_ALLOWED,
            f"Class {class_name!r} admits the formats {admitted}, and the format of {model!r} is unknown: the "
            "catalog has no fact and the name carries no format token (GGUF, AWQ, GPTQ). Order it from the "
            "catalog (src: ai-models), whose facts name its format, or use a class that admits any format.",
        )
    if announced & allowed:
        return None
    return Refusal(
        Reason.FORMAT_NOT_ALLOWED,
        f"Model {model!r} is, by its name, in format {' or '.join(sorted(announced))}; class {class_name!r} "
        f"admits {admitted}. Choose a model in an admitted format, or another class.",
    )


def check_catalog_enabled(order: InferenceService, catalog_enabled: bool) -> Refusal | None:
    if order.spec.model.src == ModelSource.AI_MODELS and not catalog_enabled:
        return Refusal(
            Reason.CATALOG_DISABLED,
            "Catalog integration is off in the module settings (catalog.mode: None) and this order names a "
            "catalog model. Use src: HuggingFace, or ask your administrator to set catalog.mode: Enabled.",
        )
    return None
