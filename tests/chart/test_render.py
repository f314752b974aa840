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
    "vllm:kv_cache_usage_perc",
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
        "lint",
        str(CHART_DIR),
        "--strict",
        "--kube-version",
        KUBE_VERSION,
        "--set",
        f"aiInference.catalog.mode={catalog_mode}",
    )
    assert "0 chart(s) failed" in result.stdout


def test_helm_template_renders_every_object_once_into_the_module_namespace(docs: list[Doc]) -> None:
    seen = set()
    for doc in docs:
        key = (doc["kind"], doc["metadata"]["name"])
        assert key not in seen, f"{key} rendered twice"
        seen.add(key)
        assert doc["metadata"]["labels"]["module"] == "ai-inference", key
        if doc["kind"] in {
            "ServiceAccount",
            "Deployment",
            "Service",
            "ConfigMap",
            "PrometheusRule",
            "PodMonitor",
            "Secret",
            "StatefulSet",
            "PodDisruptionBudget",
            "NetworkPolicy",
            "Role",
            "RoleBinding",
        }:
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
        "Secret",  # the planner's and the embedded Temporal's certificates (Helm-made: no cert-manager here)
        "StatefulSet",  # the embedded Temporal server
        "PodDisruptionBudget",
        "ValidatingAdmissionPolicy",  # the worker guard, the watcher guard
        "ValidatingAdmissionPolicyBinding",
        "Job",  # the CRD upgrade, a pre-upgrade hook (tests/chart/test_crd_upgrade.py)
        "NetworkPolicy",  # the module namespace's (tests/chart/test_network_policy.py)
        "Role",  # the observer's Leases (tests/chart/test_replicas.py)
        "RoleBinding",
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
        ({"aiInference.catalog.mode": "Disabled"}, "/aiInference/catalog/mode"),
        ({"aiInference.aiModels.catalogTransport": "Grpc"}, "/aiInference/aiModels/catalogTransport"),
        (
            {
                "aiInference.temporal.embedded.enabled": False,
                "aiInference.temporal.address": "temporal.example:7233",
                "aiInference.temporal.apiKey.secretName": "cloud-key",
            },
            "apiKey needs aiInference.temporal.tls.enabled",
        ),
        ({"aiInference.temporal.tls.enabled": True}, "are for an existing Temporal (embedded.enabled: false)"),
        ({"aiInference.temporal.embedded.tls.mode": "Secret"}, "/aiInference/temporal/embedded/tls/mode"),
        ({"aiInference.planner.baseURL": "planner:8443"}, "/aiInference/planner/baseURL"),
        ({"planner.tls.mode": "SelfSigned"}, "/planner"),
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
    assert result.returncode != 0
    assert "kubeVersion" in result.stderr


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
    assert "minSharePercent" not in accel
    assert "maxSharePercent" not in accel
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
    assert cls.spec.exposurePolicy.https is not None
    assert cls.spec.exposurePolicy.https.mode == HttpsMode.CERT_MANAGER
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
    # The planner Service this chart ships, over HTTPS, verified against its certificate's CA, called
    # with a token bound to its audience; no plain http anywhere.
    planner = settings.planner
    assert planner.baseURL == f"https://ai-inference-planner.{NAMESPACE}.svc:8443"
    assert planner.runtimeFallback.enabled is True
    assert (planner.audience, planner.allowInsecureHttp) == ("ai-inference-planner", False)
    assert planner.tokenFile == "/var/run/secrets/ai-inference/tokens/planner"
    assert planner.caFile == "/etc/ai-inference/planner-ca/ca.crt"
    assert (lookup.audience, lookup.allowInsecureHttp) == ("ai-models", False)
    assert lookup.tokenFile == "/var/run/secrets/ai-inference/tokens/catalog"
    # The embedded Temporal server's Service (aiInference.temporal.embedded.enabled, the default), over
    # mutual TLS: the caller's own client certificate (tests/chart/test_temporal_tls.py).
    assert settings.temporal.address == f"ai-inference-temporal.{NAMESPACE}.svc:7233"
    assert settings.temporal.namespace == "default"
    assert settings.temporal.taskQueue == "ai-inference"
    assert settings.temporal.tls.enabled is True
    assert settings.temporal.tls.serverName == f"ai-inference-temporal.{NAMESPACE}.svc"
    assert settings.temporal.apiKeyFile is None
    assert settings.moduleNamespace == NAMESPACE


def test_internal_values_override_the_settings(helm: Helm, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = helm.render(
        {
            "aiInference.aiModels.catalogTransport": "Kubernetes",
            "aiInference.aiModels.catalogLookup.baseURL": "https://catalog.example:9443",
            "aiInference.aiModels.catalogLookup.path": "/lookup",
            "aiInference.aiModels.catalogLookup.timeoutSeconds": 3,
            "aiInference.aiModels.catalogLookup.notReadyRequeueSeconds": 7,
            "aiInference.planner.baseURL": "https://planner.elsewhere:9000",
            "aiInference.planner.runtimeFallback.enabled": False,
            "aiInference.planner.audience": "planner-aud",
            "aiInference.aiModels.catalogLookup.audience": "catalog-aud",
            "aiInference.temporal.embedded.enabled": False,
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
        assert settings.planner.baseURL == "https://planner.elsewhere:9000"
        assert settings.planner.caFile is None  # not the chart's planner: the system's roots
        assert settings.planner.runtimeFallback.enabled is False
        assert settings.planner.audience == "planner-aud"
        assert settings.aiModels.catalogLookup.audience == "catalog-aud"
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


def test_catalog_enabled_grants_the_worker_catalog_reads_by_name(docs: list[Doc]) -> None:
    role = find(docs, "ClusterRole", "d8:ai-inference:catalog-reader")
    assert _rules(role) == [
        {"apiGroups": ["ai-models.deckhouse.io"], "resources": ["models", "clustermodels"], "verbs": ["get"]}
    ]
    binding = find(docs, "ClusterRoleBinding", "d8:ai-inference:catalog-reader")
    # The planner never resolves a model.
    assert {(s["name"], s["namespace"]) for s in binding["subjects"]} == {("ai-inference-worker", NAMESPACE)}


def test_catalog_none_drops_the_catalog_rbac_and_tells_every_process(
    helm: Helm, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = helm.render({"aiInference.catalog.mode": "None"}, api_versions=MONITORING_APIS)
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


PLANNER_ARGS = ["planner", "--host", "0.0.0.0", "--port", "8443"]
PLANNER_ARGS += ["--tls-cert-file", "/etc/ai-inference/planner-tls/tls.crt"]
PLANNER_ARGS += ["--tls-key-file", "/etc/ai-inference/planner-tls/tls.key"]


@pytest.mark.parametrize(
    ("component", "args", "port_name", "port"),
    [
        ("worker", ["worker", "--health-port", "8081", "--metrics-port", "9464"], "health", 8081),
        ("watcher", ["watch", "--health-port", "8081", "--metrics-port", "9464"], "health", 8081),
        ("planner", PLANNER_ARGS, "https", 8443),
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
        # Live: /healthz; ready: /readyz (each process answers it from real state: Temporal, informers).
        path = "/readyz" if probe == "readinessProbe" else "/healthz"
        expected = {"path": path, "port": port_name}
        assert container[probe]["httpGet"] == (expected | {"scheme": "HTTPS"} if port_name == "https" else expected)
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["runAsNonRoot"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert container["resources"]["requests"]["cpu"]
    assert container["resources"]["limits"]["memory"]
    # A read-only root filesystem still needs a writable /tmp.
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert {"name": "tmp", "emptyDir": {}} in pod["volumes"]


def test_planner_service_selects_the_planner_pods(docs: list[Doc]) -> None:
    service = find(docs, "Service", "ai-inference-planner")
    pod_labels = find(docs, "Deployment", "ai-inference-planner")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"] == [{"name": "https", "port": 8443, "targetPort": "https", "protocol": "TCP"}]
    for other in ("worker", "watcher"):
        labels = find(docs, "Deployment", f"ai-inference-{other}")["spec"]["template"]["metadata"]["labels"]
        assert not service["spec"]["selector"].items() <= labels.items()


def test_image_comes_from_values(helm: Helm) -> None:
    docs = helm.render({"image.repository": "registry.example/ai-inference", "image.tag": "1.2.3"})
    for component in COMPONENTS:
        (container,) = find(docs, "Deployment", f"ai-inference-{component}")["spec"]["template"]["spec"]["containers"]
        assert container["image"] == "registry.example/ai-inference:1.2.3"


TEMPORAL_TLS = "/etc/ai-inference/temporal-tls"


def test_temporal_mtls_and_api_key_secrets_are_mounted_and_their_paths_read(
    helm: Helm, monkeypatch: pytest.MonkeyPatch
) -> None:
    existing = {"aiInference.temporal.embedded.enabled": False, "aiInference.temporal.address": "temporal.example:7233"}
    docs = helm.render(
        {
            **existing,
            "aiInference.temporal.tls.enabled": True,
            "aiInference.temporal.tls.secretName": "temporal-client-tls",
            "aiInference.temporal.tls.serverName": "temporal.example.com",
            "aiInference.temporal.apiKey.secretName": "temporal-cloud",
        }
    )
    for component in ("worker", "watcher"):
        deployment = find(docs, "Deployment", f"ai-inference-{component}")
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["temporal-tls"]["secret"]["secretName"] == "temporal-client-tls"
        assert [(i["key"], i["path"]) for i in volumes["temporal-tls"]["secret"]["items"]] == [
            ("ca.crt", "ca.crt"),
            ("tls.crt", "tls.crt"),
            ("tls.key", "tls.key"),
        ]
        assert volumes["temporal-api-key"]["secret"]["items"] == [{"key": "api-key", "path": "api-key"}]
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert mounts["temporal-tls"] == {"name": "temporal-tls", "mountPath": TEMPORAL_TLS, "readOnly": True}
        assert mounts["temporal-api-key"]["mountPath"] == "/etc/ai-inference/temporal-api-key"
        # The files the chart mounts are the files the settings name (they were mounted and never read).
        temporal = _settings_of(deployment, monkeypatch).temporal
        assert temporal.tls.enabled is True
        assert (temporal.tls.serverCAFile, temporal.tls.clientCertFile, temporal.tls.clientKeyFile) == (
            f"{TEMPORAL_TLS}/ca.crt",
            f"{TEMPORAL_TLS}/tls.crt",
            f"{TEMPORAL_TLS}/tls.key",
        )
        assert temporal.tls.serverName == "temporal.example.com"
        assert temporal.apiKeyFile == "/etc/ai-inference/temporal-api-key/api-key"

    # Temporal Cloud with an API key and a publicly trusted server: TLS, no Secret, system roots.
    docs = helm.render({**existing, "aiInference.temporal.tls.enabled": True, "aiInference.temporal.tls.caKey": ""})
    deployment = find(docs, "Deployment", "ai-inference-worker")
    assert "temporal-tls" not in {v["name"] for v in deployment["spec"]["template"]["spec"]["volumes"]}
    temporal = _settings_of(deployment, monkeypatch).temporal
    assert temporal.tls.enabled
    assert temporal.tls.serverCAFile is None
    assert temporal.tls.clientCertFile is None


# -- credentials of the services the worker calls ---------------------------------------------


def test_the_worker_sends_audience_bound_projected_tokens_never_its_own(docs: list[Doc]) -> None:
    pod = find(docs, "Deployment", "ai-inference-worker")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    sources = [s["serviceAccountToken"] for s in volumes["service-tokens"]["projected"]["sources"]]
    assert sources == [
        {"audience": "ai-inference-planner", "expirationSeconds": 3600, "path": "planner"},
        {"audience": "ai-models", "expirationSeconds": 3600, "path": "catalog"},
    ]
    # Of the planner's certificate Secret, the worker gets the CA only: no key.
    assert volumes["planner-ca"]["secret"] == {
        "secretName": "ai-inference-planner-tls",
        "defaultMode": 0o440,
        "items": [{"key": "ca.crt", "path": "ca.crt"}],
    }
    (container,) = pod["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["service-tokens"] == "/var/run/secrets/ai-inference/tokens"
    assert mounts["planner-ca"] == "/etc/ai-inference/planner-ca"
    # The watcher and the planner call no service with a token.
    for other in ("watcher", "planner"):
        spec = find(docs, "Deployment", f"ai-inference-{other}")["spec"]["template"]["spec"]
        assert not [v for v in spec["volumes"] if "projected" in v], other


def test_the_planner_serves_a_certificate_from_cert_manager_or_helm_or_yours(helm: Helm, tmp_path: Any) -> None:
    import base64
    import subprocess

    dns = [f"ai-inference-planner.{NAMESPACE}.svc", f"ai-inference-planner.{NAMESPACE}.svc.cluster.local"]
    planner_pod = find(helm.render(), "Deployment", "ai-inference-planner")["spec"]["template"]["spec"]
    volume = next(v for v in planner_pod["volumes"] if v["name"] == "serving-tls")
    assert volume["secret"]["secretName"] == "ai-inference-planner-tls"

    # No cert-manager: Helm makes a CA and a serving certificate for the Service's names.
    secret = find(helm.render(), "Secret", "ai-inference-planner-tls")
    assert secret["type"] == "kubernetes.io/tls"
    assert set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    for key in ("tls.crt", "ca.crt"):
        (tmp_path / key).write_bytes(base64.b64decode(secret["data"][key]))
    verified = subprocess.run(
        ["openssl", "verify", "-purpose", "sslserver", "-CAfile", str(tmp_path / "ca.crt"), str(tmp_path / "tls.crt")],
        capture_output=True,
        text=True,
    )
    assert verified.returncode == 0, verified.stderr
    text = subprocess.run(
        ["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in", str(tmp_path / "tls.crt")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert all(f"DNS:{name}" in text for name in dns), text

    # cert-manager served: a CA chain of cert-manager objects, the serving Certificate renewed by it.
    docs = helm.render(api_versions=["cert-manager.io/v1/Certificate"])
    assert of_kind(docs, "Secret") == []  # the embedded Temporal's certificates too (test_temporal_tls.py)
    certificate = find(docs, "Certificate", "ai-inference-planner")
    assert certificate["spec"]["secretName"] == "ai-inference-planner-tls"
    assert set(dns) <= set(certificate["spec"]["dnsNames"])
    assert certificate["spec"]["issuerRef"] == {"kind": "Issuer", "name": "ai-inference-planner-ca"}
    assert find(docs, "Certificate", "ai-inference-planner-ca")["spec"]["isCA"] is True
    assert find(docs, "Issuer", "ai-inference-planner-ca")["spec"]["ca"] == {"secretName": "ai-inference-planner-ca"}

    # Your own Secret: nothing is made.
    docs = helm.render(
        {
            "planner.tls.mode": "Secret",
            "planner.tls.secretName": "my-planner-tls",
            "aiInference.temporal.embedded.tls.mode": "CertManager",  # the embedded Temporal's: none either
        }
    )
    assert of_kind(docs, "Secret") == []
    assert not [c for c in of_kind(docs, "Certificate") if c["metadata"]["name"].startswith("ai-inference-planner")]
    worker_pod = find(docs, "Deployment", "ai-inference-worker")["spec"]["template"]["spec"]
    assert (
        next(v for v in worker_pod["volumes"] if v["name"] == "planner-ca")["secret"]["secretName"] == "my-planner-tls"
    )


# -- the worker guard -------------------------------------------------------------------------


def test_the_worker_guard_holds_the_worker_to_what_orders_own(docs: list[Doc], helm: Helm) -> None:
    from activities.builders.common import LABEL_MANAGED_BY, MANAGED_BY
    from activities.builders.objects import OWNED_KINDS

    policy = find(docs, "ValidatingAdmissionPolicy", "d8-ai-inference-worker-guard")
    binding = find(docs, "ValidatingAdmissionPolicyBinding", "d8-ai-inference-worker-guard")
    assert binding["spec"] == {"policyName": "d8-ai-inference-worker-guard", "validationActions": ["Deny"]}
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    (condition,) = spec["matchConditions"]
    assert condition["expression"] == (
        f'request.userInfo.username == "system:serviceaccount:{NAMESPACE}:ai-inference-worker"'
    )
    # Every kind an order owns is matched, for every write.
    matched = {
        (g, r)
        for rule in spec["matchConstraints"]["resourceRules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    plurals = {
        "Secret": ("", "secrets"),
        "Service": ("", "services"),
        "StatefulSet": ("apps", "statefulsets"),
        "HorizontalPodAutoscaler": ("autoscaling", "horizontalpodautoscalers"),
        "Ingress": ("networking.k8s.io", "ingresses"),
        "NetworkPolicy": ("networking.k8s.io", "networkpolicies"),
        "ResourceClaimTemplate": ("resource.k8s.io", "resourceclaimtemplates"),
    }
    # ... and the namespace's model cache claim, the one object the worker makes that no order owns.
    assert {plurals[kind] for _, kind in OWNED_KINDS} | {("", "persistentvolumeclaims")} == matched
    for rule in spec["matchConstraints"]["resourceRules"]:
        assert rule["operations"] == ["CREATE", "UPDATE", "DELETE"]
    namespaces, ownership = (v["expression"] for v in spec["validations"])
    assert '["kube-","d8-"]' in namespaces
    assert f"'{LABEL_MANAGED_BY}'" in ownership
    assert f"== '{MANAGED_BY}'" in ownership
    assert of_kind(helm.render({"rbac.workerGuard.enabled": False}), "ValidatingAdmissionPolicy") == []


def test_the_watcher_guard_holds_its_pod_deletes_to_the_modules_pods(docs: list[Doc]) -> None:
    """The watcher may delete pods (an order's own pod on a lost node): admission holds that to pods
    labelled as the module's, outside the protected namespaces (tests/rbac/test_watcher_guard.py: on
    the real API server)."""
    from activities.builders.common import LABEL_MANAGED_BY, MANAGED_BY

    policy = find(docs, "ValidatingAdmissionPolicy", "d8-ai-inference-watcher-guard")
    binding = find(docs, "ValidatingAdmissionPolicyBinding", "d8-ai-inference-watcher-guard")
    assert binding["spec"] == {"policyName": "d8-ai-inference-watcher-guard", "validationActions": ["Deny"]}
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    (condition,) = spec["matchConditions"]
    assert condition["expression"] == (
        f'request.userInfo.username == "system:serviceaccount:{NAMESPACE}:ai-inference-watcher"'
    )
    # The force delete, and the replica placer's writes: a pod's gate, its condition, a claim's allocation.
    assert spec["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["*"], "resources": ["pods"], "operations": ["DELETE", "UPDATE"]},
        {"apiGroups": [""], "apiVersions": ["*"], "resources": ["pods/status"], "operations": ["UPDATE"]},
        {
            "apiGroups": ["resource.k8s.io"],
            "apiVersions": ["*"],
            "resources": ["resourceclaims/status"],
            "operations": ["UPDATE"],
        },
    ]
    namespaces, ownership, gate_only = (v["expression"] for v in spec["validations"])
    assert '["kube-","d8-"]' in namespaces
    assert f"'{LABEL_MANAGED_BY}'" in ownership
    assert f"== '{MANAGED_BY}'" in ownership
    assert "object.metadata.labels == oldObject.metadata.labels" in gate_only


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
            assert "*" not in rule["verbs"], where
            assert "*" not in rule["resources"], where
            assert "*" not in rule["apiGroups"], where
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
        "d8:ai-inference:crd-upgrade",  # the pre-upgrade hook's (tests/chart/test_crd_upgrade.py)
        "d8:ai-inference:disable",  # the pre-delete hook's (tests/chart/test_disable.py)
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


# What each worker activity does, and nothing more (docs/admin-guide.md, "What the worker may do").
OWNED_VERBS = ["get", "list", "create", "patch", "delete"]
WORKER_RULES = [
    # Orders and classes: read from the worker's informer cache (worker/order_cache.py); a GET where
    # the cache is behind.
    {"apiGroups": ["ai.deckhouse.io"], "resources": ["inferenceservices"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": ["ai.deckhouse.io"], "resources": ["inferenceservices/status"], "verbs": ["patch"]},
    {"apiGroups": ["ai.deckhouse.io"], "resources": ["inferenceservices/finalizers"], "verbs": ["update"]},
    {"apiGroups": ["ai.deckhouse.io"], "resources": ["inferenceserviceclasses"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["ai.deckhouse.io"], "resources": ["inferenceserviceclasses/planner"], "verbs": ["create"]},
    # The first probe watches the order's StatefulSet for a ready replica.
    {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["get", "list", "watch", *OWNED_VERBS[2:]]},
    {"apiGroups": [""], "resources": ["services"], "verbs": OWNED_VERBS},
    # Secrets by name only: never a list (of every Secret of a namespace) or a watch.
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create", "patch", "delete"]},
    {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses", "networkpolicies"], "verbs": OWNED_VERBS},
    {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": OWNED_VERBS},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaimtemplates"], "verbs": OWNED_VERBS},
    # The model volumes of replicas a move retired, by name (never a list).
    {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get", "delete"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
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
    # Worker: exactly its table. No update anywhere (server-side apply is create + patch), no watch but
    # of orders and classes (its order cache) and of the first probe's StatefulSet (the observer
    # watches the rest), no class write, no inventory (it plans through the planner Service).
    assert _rules(worker) == WORKER_RULES
    # Watcher (the observer): list/watch orders and classes, class status.
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
    assert not _grants(planner, "", "secrets", "get")
    # The observer reads what orders own (the auth Secret for a Token order's probes) and writes only
    # the class status, and for an order's pod stranded on a lost node, its force delete and the Event
    # saying so (held to the module's pods by the watcher guard).
    # It reads an order's own Secrets by name (get) and never lists or watches any (issue 33 item 4).
    assert _grants(watcher, "", "secrets", "get")
    for verb in ("list", "watch"):
        for role in (watcher, worker, planner):
            assert not _grants(role, "", "secrets", verb), verb
    watcher_writes = {
        (g, r)
        for rule in _rules(watcher)
        for g in rule["apiGroups"]
        for r in rule["resources"]
        if set(rule["verbs"]) - {"get", "list", "watch"}
    }
    assert watcher_writes == {
        ("ai.deckhouse.io", "inferenceserviceclasses/status"),
        ("", "pods"),
        ("", "events"),
        # The replica placer (worker/observer/replica_placer.py), held to the module's pods and claims.
        ("", "pods/status"),
        ("resource.k8s.io", "resourceclaims/status"),
    }
    for rule in _rules(watcher):
        if "pods" in rule["resources"] and set(rule["verbs"]) - {"get", "list", "watch"}:
            # delete: the force delete on a lost node; patch: the replica placer's gate and condition.
            assert rule["verbs"] in (["delete"], ["patch"]), rule
        if "events" in rule["resources"] and set(rule["verbs"]) - {"get", "list", "watch"}:
            assert rule["verbs"] == ["create"], rule


def test_the_admin_guide_tables_the_workers_rules() -> None:
    guide = (CHART_DIR.parents[2] / "docs" / "admin-guide.md").read_text()
    section = guide[guide.index("### What the worker may do") :]
    for rule in WORKER_RULES:
        group = rule["apiGroups"][0] or "core"
        for resource in rule["resources"]:
            row = next((line for line in section.splitlines() if f"`{resource}`" in line), None)
            assert row is not None, (group, resource)
            assert f"`{group}`" in row, (group, resource)
            assert all(f"`{verb}`" in row for verb in rule["verbs"]), row


# -- monitoring -------------------------------------------------------------------------------


def test_prometheus_rule_alerts(docs: list[Doc]) -> None:
    rule = find(docs, "PrometheusRule", "ai-inference")
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert set(alerts) == {
        "D8AIInferenceCapacityPreempted",
        "D8AIInferenceDonorHeldAtLoweredBound",
        "D8AIInferenceOrderNotReady",
        "D8AIInferenceWorkflowTaskFailing",
    }

    preempted = alerts["D8AIInferenceCapacityPreempted"]
    assert 'increase(ai_inference_capacity_preemptions_total{job="ai-inference"}[10m])' in preempted["expr"]
    assert preempted["expr"].rstrip().endswith("> 0")
    for label in ("device_class", "recipient_namespace", "recipient"):
        assert label in preempted["expr"]
        assert "{{ $labels." + label + " }}" in preempted["annotations"]["summary"]

    held = alerts["D8AIInferenceDonorHeldAtLoweredBound"]
    assert "ai_inference_donor_held_replicas" in held["expr"]
    assert "increase(" not in held["expr"]
    assert held["expr"].rstrip().endswith("> 0")
    assert held["for"] == "30m"
    for label in ("device_class", "donor_namespace", "donor"):
        assert label in held["expr"]
        assert "{{ $labels." + label + " }}" in held["annotations"]["summary"]
    for alert in alerts.values():
        assert alert["annotations"]["description"].strip()


def test_prometheus_operator_objects_render_only_where_the_api_is_served(helm: Helm) -> None:
    docs = helm.render()
    assert of_kind(docs, "PrometheusRule") == []
    assert of_kind(docs, "PodMonitor") == []
    docs = helm.render({"monitoring.prometheusRule.enabled": False}, api_versions=MONITORING_APIS)
    assert of_kind(docs, "PrometheusRule") == []
    assert {d["metadata"]["name"] for d in of_kind(docs, "PodMonitor")} == {
        "ai-inference-worker",
        "ai-inference-watcher",
        "ai-inference-planner",
        "ai-inference-runtime",
    }


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

    # Kubernetes objects passed through whole are documented as one value.
    whole = {"resources", "podSecurityContext", "containerSecurityContext"}

    def leaves(node: Any, prefix: str = "") -> list[str]:
        if isinstance(node, dict) and node and prefix.rstrip(".").rsplit(".", 1)[-1] not in whole:
            return [leaf for k, v in node.items() for leaf in leaves(v, f"{prefix}{k}.")]
        return [prefix.rstrip(".")]

    for key in leaves(values):
        assert f"`{key}`" in readme or f"`{key.rsplit('.', 1)[0]}.*`" in readme, key


def test_grafana_dashboards_cover_the_runtime_metrics(helm: Helm, docs: list[Doc]) -> None:
    maps = [d for d in of_kind(docs, "ConfigMap") if d["metadata"]["labels"].get("grafana_dashboard") == "1"]
    assert {m["metadata"]["name"] for m in maps} == {
        "ai-inference-dashboard-module",
        "ai-inference-dashboard-performance",
        "ai-inference-dashboard-queries",
    }
    exprs: dict[str, str] = {}
    for m in maps:
        ((key, text),) = m["data"].items()
        assert key.endswith(".json")
        dashboard = json.loads(text)
        assert dashboard["uid"]
        assert dashboard["title"]
        assert dashboard["panels"]
        exprs[m["metadata"]["name"]] = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    performance, queries = exprs["ai-inference-dashboard-performance"], exprs["ai-inference-dashboard-queries"]
    for metric in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert metric in performance
    for metric in ("vllm:time_to_first_token_seconds_bucket", "vllm:e2e_request_latency_seconds_bucket"):
        assert f"histogram_quantile(0.95, sum by (le, model_name) (rate({metric}" in performance
    for metric in ("vllm:request_success_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total"):
        assert metric in queries
    for metric in VLLM_METRICS:
        assert metric in performance + queries
    off = helm.render({"monitoring.grafanaDashboards.enabled": False})
    assert [m["metadata"]["name"] for m in of_kind(off, "ConfigMap")] == [
        "ai-inference-prometheus-adapter-rules",
        "ai-inference-temporal-tls-proxy",  # the embedded Temporal's TLS terminator (test_temporal_tls.py)
    ]


# -- examples ---------------------------------------------------------------------------------


def test_examples_are_one_manifest_a_file() -> None:
    present = {p.name for p in EXAMPLES_DIR.glob("*.yaml")}
    assert {*EXAMPLE_CLASSES, *EXAMPLE_PRIORITY_CLASSES} <= present
    for name in {*EXAMPLE_CLASSES, *EXAMPLE_PRIORITY_CLASSES}:
        assert len([d for d in yaml.safe_load_all((EXAMPLES_DIR / name).read_text()) if d]) == 1, name
    for name, cls_name in EXAMPLE_CLASSES.items():
        doc = example(name)
        assert doc["kind"] == "InferenceServiceClass"
        assert doc["metadata"]["name"] == cls_name
        InferenceServiceClass.model_validate(doc)
    for name, (pc_name, value) in EXAMPLE_PRIORITY_CLASSES.items():
        doc = example(name)
        assert doc["kind"] == "PriorityClass"
        assert doc["metadata"]["name"] == pc_name
        assert doc["value"] == value
        assert doc["globalDefault"] is False


def test_llm_strict_admits_the_normal_priority_class() -> None:
    strict = example("class-llm-strict.yaml")
    assert strict["spec"]["scalingPolicy"]["allowedPriorityClassNames"] == ["inference-normal"]
    assert example("class-embeddings-only.yaml")["spec"]["modelPolicy"]["allowedEndpointTypes"] == ["Embeddings"]
