"""docs/reference.md is generated from the API types and never drifts from them."""

from __future__ import annotations

import re
from typing import Any, get_args, get_origin

import pytest
from pydantic import BaseModel

from inference_api import reference
from inference_api.types import (
    InferenceServiceClassSpec,
    InferenceServiceClassStatus,
    InferenceServiceSpec,
    InferenceServiceStatus,
)


def test_committed_reference_equals_the_generated_text() -> None:
    committed = reference.REFERENCE_PATH.read_text()
    stale = "docs/reference.md is stale: run `python -m inference_api.reference`"
    assert committed == reference.render_reference(), stale


def test_check_mode_reports_a_stale_file(tmp_path: Any) -> None:
    stale = tmp_path / "reference.md"
    stale.write_text("# out of date\n")
    assert reference.main(["--check", "--output", str(stale)]) == 1
    assert reference.main(["--output", str(stale)]) == 0
    assert reference.main(["--check", "--output", str(stale)]) == 0


def _fields(model: type[BaseModel], prefix: str) -> list[tuple[str, str]]:
    """Every (path, description) of a model, nested models and lists of models included."""
    out: list[tuple[str, str]] = []
    for name, field in model.model_fields.items():
        path = f"{prefix}.{name}"
        out.append((path, field.description or ""))
        annotation = field.annotation
        if get_origin(annotation) is list:
            (item,) = get_args(annotation)
            if isinstance(item, type) and issubclass(item, BaseModel):
                out += _fields(item, f"{path}[]")
            continue
        for candidate in get_args(annotation) or (annotation,):
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                out += _fields(candidate, path)
    return out


@pytest.mark.parametrize(
    ("kind", "model", "prefix"),
    [
        ("InferenceService", InferenceServiceSpec, "spec"),
        ("InferenceService", InferenceServiceStatus, "status"),
        ("InferenceServiceClass", InferenceServiceClassSpec, "spec"),
        ("InferenceServiceClass", InferenceServiceClassStatus, "status"),
    ],
)
def test_every_field_is_documented_with_its_description(kind: str, model: type[BaseModel], prefix: str) -> None:
    text = reference.REFERENCE_PATH.read_text()
    section = text.split(f"\n## {kind}\n", 1)[1].split("\n## ", 1)[0]
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `([^`]+)` \| [^|]+ \| [^|]* \| (.*) \|$", section, re.M)}
    fields = _fields(model, prefix)
    assert fields
    for path, description in fields:
        assert path in rows, f"{kind} {path} is missing from docs/reference.md"
        assert description, f"{kind} {path} has no description in inference_api/types.py"
        assert " ".join(description.replace("|", "\\|").split()) in rows[path], path


def test_every_write_time_rule_message_is_listed() -> None:
    from inference_api.crd import MODULE_CRDS, build_crd

    text = reference.REFERENCE_PATH.read_text()
    messages: list[str] = []

    def collect(node: Any) -> None:
        if isinstance(node, dict):
            messages.extend(rule["message"] for rule in node.get("x-kubernetes-validations", []))
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    for spec in MODULE_CRDS:
        collect(build_crd(spec))
    assert len(messages) >= 10
    for message in messages:
        assert message in text
