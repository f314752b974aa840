"""The chart as helm lints and renders it: the bundled class is the admin guide's, the settings
reach the processes as the settings loader reads them, catalog.mode None drops the catalog RBAC,
the roles for people deny what the guide denies, the processes are least-privilege and locked
down, and the alerts and dashboards read the metrics the README names."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import yaml

from inference_api.settings import CatalogMode, CatalogTransport, ModuleSettings
from inference_api.types import (
    Authentication,
    EndpointType,
    ExposureType,
    HttpsMode,
    InferenceServiceClass,
    PlacementType,
    SharingMode,
    UpdateStrategy,
)
from tests.chart.helm import (
    CHART_DIR,
    KUBE_VERSION,
    MONITORING_APIS,
    NAMESPACE,
    Doc,
    Helm,
    container_env,
    find,
    of_kind,
    template_args,
)
from tests.examples import EXAMPLE_CLASSES, EXAMPLE_PRIORITY_CLASSES, EXAMPLES_DIR, example

COMPONENTS = ("worker", "watcher", "planner")
HUMAN_ROLES = {
    "d8:user-authz:ai-inference:user": "User",
    "d8:user-authz:ai-inference:privileged-user": "PrivilegedUser",
    "d8:user-authz:ai-inference:editor": "Editor",
    "d8:user-authz:ai-inference:admin": "Admin",
    "d8:user-authz:ai-inference:cluster-editor": "ClusterEditor",
    "d8:user-authz:ai-inference:cluster-admin": "ClusterAdmin",
}
RBACV2_ROLES = (
    "d8:use:capability:module:ai-inference:view",
    "d8:use:capability:module:ai-inference:edit",
    "d8:manage:permission:module:ai-inference:view",
    "d8:manage:permission:module:ai-inference:edit",
)
VLLM_METRICS = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:gpu_cache_usage_perc",
    "vllm:time_to_first_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
)


@pytest.fixture(scope="module")
def docs(helm: Helm) -> list[Doc]:
    return helm.render(api_versions=MONITORING_APIS)


def _rules(role: Doc) -> list[dict[str, Any]]:
    return list(role.get("rules") or [])


def _grants(role: Doc, group: str, resource: str, verb: str) -> bool:
    return any(
        (group in r.get("apiGroups", []) or "*" in r.get("apiGroups", []))
        and (resource in r.get("resources", []) or "*" in r.get("resources", []))
        and (verb in r.get("verbs", []) or "*" in r.get("verbs", []))
        for r in _rules(role)
    )


# -- helm itself ------------------------------------------------------------------------------


@pytest.mark.parametrize("catalog_mode", ["Enabled", "None"])
def test_helm_lint_passes(helm: Helm, catalog_mode: str) -> None:
    result = helm(
        "lint", str(CHART_DIR), "--strict", "--kube-version", KUBE_VERSION, "--set", f"catalog.mode={catalog_mode}"
    )
    assert "0 chart(s) failed" in result.stdout


def test_helm_template_renders_every_object_once_into_the_module_namespace(docs: list[Doc]) -> None:
    seen = set()
    for doc in docs:
        key = (doc["kind"], doc["metadata"]["name"])
        assert key not in seen, f"{key} rendered twice"
        seen.add(key)
        assert doc["metadata"]["labels"]["module"] == "ai-inference", key
        if doc["kind"] in {"ServiceAccount", "Deployment", "Service", "ConfigMap", "PrometheusRule", "PodMonitor"}:
            assert doc["metadata"]["namespace"] == NAMESPACE, key
    kinds = {k for k, _ in seen}
    assert kinds == {
        "ClusterRole",
        "ClusterRoleBinding",
        "ServiceAccount",
        "Deployment",
        "Service",
        "InferenceServiceClass",
        "ConfigMap",
        "PrometheusRule",
        "PodMonitor",
    }


def test_the_chart_carries_the_generated_module_crds() -> None:
    names = sorted(p.name for p in (CHART_DIR / "crds").glob("*.yaml"))
    assert names == ["inferenceserviceclasses.ai.deckhouse.io.yaml", "inferenceservices.ai.deckhouse.io.yaml"]
    repo_crds = CHART_DIR.parents[1] / "crds"
    for name in names:
        assert (CHART_DIR / "crds" / name).read_text() == (repo_crds / name).read_text()


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ({"catalog.mode": "Disabled"}, "/catalog/mode"),
        ({"aiInference.aiModels.catalogTransport": "Grpc"}, "/aiInference/aiModels/catalogTransport"),
        ({"aiInference.temporal.tls.enabled": True}, "secretName is required"),
        ({"defaultClass.clusterIssuerName": ""}, "clusterIssuerName"),
    ],
)
def test_invalid_values_are_refused(helm: Helm, values: dict[str, Any], error: str) -> None:
    result = helm(*template_args(values), check=False)
    assert result.returncode != 0
    assert error in result.stderr


def test_the_chart_requires_kubernetes_1_34(helm: Helm) -> None:
    args = template_args()
    args[args.index("--kube-version") + 1] = "1.33.0"
    result = helm(*args, check=False)
    assert result.returncode != 0 and "kubeVersion" in result.stderr


# -- the bundled class ------------------------------------------------------------------------


def test_default_llm_is_the_admin_guides_bundled_class(docs: list[Doc]) -> None:
    doc = find(docs, "InferenceServiceClass", "default-llm")
    assert doc["apiVersion"] == "ai.deckhouse.io/v1alpha1"
    assert "namespace" not in doc["metadata"]  # cluster-scoped
    assert doc["metadata"]["labels"]["module"] == "ai-inference"
    spec = doc["spec"]
    # "It allows all three contracts with Chat first"
    assert spec["modelPolicy"] == {"allowedEndpointTypes": ["Chat", "Embeddings", "Rerank"]}
    # "permits both sharing modes and both placement types with one device per replica, names no
    # share bounds"
    accel = spec["acceleratorPolicy"]
    assert set(accel["allowedSharingModes"]) == {"Shared", "Dedicated"}
    assert set(accel["allowedPlacementTypes"]) == {"WholeDevice", "Partition"}
    assert accel["maxAcceleratorCount"] == 1
    assert "minSharePercent" not in accel and "maxSharePercent" not in accel
    assert "allowedDeviceClasses" not in accel
    # "bounds replicas at one to two"
    assert spec["scalingPolicy"] == {"minReplicas": 1, "maxReplicas": 2}
    # "It exposes External with authentication: Token"
    assert spec["exposurePolicy"] == {
        "type": "External",
        "authentication": "Token",
        "https": {"mode": "CertManager", "certManager": {"clusterIssuerName": "selfsigned"}},
    }
    assert spec["updatePolicy"] == {"strategy": "RollingUpdate"}
    # "it names no admissionPolicy.allowedNamespaces choice of yours"
    assert "admissionPolicy" not in spec
    assert set(spec) == {"modelPolicy", "acceleratorPolicy", "scalingPolicy", "exposurePolicy", "updatePolicy"}

    # And the API types read it the same way.
    cls = InferenceServiceClass.model_validate(doc)
    assert cls.spec.modelPolicy.allowedEndpointTypes == [
        EndpointType.CHAT,
        EndpointType.EMBEDDINGS,
        EndpointType.RERANK,
    ]
    assert cls.spec.acceleratorPolicy is not None
    assert cls.spec.acceleratorPolicy.allowedSharingModes == [SharingMode.SHARED, SharingMode.DEDICATED]
    assert cls.spec.acceleratorPolicy.allowedPlacementTypes == [PlacementType.WHOLE_DEVICE, PlacementType.PARTITION]
    assert cls.spec.exposurePolicy.type == ExposureType.EXTERNAL
    assert cls.spec.exposurePolicy.authentication == Authentication.TOKEN
    assert cls.spec.exposurePolicy.https is not None and cls.spec.exposurePolicy.https.mode == HttpsMode.CERT_MANAGER
    assert cls.spec.updatePolicy.strategy == UpdateStrategy.ROLLING_UPDATE


def test_default_llm_cluster_issuer_comes_from_values_and_the_class_can_be_left_out(helm: Helm) -> None:
    docs = helm.render({"defaultClass.clusterIssuerName": "letsencrypt"})
    cls = find(docs, "InferenceServiceClass", "default-llm")
    assert cls["spec"]["exposurePolicy"]["https"]["certManager"] == {"clusterIssuerName": "letsencrypt"}
    assert of_kind(helm.render({"defaultClass.enabled": False}), "InferenceServiceClass") == []


# -- settings reach the processes -------------------------------------------------------------


def _settings_of(deployment: Doc, monkeypatch: pytest.MonkeyPatch) -> ModuleSettings:
    for key in list(os.environ):
        if key.upper().startswith("AI_INFERENCE_"):
            monkeypatch.delenv(key)
    for key, value in container_env(deployment).items():
        monkeypatch.setenv(key, value)
    return ModuleSettings()


@pytest.mark.parametrize("component", COMPONENTS)
def test_default_values_reach_each_process_as_settings(
    docs: list[Doc], component: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _settings_of(find(docs, "Deployment", f"ai-inference-{component}"), monkeypatch)
    assert settings.catalog.mode == CatalogMode.ENABLED
    assert settings.aiModels.catalogTransport == CatalogTransport.REST
    lookup = settings.aiModels.catalogLookup
    assert lookup.baseURL == "https://ai-models-controller.d8-ai-models.svc.cluster.local:8080"
    assert lookup.path == "/api/internal/v1/models/lookup"
    assert (lookup.timeoutSeconds, lookup.notReadyRequeueSeconds) == (10, 30)
    # The planner Service this chart ships.
    assert settings.planner.baseURL == f"http://ai-inference-planner.{NAMESPACE}.svc:8080"
    assert settings.planner.runtimeFallback.enabled is True
    assert settings.temporal.address == "temporal-frontend.temporal.svc.cluster.local:7233"
    assert settings.temporal.namespace == "default"
    assert settings.temporal.taskQueue == "ai-inference"
    assert settings.temporal.tlsEnabled is False
    assert settings.moduleNamespace == NAMESPACE


def test_internal_values_override_the_settings(helm: Helm, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = helm.render(
        {
            "aiInference.aiModels.catalogTransport": "Kubernetes",
            "aiInference.aiModels.catalogLookup.baseURL": "https://catalog.example:9443",
            "aiInference.aiModels.catalogLookup.path": "/lookup",
            "aiInference.aiModels.catalogLookup.timeoutSeconds": 3,
            "aiInference.aiModels.catalogLookup.notReadyRequeueSeconds": 7,
            "aiInference.planner.baseURL": "http://planner.elsewhere:9000",
            "aiInference.planner.runtimeFallback.enabled": False,
            "aiInference.temporal.address": "temporal.example:7233",
            "aiInference.temporal.namespace": "inference",
            "aiInference.exposure.domainTemplate": "{name}-{namespace}.apps.example.com",
            "aiInference.exposure.ingressClassName": "nginx",
        }
    )
    for component in COMPONENTS:
        settings = _settings_of(find(docs, "Deployment", f"ai-inference-{component}"), monkeypatch)
        assert settings.aiModels.catalogTransport == CatalogTransport.KUBERNETES
        assert settings.aiModels.catalogLookup.baseURL == "https://catalog.example:9443"
        assert settings.aiModels.catalogLookup.path == "/lookup"
        assert settings.aiModels.catalogLookup.timeoutSeconds == 3
        assert settings.aiModels.catalogLookup.notReadyRequeueSeconds == 7
        assert settings.planner.baseURL == "http://planner.elsewhere:9000"
        assert settings.planner.runtimeFallback.enabled is False
        assert settings.temporal.address == "temporal.example:7233"
        assert settings.temporal.namespace == "inference"
        assert settings.exposure.domainTemplate == "{name}-{namespace}.apps.example.com"
        assert settings.exposure.ingressClassName == "nginx"


def test_env_names_are_the_ones_the_brief_and_the_settings_loader_share(docs: list[Doc]) -> None:
    env = container_env(find(docs, "Deployment", "ai-inference-worker"))
    for name in (
        "AI_INFERENCE_CATALOG__MODE",
        "AI_INFERENCE_AIMODELS__CATALOGTRANSPORT",
        "AI_INFERENCE_AIMODELS__CATALOGLOOKUP__BASEURL",
        "AI_INFERENCE_PLANNER__BASEURL",
        "AI_INFERENCE_PLANNER__RUNTIMEFALLBACK__ENABLED",
        "AI_INFERENCE_TEMPORAL__ADDRESS",
        "AI_INFERENCE_TEMPORAL__NAMESPACE",
    ):
        assert name in env


# -- catalog.mode -----------------------------------------------------------------------------


def test_catalog_enabled_grants_the_worker_and_planner_catalog_reads(docs: list[Doc]) -> None:
    role = find(docs, "ClusterRole", "d8:ai-inference:catalog-reader")
    assert _rules(role) == [
        {
            "apiGroups": ["ai-models.deckhouse.io"],
            "resources": ["models", "clustermodels"],
            "verbs": ["get", "list", "watch"],
        }
    ]
    binding = find(docs, "ClusterRoleBinding", "d8:ai-inference:catalog-reader")
    assert {(s["name"], s["namespace"]) for s in binding["subjects"]} == {
        ("ai-inference-worker", NAMESPACE),
        ("ai-inference-planner", NAMESPACE),
    }


def test_catalog_none_drops_the_catalog_rbac_and_tells_every_process(
    helm: Helm, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = helm.render({"catalog.mode": "None"}, api_versions=MONITORING_APIS)
    text = yaml.safe_dump_all(docs)
    assert "catalog-reader" not in text
    assert "ai-models.deckhouse.io" not in text  # no other role reaches the catalog either
    for component in COMPONENTS:
        deployment = find(docs, "Deployment", f"ai-inference-{component}")
        assert container_env(deployment)["AI_INFERENCE_CATALOG__MODE"] == "None"
        assert _settings_of(deployment, monkeypatch).catalog.mode == CatalogMode.NONE
    # Everything else is still there.
    assert len(docs) == len(helm.render(api_versions=MONITORING_APIS)) - 2


# -- Deployments ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("component", "args", "port_name", "port"),
    [
        ("worker", ["worker", "--health-port", "8081"], "health", 8081),
        ("watcher", ["watch", "--health-port", "8081"], "health", 8081),
        ("planner", ["planner", "--host", "0.0.0.0", "--port", "8080"], "http", 8080),
    ],
)
def test_deployment_runs_its_process_locked_down_with_probes(
    docs: list[Doc], component: str, args: list[str], port_name: str, port: int
) -> None:
    deployment = find(docs, "Deployment", f"ai-inference-{component}")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == f"ai-inference-{component}"
    assert (
        deployment["spec"]["selector"]["matchLabels"].items()
        <= deployment["spec"]["template"]["metadata"]["labels"].items()
    )
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    (container,) = pod["containers"]
    assert container["command"] == ["ai-inference"]
    assert container["args"] == args
    assert container["image"] == "ai-inference:0.1.0"
    assert {"name": port_name, "containerPort": port, "protocol": "TCP"} in container["ports"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": port_name}
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["runAsNonRoot"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert container["resources"]["requests"]["cpu"] and container["resources"]["limits"]["memory"]
    # A read-only root filesystem still needs a writable /tmp.
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert {"name": "tmp", "emptyDir": {}} in pod["volumes"]


def test_planner_service_selects_the_planner_pods(docs: list[Doc]) -> None:
    service = find(docs, "Service", "ai-inference-planner")
    pod_labels = find(docs, "Deployment", "ai-inference-planner")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"] == [{"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}]
    for other in ("worker", "watcher"):
        labels = find(docs, "Deployment", f"ai-inference-{other}")["spec"]["template"]["metadata"]["labels"]
        assert not service["spec"]["selector"].items() <= labels.items()


def test_image_and_temporal_tls_come_from_values(helm: Helm) -> None:
    docs = helm.render(
        {
            "image.repository": "registry.example/ai-inference",
            "image.tag": "1.2.3",
            "aiInference.temporal.tls.enabled": True,
            "aiInference.temporal.tls.secretName": "temporal-client-tls",
        }
    )
    for component in ("worker", "watcher"):
        pod = find(docs, "Deployment", f"ai-inference-{component}")["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["image"] == "registry.example/ai-inference:1.2.3"
        assert {"name": "temporal-tls", "secret": {"secretName": "temporal-client-tls"}} in pod["volumes"]
        assert {"name": "temporal-tls", "mountPath": "/etc/ai-inference/temporal-tls", "readOnly": True} in container[
            "volumeMounts"
        ]
        assert (
            container_env(find(docs, "Deployment", f"ai-inference-{component}"))["AI_INFERENCE_TEMPORAL__TLSENABLED"]
            == "true"
        )


# -- roles for people -------------------------------------------------------------------------


def _human_roles(docs: list[Doc]) -> list[Doc]:
    return [d for d in of_kind(docs, "ClusterRole") if d["metadata"]["name"] in {*HUMAN_ROLES, *RBACV2_ROLES}]


def test_user_authz_roles_carry_their_access_level(docs: list[Doc]) -> None:
    for name, level in HUMAN_ROLES.items():
        role = find(docs, "ClusterRole", name)
        assert role["metadata"]["annotations"]["user-authz.deckhouse.io/access-level"] == level
        assert role["metadata"]["labels"]["user-authz.deckhouse.io/access-level"] == level


def test_privileged_user_admin_and_cluster_admin_deltas_are_empty(docs: list[Doc]) -> None:
    for level in ("privileged-user", "admin", "cluster-admin"):
        assert _rules(find(docs, "ClusterRole", f"d8:user-authz:ai-inference:{level}")) == []


def test_human_roles_deny_what_the_guide_denies(docs: list[Doc]) -> None:
    roles = _human_roles(docs)
    assert len(roles) == len(HUMAN_ROLES) + len(RBACV2_ROLES)
    for role in roles:
        for rule in _rules(role):
            where = f"{role['metadata']['name']}: {rule}"
            assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"], where
            assert not any("/" in r for r in rule["resources"]), where  # no */status, no /planner
            assert "secrets" not in rule["resources"], where
            assert not {"bind", "escalate", "impersonate"} & set(rule["verbs"]), where
            assert "rbac.authorization.k8s.io" not in rule["apiGroups"], where
            assert "ai-models.deckhouse.io" not in rule["apiGroups"], where


def test_a_namespace_user_cannot_read_a_class(docs: list[Doc]) -> None:
    for name in ("d8:user-authz:ai-inference:user", "d8:user-authz:ai-inference:editor"):
        role = find(docs, "ClusterRole", name)
        assert not any("inferenceserviceclasses" in r["resources"] for r in _rules(role))
    for name in ("d8:use:capability:module:ai-inference:view", "d8:use:capability:module:ai-inference:edit"):
        role = find(docs, "ClusterRole", name)
        assert not any("inferenceserviceclasses" in r["resources"] for r in _rules(role))


def test_role_ladder(docs: list[Doc]) -> None:
    user = find(docs, "ClusterRole", "d8:user-authz:ai-inference:user")
    editor = find(docs, "ClusterRole", "d8:user-authz:ai-inference:editor")
    admin = find(docs, "ClusterRole", "d8:user-authz:ai-inference:cluster-editor")
    for verb in ("get", "list", "watch"):
        assert _grants(user, "ai.deckhouse.io", "inferenceservices", verb)
        assert _grants(admin, "ai.deckhouse.io", "inferenceservices", verb)
        assert _grants(admin, "scheduling.k8s.io", "priorityclasses", verb)
    for verb in ("create", "update", "patch", "delete"):
        assert not _grants(user, "ai.deckhouse.io", "inferenceservices", verb)
        assert _grants(editor, "ai.deckhouse.io", "inferenceservices", verb)
        assert _grants(admin, "ai.deckhouse.io", "inferenceserviceclasses", verb)
        assert not _grants(admin, "scheduling.k8s.io", "priorityclasses", verb)
    # rbacv2: the use roles are namespaced orders only; the manage roles own the classes.
    assert _grants(find(docs, "ClusterRole", RBACV2_ROLES[1]), "ai.deckhouse.io", "inferenceservices", "create")
    assert _grants(find(docs, "ClusterRole", RBACV2_ROLES[3]), "ai.deckhouse.io", "inferenceserviceclasses", "create")
    for name in RBACV2_ROLES[:2]:
        assert find(docs, "ClusterRole", name)["metadata"]["labels"]["rbac.deckhouse.io/kind"] == "use"
    for name in RBACV2_ROLES[2:]:
        assert find(docs, "ClusterRole", name)["metadata"]["labels"]["rbac.deckhouse.io/kind"] == "manage"


def test_human_roles_can_be_left_out(helm: Helm) -> None:
    names = {
        d["metadata"]["name"]
        for d in of_kind(helm.render({"rbac.userAuthz": False, "rbac.rbacv2": False}), "ClusterRole")
    }
    assert names == {
        "d8:ai-inference:worker",
        "d8:ai-inference:watcher",
        "d8:ai-inference:planner",
        "d8:ai-inference:catalog-reader",
    }


# -- ServiceAccounts of the processes ---------------------------------------------------------


def test_each_process_role_is_bound_to_its_own_service_account(docs: list[Doc]) -> None:
    for component in COMPONENTS:
        find(docs, "ServiceAccount", f"ai-inference-{component}")
        binding = find(docs, "ClusterRoleBinding", f"d8:ai-inference:{component}")
        assert binding["roleRef"]["name"] == f"d8:ai-inference:{component}"
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": f"ai-inference-{component}", "namespace": NAMESPACE}
        ]


def test_process_roles_are_least_privilege(docs: list[Doc]) -> None:
    worker, watcher, planner = (find(docs, "ClusterRole", f"d8:ai-inference:{c}") for c in COMPONENTS)
    for role in (worker, watcher, planner):
        for rule in _rules(role):
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule
            assert not {"bind", "escalate", "impersonate"} & set(rule["verbs"]), rule
            assert "rbac.authorization.k8s.io" not in rule["apiGroups"], rule
    # Only the worker calls the planner; no human role, no other process.
    assert _grants(worker, "ai.deckhouse.io", "inferenceserviceclasses/planner", "create")
    holders = [
        d["metadata"]["name"]
        for d in of_kind(docs, "ClusterRole")
        if _grants(d, "ai.deckhouse.io", "inferenceserviceclasses/planner", "create")
    ]
    assert holders == ["d8:ai-inference:worker"]
    # Worker: status and finalizers of orders, the order's objects, never a class write.
    for verb in ("update", "patch"):
        assert _grants(worker, "ai.deckhouse.io", "inferenceservices/status", verb)
        assert _grants(worker, "ai.deckhouse.io", "inferenceservices", verb)  # finalizers
        assert not _grants(worker, "ai.deckhouse.io", "inferenceserviceclasses", verb)
    assert not _grants(worker, "ai.deckhouse.io", "inferenceservices", "create")
    for group, resource in (
        ("apps", "statefulsets"),
        ("", "services"),
        ("", "secrets"),
        ("networking.k8s.io", "ingresses"),
        ("autoscaling", "horizontalpodautoscalers"),
        ("resource.k8s.io", "resourceclaimtemplates"),
    ):
        for verb in ("get", "create", "patch", "delete"):
            assert _grants(worker, group, resource, verb), (resource, verb)
    assert _grants(worker, "", "events", "create")
    assert _grants(worker, "", "pods", "list") and not _grants(worker, "", "pods", "delete")
    for group, resource in (("gpu.deckhouse.io", "physicalgpus"), ("resource.k8s.io", "resourceslices")):
        assert _grants(worker, group, resource, "list") and _grants(planner, group, resource, "list")
    # Watcher: list/watch orders and classes, class status; nothing else.
    for resource in ("inferenceservices", "inferenceserviceclasses"):
        assert _grants(watcher, "ai.deckhouse.io", resource, "watch")
        assert not _grants(watcher, "ai.deckhouse.io", resource, "patch")
    assert _grants(watcher, "ai.deckhouse.io", "inferenceserviceclasses/status", "patch")
    assert not _grants(watcher, "ai.deckhouse.io", "inferenceservices/status", "patch")
    # Planner: authorizes its callers, reads the inventory; no writes of anything.
    assert _grants(planner, "authentication.k8s.io", "tokenreviews", "create")
    assert _grants(planner, "authorization.k8s.io", "subjectaccessreviews", "create")
    for resource in ("resourceslices", "deviceclasses", "resourceclaims"):
        assert _grants(planner, "resource.k8s.io", resource, "watch")
    planner_writes = {
        (g, r)
        for rule in _rules(planner)
        for g in rule["apiGroups"]
        for r in rule["resources"]
        if set(rule["verbs"]) - {"get", "list", "watch"}
    }
    assert planner_writes == {
        ("authentication.k8s.io", "tokenreviews"),
        ("authorization.k8s.io", "subjectaccessreviews"),
    }
    for role in (watcher, planner):
        assert not _grants(role, "", "secrets", "get")


# -- monitoring -------------------------------------------------------------------------------


def test_prometheus_rule_alerts(docs: list[Doc]) -> None:
    rule = find(docs, "PrometheusRule", "ai-inference")
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert set(alerts) == {"D8AIInferenceCapacityPreempted", "D8AIInferenceDonorHeldAtLoweredBound"}

    preempted = alerts["D8AIInferenceCapacityPreempted"]
    assert "increase(ai_inference_capacity_preemptions_total[10m])" in preempted["expr"]
    assert preempted["expr"].rstrip().endswith("> 0")
    for label in ("device_class", "recipient_namespace", "recipient"):
        assert label in preempted["expr"] and "{{ $labels." + label + " }}" in preempted["annotations"]["summary"]

    held = alerts["D8AIInferenceDonorHeldAtLoweredBound"]
    assert "ai_inference_donor_held_replicas" in held["expr"]
    assert "increase(" not in held["expr"] and held["expr"].rstrip().endswith("> 0")
    assert held["for"] == "30m"
    for label in ("device_class", "donor_namespace", "donor"):
        assert label in held["expr"] and "{{ $labels." + label + " }}" in held["annotations"]["summary"]
    for alert in alerts.values():
        assert alert["annotations"]["description"].strip()


def test_prometheus_operator_objects_render_only_where_the_api_is_served(helm: Helm) -> None:
    docs = helm.render()
    assert of_kind(docs, "PrometheusRule") == [] and of_kind(docs, "PodMonitor") == []
    docs = helm.render({"monitoring.prometheusRule.enabled": False}, api_versions=MONITORING_APIS)
    assert of_kind(docs, "PrometheusRule") == [] and len(of_kind(docs, "PodMonitor")) == 2


def test_readme_documents_the_metrics_and_the_values() -> None:
    readme = (CHART_DIR / "README.md").read_text()
    for text in (
        "ai_inference_capacity_preemptions_total",
        "ai_inference_donor_held_replicas",
        "`device_class`, `recipient_namespace`, `recipient`",
        "`device_class`, `donor_namespace`, `donor`",
        "D8AIInferenceCapacityPreempted",
        "D8AIInferenceDonorHeldAtLoweredBound",
        *VLLM_METRICS,
    ):
        assert text in readme, text
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())

    def leaves(node: Any, prefix: str = "") -> list[str]:
        if isinstance(node, dict) and node:
            return [leaf for k, v in node.items() for leaf in leaves(v, f"{prefix}{k}.")]
        return [prefix.rstrip(".")]

    keys = [
        *leaves(values["aiInference"], "aiInference."),
        "catalog.mode",
        "namespace",
        "defaultClass.clusterIssuerName",
    ]
    for key in keys:
        assert f"`{key}`" in readme, key


def test_grafana_dashboards_cover_the_runtime_metrics(helm: Helm, docs: list[Doc]) -> None:
    maps = [d for d in of_kind(docs, "ConfigMap") if d["metadata"]["labels"].get("grafana_dashboard") == "1"]
    assert {m["metadata"]["name"] for m in maps} == {
        "ai-inference-dashboard-performance",
        "ai-inference-dashboard-queries",
    }
    exprs: dict[str, str] = {}
    for m in maps:
        ((key, text),) = m["data"].items()
        assert key.endswith(".json")
        dashboard = json.loads(text)
        assert dashboard["uid"] and dashboard["title"] and dashboard["panels"]
        exprs[m["metadata"]["name"]] = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    performance, queries = exprs["ai-inference-dashboard-performance"], exprs["ai-inference-dashboard-queries"]
    for metric in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:gpu_cache_usage_perc"):
        assert metric in performance
    for metric in ("vllm:time_to_first_token_seconds_bucket", "vllm:e2e_request_latency_seconds_bucket"):
        assert f"histogram_quantile(0.95, sum by (le, model_name) (rate({metric}" in performance
    for metric in ("vllm:request_success_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total"):
        assert metric in queries
    for metric in VLLM_METRICS:
        assert metric in performance + queries
    assert of_kind(helm.render({"monitoring.grafanaDashboards.enabled": False}), "ConfigMap") == []


# -- examples ---------------------------------------------------------------------------------


def test_examples_are_one_manifest_a_file() -> None:
    present = {p.name for p in EXAMPLES_DIR.glob("*.yaml")}
    assert {*EXAMPLE_CLASSES, *EXAMPLE_PRIORITY_CLASSES} <= present
    for name in {*EXAMPLE_CLASSES, *EXAMPLE_PRIORITY_CLASSES}:
        assert len([d for d in yaml.safe_load_all((EXAMPLES_DIR / name).read_text()) if d]) == 1, name
    for name, cls_name in EXAMPLE_CLASSES.items():
        doc = example(name)
        assert doc["kind"] == "InferenceServiceClass" and doc["metadata"]["name"] == cls_name
        InferenceServiceClass.model_validate(doc)
    for name, (pc_name, value) in EXAMPLE_PRIORITY_CLASSES.items():
        doc = example(name)
        assert doc["kind"] == "PriorityClass" and doc["metadata"]["name"] == pc_name
        assert doc["value"] == value and doc["globalDefault"] is False


def test_llm_strict_admits_the_normal_priority_class() -> None:
    strict = example("class-llm-strict.yaml")
    assert strict["spec"]["scalingPolicy"]["allowedPriorityClassNames"] == ["inference-normal"]
    assert example("class-embeddings-only.yaml")["spec"]["modelPolicy"]["allowedEndpointTypes"] == ["Embeddings"]
