"""The chart as a platform team expects it: a values schema that refuses what it does not list, the
version label on every object, PodDisruptionBudgets, scheduling and annotations of the module's pods,
the embedded Temporal server (the local stack's `temporal server start-dev`) or an existing
one, and the module settings of the order workloads (image registry, pull secrets, GPU nodes) as the
worker reads them and the StatefulSet builder applies them."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest
import yaml

from activities.builders.statefulset import build_statefulset
from inference_api.settings import ModuleSettings, WorkloadSettings
from tests import factories as f
from tests.chart.helm import (
    CHART_DIR,
    MONITORING_APIS,
    NAMESPACE,
    Doc,
    Helm,
    container_env,
    find,
    of_kind,
    template_args,
)
from workflows.search_attributes import dev_server_flags

COMPONENTS = ("worker", "watcher", "planner")
SCHEMA = json.loads((CHART_DIR / "values.schema.json").read_text())
VALUES = yaml.safe_load((CHART_DIR / "values.yaml").read_text())


@pytest.fixture(scope="module")
def docs(helm: Helm) -> list[Doc]:
    return helm.render(api_versions=MONITORING_APIS)


def _settings_of(deployment: Doc, monkeypatch: pytest.MonkeyPatch) -> ModuleSettings:
    for key in list(os.environ):
        if key.upper().startswith("AI_INFERENCE_"):
            monkeypatch.delenv(key)
    for key, value in container_env(deployment).items():
        monkeypatch.setenv(key, value)
    return ModuleSettings()


# -- the values schema ------------------------------------------------------------------------


def _schema_paths(node: dict[str, Any], prefix: str = "") -> list[str]:
    """Every object of the schema that lists its properties, by path; each must close itself."""
    paths = []
    if "properties" in node:
        paths.append(prefix or "/")
        for key, sub in node["properties"].items():
            paths += _schema_paths(sub, f"{prefix}/{key}")
    for sub in node.get("allOf", []) + node.get("anyOf", []):
        paths += _schema_paths(sub, prefix)
    if isinstance(node.get("items"), dict):
        paths += _schema_paths(node["items"], f"{prefix}[]")
    return paths


def _leaves(node: Any, prefix: str = "") -> list[str]:
    if isinstance(node, dict) and node:
        return [leaf for k, v in node.items() for leaf in _leaves(v, f"{prefix}{k}.")]
    return [prefix.rstrip(".")]


def _schema_at(path: str) -> dict[str, Any] | None:
    node: dict[str, Any] | None = SCHEMA
    for part in path.split("."):
        if node is not None and part in node.get("properties", {}):
            node = node["properties"][part]
        elif node is not None and isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]  # a map (resources.requests, nodeSelector)
        else:
            return None
    return node


def test_every_value_is_in_the_schema_and_every_object_refuses_unknown_keys() -> None:
    missing = [leaf for leaf in _leaves(VALUES) if _schema_at(leaf) is None]
    assert missing == []
    # `global` is the platform's (Deckhouse fills it with far more than the module reads): open.
    open_objects = {p for p in _schema_paths(SCHEMA) if p == "/global" or p.startswith("/global/")}
    for path in _schema_paths(SCHEMA):
        node = SCHEMA
        for part in [p for p in path.replace("[]", "/[]").split("/") if p]:
            node = node["items"] if part == "[]" else node["properties"][part]
        if path in open_objects:
            continue
        assert node.get("additionalProperties") is False, path


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ({"aiInference.catalog.mod": "None"}, "additional properties 'mod' not allowed"),
        ({"catalog.mode": "None"}, "additional properties 'catalog' not allowed"),
        ({"workr.replicas": 2}, "additional properties 'workr' not allowed"),
        ({"aiInference.temporal.embeded.enabled": False}, "additional properties 'embeded' not allowed"),
        ({"worker.resources.limit": {"memory": "1Gi"}}, "additional properties 'limit' not allowed"),
        ({"podSecurityContext.runAsUsr": 1000}, "additional properties 'runAsUsr' not allowed"),
        ({"aiInference.workload.tolerations": [{"key": "gpu", "efect": "NoSchedule"}]}, "'efect' not allowed"),
        ({"global.modules.publicDomainTemplate": "ai.example.com"}, "/global/modules/publicDomainTemplate"),
    ],
)
def test_a_typo_is_refused_by_helm(helm: Helm, values: dict[str, Any], error: str) -> None:
    result = helm(*template_args(values), check=False)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert error in result.stderr


def test_an_existing_temporal_needs_the_embedded_server_off(helm: Helm) -> None:
    result = helm(*template_args({"aiInference.temporal.address": "temporal.example:7233"}), check=False)
    assert result.returncode != 0
    assert "set embedded.enabled: false to use an existing Temporal" in result.stderr
    result = helm(*template_args({"aiInference.temporal.embedded.enabled": False}), check=False)
    assert result.returncode != 0
    assert "aiInference.temporal.address is required" in result.stderr


# -- labels, PDBs, scheduling, NOTES ----------------------------------------------------------


def test_every_object_carries_the_version_label(docs: list[Doc]) -> None:
    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    for doc in docs:
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/version"] == chart["appVersion"], (doc["kind"], doc["metadata"]["name"])
        template = doc.get("spec", {}).get("template", {})
        if "metadata" in template:
            assert template["metadata"]["labels"]["app.kubernetes.io/version"] == chart["appVersion"]


def test_each_process_has_a_disruption_budget_over_its_pods(docs: list[Doc], helm: Helm) -> None:
    for component in COMPONENTS:
        pdb = find(docs, "PodDisruptionBudget", f"ai-inference-{component}")
        assert pdb["spec"]["maxUnavailable"] == 1
        pods = find(docs, "Deployment", f"ai-inference-{component}")["spec"]["template"]["metadata"]["labels"]
        assert pdb["spec"]["selector"]["matchLabels"].items() <= pods.items()
    docs = helm.render({"worker.podDisruptionBudget.enabled": False, "planner.podDisruptionBudget.maxUnavailable": 0})
    assert {d["metadata"]["name"] for d in of_kind(docs, "PodDisruptionBudget")} == {
        "ai-inference-watcher",
        "ai-inference-planner",
    }
    assert find(docs, "PodDisruptionBudget", "ai-inference-planner")["spec"]["maxUnavailable"] == 0


SCHEDULING = {
    "nodeSelector": {"node-role.deckhouse.io/system": ""},
    "tolerations": [{"key": "dedicated.deckhouse.io", "operator": "Equal", "value": "system", "effect": "NoSchedule"}],
    "affinity": {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": {}}}
            ]
        }
    },
    "topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}
    ],
    "podAnnotations": {"example.com/team": "platform"},
}


def test_the_module_pods_take_scheduling_and_annotations_from_values(helm: Helm) -> None:
    docs = helm.render(SCHEDULING)
    pods = [find(docs, "Deployment", f"ai-inference-{c}") for c in COMPONENTS]
    pods.append(find(docs, "StatefulSet", "ai-inference-temporal"))
    for workload in pods:
        template = workload["spec"]["template"]
        spec = template["spec"]
        assert spec["nodeSelector"] == SCHEDULING["nodeSelector"]
        assert spec["tolerations"] == SCHEDULING["tolerations"]
        assert spec["affinity"] == SCHEDULING["affinity"]
        (spread,) = spec["topologySpreadConstraints"]
        # No labelSelector given: the pod's own component selector, so replicas spread among themselves.
        assert spread["labelSelector"] == {"matchLabels": workload["spec"]["selector"]["matchLabels"]}
        assert spread["maxSkew"] == 1
        assert template["metadata"]["annotations"] == SCHEDULING["podAnnotations"]


# -- Temporal: embedded or existing -----------------------------------------------------------


def test_the_embedded_temporal_is_the_local_stacks_dev_server_on_a_volume(docs: list[Doc]) -> None:
    sts = find(docs, "StatefulSet", "ai-inference-temporal")
    assert sts["spec"]["replicas"] == 1
    pod = sts["spec"]["template"]["spec"]
    container, _tls_proxy = pod["containers"]  # the mTLS terminator: tests/chart/test_temporal_tls.py
    args = container["args"]
    assert container["command"] == ["temporal"]
    assert args[:2] == ["server", "start-dev"]
    assert args[args.index("--db-filename") + 1] == "/var/lib/temporal/temporal.db"
    # On the pod's loopback only, behind the terminator.
    assert args[args.index("--ip") + 1] == "127.0.0.1"
    assert (args[args.index("--port") + 1], args[args.index("--ui-port") + 1]) == ("7234", "8233")
    assert args[args.index("--namespace") + 1] == "default"
    # The same search attributes the local stack registers (the worker registers them too).
    flags = dev_server_flags()
    registered = [args[i : i + 2] for i, a in enumerate(args) if a == "--search-attribute"]
    assert registered == [flags[i : i + 2] for i in range(0, len(flags), 2)]
    # Its database on a claim of its own; the same lockdown as the module's other pods.
    assert {"name": "data", "mountPath": "/var/lib/temporal"} in container["volumeMounts"]
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data"
    assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"
    assert "storageClassName" not in claim["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["automountServiceAccountToken"] is False
    service = find(docs, "Service", "ai-inference-temporal")
    assert [(p["name"], p["port"]) for p in service["spec"]["ports"]] == [("grpc", 7233)]
    assert service["spec"]["selector"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()


def test_the_embedded_image_is_the_cli_the_local_stack_runs() -> None:
    from devstack.temporal_dev import temporal_binary

    version = subprocess.run([str(temporal_binary()), "--version"], capture_output=True, text=True, check=True)
    image = VALUES["aiInference"]["temporal"]["embedded"]["image"]
    assert image["repository"] == "temporalio/temporal"
    assert version.stdout.split()[2] == image["tag"], version.stdout


def test_the_processes_get_the_embedded_address_or_the_existing_one(
    helm: Helm, docs: list[Doc], monkeypatch: pytest.MonkeyPatch
) -> None:
    for component in ("worker", "watcher"):
        settings = _settings_of(find(docs, "Deployment", f"ai-inference-{component}"), monkeypatch)
        assert settings.temporal.address == f"ai-inference-temporal.{NAMESPACE}.svc:7233"
    external = helm.render(
        {
            "aiInference.temporal.embedded.enabled": False,
            "aiInference.temporal.address": "my-ns.a1b2c.tmprl.cloud:7233",
            "aiInference.temporal.namespace": "my-ns.a1b2c",
            "aiInference.temporal.tls.enabled": True,
            "aiInference.temporal.apiKey.secretName": "temporal-cloud",
        }
    )
    assert of_kind(external, "StatefulSet") == []
    assert [s["metadata"]["name"] for s in of_kind(external, "Service")] == ["ai-inference-planner"]
    for component in ("worker", "watcher"):
        temporal = _settings_of(find(external, "Deployment", f"ai-inference-{component}"), monkeypatch).temporal
        assert temporal.address == "my-ns.a1b2c.tmprl.cloud:7233"
        assert temporal.namespace == "my-ns.a1b2c"
        assert temporal.tls.enabled is True
        assert temporal.apiKeyFile == "/etc/ai-inference/temporal-api-key/api-key"
    headless = helm.render({"aiInference.temporal.embedded.ui.enabled": False})
    args = find(headless, "StatefulSet", "ai-inference-temporal")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--headless" in args
    assert "--ui-port" not in args
    assert [p["name"] for p in find(headless, "Service", "ai-inference-temporal")["spec"]["ports"]] == ["grpc"]


# -- the order workloads' settings ------------------------------------------------------------


WORKLOAD = {
    "imageRegistry": "mirror.example.com/ai",
    "imagePullSecrets": ["mirror-pull"],
    "nodeSelector": {"node.deckhouse.io/group": "gpu"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
}


def test_workload_values_reach_the_worker_and_the_runtime_pods(helm: Helm, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = helm.render({f"aiInference.workload.{k}": v for k, v in WORKLOAD.items()})
    settings = _settings_of(find(docs, "Deployment", "ai-inference-worker"), monkeypatch)
    assert settings.workload == WorkloadSettings(**WORKLOAD)
    sts = build_statefulset(f.inputs(settings=settings))
    pod = sts["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "mirror-pull"}]
    assert pod["nodeSelector"] == WORKLOAD["nodeSelector"]
    assert pod["tolerations"] == WORKLOAD["tolerations"]
    recipe_image = f.plan().recipe.image
    for container in (*pod["initContainers"], *pod["containers"]):
        assert container["image"] == settings.workload.image(recipe_image)
        assert container["image"].startswith("mirror.example.com/ai/")
    # Nothing set: the pods as the recipe and the class make them.
    plain = build_statefulset(f.inputs(settings=ModuleSettings(workload=WorkloadSettings())))["spec"]["template"][
        "spec"
    ]
    assert not {"imagePullSecrets", "nodeSelector", "tolerations"} & set(plain)
    assert plain["containers"][0]["image"] == recipe_image


@pytest.mark.parametrize(
    ("registry", "image", "pulled"),
    [
        ("", "vllm/vllm-openai:v0.33.0", "vllm/vllm-openai:v0.33.0"),
        ("mirror.example.com/ai", "vllm/vllm-openai:v0.33.0", "mirror.example.com/ai/vllm/vllm-openai:v0.33.0"),
        (
            "mirror.example.com/ai/",
            "docker.io/vllm/vllm-openai:v0.33.0",
            "mirror.example.com/ai/vllm/vllm-openai:v0.33.0",
        ),
        ("registry.local:5000", "ghcr.io/org/runtime@sha256:ab", "registry.local:5000/org/runtime@sha256:ab"),
        ("registry.local:5000", "localhost/runtime:1", "registry.local:5000/runtime:1"),
        ("registry.local:5000", "runtime:1", "registry.local:5000/runtime:1"),
    ],
)
def test_the_image_registry_replaces_the_recipe_images_registry(registry: str, image: str, pulled: str) -> None:
    assert WorkloadSettings(imageRegistry=registry).image(image) == pulled


def test_the_platforms_public_domain_template_reaches_the_worker(helm: Helm, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = helm.render({"global.modules.publicDomainTemplate": "%s.apps.example.com"})
    env = container_env(find(docs, "Deployment", "ai-inference-worker"))
    assert env["AI_INFERENCE_EXPOSURE__PUBLICDOMAINTEMPLATE"] == "%s.apps.example.com"
    assert env["AI_INFERENCE_EXPOSURE__DOMAINTEMPLATE"] == "{name}.{namespace}.ai.example.com"
    # None set: only the module's own template.
    plain = container_env(find(helm.render(), "Deployment", "ai-inference-worker"))
    assert "AI_INFERENCE_EXPOSURE__PUBLICDOMAINTEMPLATE" not in plain
