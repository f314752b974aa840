"""Generate CustomResourceDefinitions from the pydantic API types.

pydantic emits JSON Schema 2020-12; a CRD needs a structural OpenAPI v3 schema: every
``$ref`` inlined, ``Optional`` collapsed to the inner type, no ``title``/``null`` types,
``uniqueItems`` replaced by ``x-kubernetes-list-type``. Descriptions stay on every field so
``kubectl explain`` reads like the reference.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from inference_api import catalog_types, gpu_types
from inference_api.crd_spec import AGE, CRDSpec, column
from inference_api.types import (
    CLASSES,
    ORDER_NAME_RULES,
    ORDERS,
    InferenceServiceClassSpec,
    InferenceServiceClassStatus,
    InferenceServiceSpec,
    InferenceServiceStatus,
)

_DROP_KEYS = {"title"}


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_resolve(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    while "$ref" in node or "anyOf" in node or ("allOf" in node and len(node["allOf"]) == 1):
        if "$ref" in node:
            target = copy.deepcopy(defs[node.pop("$ref").split("/")[-1]])
            # Sibling keywords of the $ref (a field's description) win over the model's docstring.
            target.update(node)
            node = target
        elif "anyOf" in node:
            options = [o for o in node.pop("anyOf") if o.get("type") != "null"]
            if len(options) != 1:
                raise ValueError(f"cannot express union {options!r} in a structural schema")
            node = {**options[0], **node}
        else:
            node = {**node.pop("allOf")[0], **node}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP_KEYS or key == "$defs" or (key == "default" and value is None):
            continue
        if key == "const":
            out["enum"] = [value]
            continue
        if key == "properties":
            out[key] = {name: _resolve(sub, defs) for name, sub in value.items()}
        else:
            out[key] = _resolve(value, defs)
    if out.get("type") == "object" and "additionalProperties" in out and "properties" not in out:
        out["additionalProperties"] = _resolve(out["additionalProperties"], defs)
    elif "additionalProperties" in out and out["additionalProperties"] is False:
        del out["additionalProperties"]
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    return out


def structural_schema(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    resolved: dict[str, Any] = _resolve(raw, defs)
    return resolved


def build_crd(spec: CRDSpec) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "apiVersion": {"type": "string", "description": "APIVersion of the object."},
        "kind": {"type": "string", "description": "Kind of the object."},
        "metadata": {"type": "object"},
        "spec": structural_schema(spec.spec_model),
    }
    properties["spec"]["description"] = (spec.spec_model.__doc__ or "Desired state.").strip()
    version: dict[str, Any] = {
        "name": spec.version,
        "served": True,
        "storage": True,
        "additionalPrinterColumns": spec.columns,
    }
    if spec.status_model is not None:
        properties["status"] = structural_schema(spec.status_model)
        properties["status"]["description"] = (spec.status_model.__doc__ or "Observed state.").strip()
        version["subresources"] = {"status": {}}
    schema: dict[str, Any] = {
        "type": "object",
        "description": spec.description,
        "properties": properties,
    }
    if spec.spec_required:
        schema["required"] = ["spec"]
    if spec.root_rules:
        schema["x-kubernetes-validations"] = list(spec.root_rules)
    version["schema"] = {"openAPIV3Schema": schema}
    metadata: dict[str, Any] = {"name": spec.name}
    metadata["labels"] = {"module": "ai-inference", **spec.labels}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {
            "group": spec.group,
            "scope": spec.scope,
            "names": {
                "kind": spec.kind,
                "listKind": f"{spec.kind}List",
                "plural": spec.plural,
                "singular": spec.singular,
                "shortNames": spec.short_names,
                "categories": spec.categories,
            },
            "versions": [version],
        },
    }


MODULE_CRDS: list[CRDSpec] = [
    CRDSpec(
        kind="InferenceService",
        plural=ORDERS,
        singular="inferenceservice",
        scope="Namespaced",
        short_names=["infsvc"],
        description="An order for LLM inference: the name of an InferenceServiceClass and a model, nothing "
        "else. The platform validates it against the class, plans placement on GPUs, applies the workload "
        "and publishes the endpoint in status.",
        spec_model=InferenceServiceSpec,
        status_model=InferenceServiceStatus,
        root_rules=ORDER_NAME_RULES,
        columns=[
            column("Phase", ".status.phase", "Pending, Ready, Degraded or Failed."),
            column("Class", ".spec.inferenceServiceClassName", "The class the order is placed under."),
            column("Model", ".spec.model.ref.name", "The model reference."),
            column("Contract", ".status.model.endpointType", "The API contract the platform picked."),
            column("Reason", ".status.reason", "Why the order is not Ready, or what it carries."),
            column("URL", ".status.endpoint.url", "The endpoint.", priority=1),
            column("Device", ".status.resolved.deviceClass", "The device class planned.", priority=1),
            column("Share", ".status.resolved.sharePercent", "Percent of the device.", priority=1, kind="integer"),
            AGE,
        ],
    ),
    CRDSpec(
        kind="InferenceServiceClass",
        plural=CLASSES,
        singular="inferenceserviceclass",
        scope="Cluster",
        short_names=["infsvcclass"],
        description="An administrator's policy for InferenceService orders: which namespaces, models, API "
        "contracts, accelerators, exposure, replica bounds and update strategy an order of this class gets.",
        spec_model=InferenceServiceClassSpec,
        status_model=InferenceServiceClassStatus,
        columns=[
            column("Phase", ".status.phase", "Ready when the class validated."),
            column("Exposure", ".spec.exposurePolicy.type", "External or ClusterLocal."),
            column("Auth", ".spec.exposurePolicy.authentication", "Token or None."),
            column("Contracts", ".spec.modelPolicy.allowedEndpointTypes", "Allowed API contracts, in order."),
            AGE,
        ],
    ),
]

STAND_IN_CRDS: list[CRDSpec] = [*catalog_types.STAND_IN_CRDS, *gpu_types.STAND_IN_CRDS]


def render(spec: CRDSpec) -> str:
    return yaml.safe_dump(build_crd(spec), sort_keys=False, width=120)


# The Helm chart carries the module CRDs (not the stand-ins) in its crds/ folder.
CHART_CRDS_DIR = "../charts/ai-inference/crds"


def crd_files() -> dict[str, str]:
    """File name (under deploy/crds/) → YAML text; stand-ins go under deploy/crds/stand-ins/, and
    the module CRDs once more under the chart's crds/ (``../charts/ai-inference/crds/``)."""
    files = {f"{spec.name}.yaml": render(spec) for spec in MODULE_CRDS}
    files.update({f"stand-ins/{spec.name}.yaml": render(spec) for spec in STAND_IN_CRDS})
    files.update({f"{CHART_CRDS_DIR}/{spec.name}.yaml": render(spec) for spec in MODULE_CRDS})
    return files


def write_crds(directory: Path) -> list[Path]:
    written = []
    for name, text in crd_files().items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written
