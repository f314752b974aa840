"""The committed CRDs are what the types generate, and the CEL rules judge the fixtures right."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml

from inference_api.crd import MODULE_CRDS, build_crd, crd_files
from inference_api.types import InferenceServiceClassSpec, InferenceServiceSpec
from tests.crd.cases import ALL_CASES, Case

CRD_DIR = Path(__file__).resolve().parents[2] / "deploy" / "crds"


def test_committed_crds_equal_the_generated_ones() -> None:
    for name, text in crd_files().items():
        assert (CRD_DIR / name).read_text() == text, f"{name} is stale: run `ai-inference crds`"


def _walk(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    nodes = [(path, schema)]
    for name, sub in schema.get("properties", {}).items():
        nodes += _walk(sub, f"{path}.{name}")
    if "items" in schema:
        nodes += _walk(schema["items"], f"{path}[]")
    return nodes


@pytest.mark.parametrize("spec", MODULE_CRDS, ids=lambda s: s.kind)
def test_every_field_has_a_description(spec: Any) -> None:
    schema = build_crd(spec)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    missing = [
        p
        for p, node in _walk(schema["properties"]["spec"], ".spec")
        if "description" not in node and not p.endswith("[]")
    ]
    missing += [
        p
        for p, node in _walk(schema["properties"]["status"], ".status")
        if "description" not in node and not p.endswith("[]")
    ]
    assert missing == []


@pytest.mark.parametrize("spec", MODULE_CRDS, ids=lambda s: s.kind)
def test_schema_is_structural(spec: Any) -> None:
    text = yaml.safe_dump(build_crd(spec))
    for forbidden in ("$ref", "anyOf", "allOf", "oneOf", "uniqueItems", "title:", "type: 'null'"):
        assert forbidden not in text


def _values_at(obj: Any, path: list[str]) -> list[Any]:
    """Values of obj at a schema path ('[]' steps into every item)."""
    if not path:
        return [obj]
    head, rest = path[0], path[1:]
    if head == "[]":
        return [v for item in (obj or []) for v in _values_at(item, rest)]
    if isinstance(obj, dict) and head in obj:
        return _values_at(obj[head], rest)
    return []


def _cel_refusals(case: Case) -> list[str]:
    spec = next(s for s in MODULE_CRDS if s.kind == case.kind)
    schema = build_crd(spec)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    env = celpy.Environment()
    messages = []
    for path, node in _walk(schema["properties"]["spec"], "spec"):
        for rule in node.get("x-kubernetes-validations", []):
            steps = [p for p in path.replace("[]", ".[]").split(".") if p]
            for value in _values_at(case.body, steps):
                program = env.program(env.compile(rule["rule"]))
                if not bool(program.evaluate({"self": celpy.json_to_cel(value)})):
                    messages.append(rule["message"])
    return messages


@pytest.mark.parametrize("case", [c for c in ALL_CASES if c.via == "cel"], ids=lambda c: c.id)
def test_cel_rules_judge_the_fixture(case: Case) -> None:
    refusals = _cel_refusals(case)
    if case.error is None:
        assert refusals == []
    else:
        assert any(case.error in m for m in refusals), refusals


@pytest.mark.parametrize("case", [c for c in ALL_CASES if c.via == "schema"], ids=lambda c: c.id)
def test_schema_refusals_are_refused_by_the_types_too(case: Case) -> None:
    model = InferenceServiceSpec if case.kind == "InferenceService" else InferenceServiceClassSpec
    with pytest.raises(ValueError, match="validation error"):
        model.model_validate(case.body["spec"])


@pytest.mark.parametrize("case", [c for c in ALL_CASES if c.error is None], ids=lambda c: c.id)
def test_valid_fixtures_parse_into_the_types(case: Case) -> None:
    model = InferenceServiceSpec if case.kind == "InferenceService" else InferenceServiceClassSpec
    model.model_validate(case.body["spec"])


def _name_refusals(name: str) -> list[str]:
    spec = next(s for s in MODULE_CRDS if s.kind == "InferenceService")
    schema = build_crd(spec)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    env = celpy.Environment()
    subject = celpy.json_to_cel({"metadata": {"name": name}})
    return [
        rule["message"]
        for rule in schema["x-kubernetes-validations"]
        if not bool(env.program(env.compile(rule["rule"])).evaluate({"self": subject}))
    ]


@pytest.mark.parametrize(
    ("name", "refusal"),
    [
        ("support-llm", None),
        ("a" * 52, None),
        ("a" * 53, "at most 52 characters"),
        ("qwen2.5-chat", "must start with a letter and contain only lowercase letters, digits and '-' (no '.')"),
        ("1chat", "must start with a letter"),
        ("chat-", "must start with a letter"),
    ],
)
def test_order_names_that_cannot_name_a_service_are_refused(name: str, refusal: str | None) -> None:
    refusals = _name_refusals(name)
    if refusal is None:
        assert refusals == []
    else:
        assert len(refusals) == 1
        assert refusal in refusals[0]
        assert refusals[0].startswith("metadata.name: ")
