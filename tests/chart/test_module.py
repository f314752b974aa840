"""The chart directory is also the Deckhouse module: module.yaml (requirements, editions, the disable
confirmation), openapi/config-values.yaml (the ModuleConfig's one setting) and openapi/values.yaml (the
internal values), and ONE set of templates rendered both ways — by plain Helm from values.yaml and by
Deckhouse from values shaped as Deckhouse passes them (``aiInference`` from the ModuleConfig and the
openapi defaults, ``global`` from the platform)."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.chart.helm import CHART_DIR, KUBE_VERSION, NAMESPACE, RELEASE, Doc, Helm, container_env, find, of_kind

EXAMPLES = CHART_DIR.parents[2] / "deploy" / "examples" / "moduleconfig"
OPENAPI = CHART_DIR / "openapi"
CONFIG_VALUES = yaml.safe_load((OPENAPI / "config-values.yaml").read_text())
INTERNAL_VALUES = yaml.safe_load((OPENAPI / "values.yaml").read_text())
VALUES = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
SCHEMA = json.loads((CHART_DIR / "values.schema.json").read_text())
DIGEST = "sha256:" + "ab" * 32
DOCKERCFG = base64.b64encode(b'{"auths":{"registry.example.com":{"auth":"dXNlcjpwYXNz"}}}').decode()


def _module_config(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    return doc


def _shape(node: Any) -> Any:
    """A schema without what only documents it (description, default, examples): the shape that validates."""
    if isinstance(node, dict):
        return {k: _shape(v) for k, v in node.items() if k not in {"description", "default"} and not k.startswith("x-")}
    if isinstance(node, list):
        return [_shape(v) for v in node]
    return node


def _defaults(schema: dict[str, Any]) -> Any:
    """What Deckhouse makes of an empty object with this schema: every default, nested objects included."""
    if schema.get("type") == "object" and "properties" in schema:
        out = {k: _defaults(sub) for k, sub in schema["properties"].items()}
        return {k: v for k, v in out.items() if v is not None}
    return copy.deepcopy(schema.get("default"))


def _module_schema() -> dict[str, Any]:
    """config-values.yaml and values.yaml (which x-extends it) as one schema of .Values.aiInference."""
    merged = copy.deepcopy(INTERNAL_VALUES)
    merged.pop("x-extend")
    merged["properties"] = {**CONFIG_VALUES["properties"], **merged["properties"]}
    return merged


def deckhouse_values(module_config: dict[str, Any]) -> dict[str, Any]:
    """The values Deckhouse renders the module with, for this ModuleConfig: its settings over the
    openapi defaults at ``aiInference``, the platform's at ``global``."""
    settings = module_config["spec"].get("settings") or {}
    module = _defaults(_module_schema())
    for key, value in settings.items():
        module[key] = {**module.get(key, {}), **value}
    return {
        "aiInference": module,
        "global": {
            "deckhouseVersion": "1.75.0",
            "deckhouseEdition": "EE",
            "enabledModules": ["cert-manager", "prometheus", "ai-models", "ai-inference"],
            "discovery": {"clusterDomain": "cluster.local", "kubernetesVersion": "1.34.4"},
            "modules": {"publicDomainTemplate": "%s.example.com", "https": {"mode": "CertManager"}},
            "modulesImages": {
                "registry": {"base": "registry.example.com/deckhouse/ee/modules/ai-inference", "dockercfg": DOCKERCFG},
                "digests": {"aiInference": {"aiInference": DIGEST}},
            },
        },
    }


def render_values(helm: Helm, values: dict[str, Any], tmp_path: Path) -> list[Doc]:
    path = tmp_path / "deckhouse-values.yaml"
    path.write_text(yaml.safe_dump(values))
    out = helm(
        "template",
        RELEASE,
        str(CHART_DIR),
        "--namespace",
        NAMESPACE,
        "--kube-version",
        KUBE_VERSION,
        "--values",
        str(path),
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


# -- module.yaml ------------------------------------------------------------------------------


def test_module_yaml_states_the_admin_guides_requirements_and_the_disable_confirmation() -> None:
    module = yaml.safe_load((CHART_DIR / "module.yaml").read_text())
    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    assert module["name"] == chart["name"] == "ai-inference"
    assert module["namespace"] == VALUES["namespace"] == NAMESPACE
    assert module["requirements"] == {"deckhouse": ">= 1.75", "kubernetes": ">= 1.34"}
    assert chart["kubeVersion"] == ">=1.34.0-0"
    editions = module["accessibility"]["editions"]
    assert editions["_default"] == {"available": False}
    assert {e for e, v in editions.items() if v.get("available")} == {"fe", "ee"}
    assert module["stage"] == chart["annotations"]["ai.deckhouse.io/stage"]
    assert module["disable"]["confirmation"] is True
    message = module["disable"]["message"]
    # What disabling does (templates/disable/, worker/disable.py), and how to remove everything instead.
    for text in (
        "controller and the resource planner",
        "request runtime",
        "published endpoint",
        "InferenceServiceClass objects stay",
        "ModuleDisabled",
        "finalizer",
        "Enabling the module again serves every order again",
        "--all -A",
    ):
        assert text in message
    assert message.index("delete the InferenceServices") < message.index("and then the InferenceServiceClasses")


# -- openapi ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["moduleconfig-minimal.yaml", "moduleconfig-without-catalog.yaml"])
def test_the_examples_module_configs_validate_against_config_values(name: str) -> None:
    module_config = _module_config(name)
    assert module_config["kind"] == "ModuleConfig"
    assert module_config["metadata"]["name"] == "ai-inference"
    assert module_config["spec"]["version"] == 1
    jsonschema.validate(module_config["spec"].get("settings") or {}, CONFIG_VALUES)


@pytest.mark.parametrize(
    "settings",
    [{"catalog": {"mode": "Disabled"}}, {"catalog": {"mod": "None"}}, {"temporal": {"address": "x:7233"}}],
)
def test_config_values_refuse_what_the_module_config_cannot_say(settings: dict[str, Any]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(settings, CONFIG_VALUES)


def test_openapi_schemas_are_the_charts_schema_and_defaults() -> None:
    """One description of .Values.aiInference: Deckhouse's openapi and the chart's values.schema.json
    validate the same shape, and the openapi defaults are values.yaml's."""
    chart_module = SCHEMA["properties"]["aiInference"]
    assert _shape(_module_schema()["properties"]) == _shape(chart_module["properties"])
    assert INTERNAL_VALUES["x-extend"] == {"schema": "config-values.yaml"}
    assert _defaults(_module_schema()) == VALUES["aiInference"]
    jsonschema.validate(VALUES["aiInference"], _module_schema())


# -- one set of templates, two renderers -------------------------------------------------------


def test_deckhouse_renders_the_same_objects_plus_its_namespace_and_registry_secret(helm: Helm, tmp_path: Path) -> None:
    # The CRD upgrade hook is plain Helm's only (Deckhouse applies crds/ itself): tests/chart/test_crd_upgrade.py.
    # The disable hook (pre-delete) is both's: Deckhouse deletes the release with Helm (tests/chart/test_disable.py).
    plain = [d for d in helm.render() if d["metadata"].get("annotations", {}).get("helm.sh/hook") != "pre-upgrade"]
    deckhouse = render_values(helm, deckhouse_values(_module_config("moduleconfig-minimal.yaml")), tmp_path)
    keys = {(d["kind"], d["metadata"]["name"]) for d in plain}
    extra = {(d["kind"], d["metadata"]["name"]) for d in deckhouse} - keys
    assert extra == {("Namespace", NAMESPACE), ("Secret", "ai-inference-registry")}
    assert keys <= {(d["kind"], d["metadata"]["name"]) for d in deckhouse}
    # The module's image from the platform's registry, by digest, pulled with its credentials.
    image = f"registry.example.com/deckhouse/ee/modules/ai-inference@{DIGEST}"
    registry = find(deckhouse, "Secret", "ai-inference-registry")
    assert registry["type"] == "kubernetes.io/dockerconfigjson"
    assert registry["data"][".dockerconfigjson"] == DOCKERCFG
    for component in ("worker", "watcher", "planner"):
        pod = find(deckhouse, "Deployment", f"ai-inference-{component}")["spec"]["template"]["spec"]
        assert pod["containers"][0]["image"] == image
        assert {"name": "ai-inference-registry"} in pod["imagePullSecrets"]
        plain_pod = find(plain, "Deployment", f"ai-inference-{component}")["spec"]["template"]["spec"]
        assert plain_pod["containers"][0]["image"] == "ai-inference:0.1.0"
        assert "imagePullSecrets" not in plain_pod
    # The platform's public domain reaches the worker; the embedded Temporal is on in both.
    env = container_env(find(deckhouse, "Deployment", "ai-inference-worker"))
    assert env["AI_INFERENCE_EXPOSURE__PUBLICDOMAINTEMPLATE"] == "%s.example.com"
    assert env["AI_INFERENCE_CATALOG__MODE"] == "Enabled"
    assert env["AI_INFERENCE_TEMPORAL__ADDRESS"] == f"ai-inference-temporal.{NAMESPACE}.svc:7233"
    find(deckhouse, "StatefulSet", "ai-inference-temporal")


def test_the_module_config_without_catalog_drops_the_catalog_rbac_in_the_deckhouse_render(
    helm: Helm, tmp_path: Path
) -> None:
    docs = render_values(helm, deckhouse_values(_module_config("moduleconfig-without-catalog.yaml")), tmp_path)
    assert "catalog-reader" not in {d["metadata"]["name"].rsplit(":", 1)[-1] for d in of_kind(docs, "ClusterRole")}
    for component in ("worker", "watcher", "planner"):
        assert (
            container_env(find(docs, "Deployment", f"ai-inference-{component}"))["AI_INFERENCE_CATALOG__MODE"] == "None"
        )


def test_a_typo_in_deckhouse_values_is_refused_too(helm: Helm, tmp_path: Path) -> None:
    values = deckhouse_values(_module_config("moduleconfig-minimal.yaml"))
    values["aiInference"]["catalog"]["mod"] = "None"
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(values))
    result = helm(
        "template", RELEASE, str(CHART_DIR), "--kube-version", KUBE_VERSION, "--values", str(path), check=False
    )
    assert result.returncode != 0
    assert "additional properties 'mod' not allowed" in result.stderr
