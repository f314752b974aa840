"""The chart installed with helm into the real local control plane: the release deploys, the bundled
class exists exactly as rendered and validates against the module's CRD, the processes get their
ServiceAccounts, the planner's serving certificate and the embedded Temporal's certificates are kept
across upgrades, catalog.mode None
removes the catalog RBAC from a running release, the embedded Temporal server's objects (and the
claim its StatefulSet makes) exist, the disruption budgets and NOTES are there, and the examples'
manifests are accepted by the API server. kwok runs no container: what is shown is that the API
server accepts every rendered object as the chart renders it."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes.client import (
    ApiClient,
    ApiextensionsV1Api,
    AppsV1Api,
    CoreV1Api,
    CustomObjectsApi,
    PolicyV1Api,
    RbacAuthorizationV1Api,
    SchedulingV1Api,
)
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient

from devstack.cluster.launcher import LocalCluster
from tests.chart.helm import NAMESPACE, RELEASE, Helm, find
from tests.examples import EXAMPLE_CLASSES, EXAMPLE_PRIORITY_CLASSES, example
from tests.polling import wait_until

pytestmark = pytest.mark.cluster

GROUP, VERSION, CLASSES = "ai.deckhouse.io", "v1alpha1", "inferenceserviceclasses"


@pytest.fixture(scope="module")
def chart(local_cluster: LocalCluster, helm: Helm) -> Iterator[LocalCluster]:
    with helm.installed(local_cluster):
        yield local_cluster


def _create_class_dry_run(api: ApiClient, body: dict[str, Any]) -> dict[str, Any]:
    created: dict[str, Any] = CustomObjectsApi(api).create_cluster_custom_object(
        GROUP, VERSION, CLASSES, body, dry_run="All", field_validation="Strict"
    )
    return created


def test_release_is_deployed(chart: LocalCluster, helm: Helm) -> None:
    status = json.loads(
        helm("status", RELEASE, "--kubeconfig", str(chart.kubeconfig("admin")), "-n", NAMESPACE, "-o", "json").stdout
    )
    assert status["info"]["status"] == "deployed"


def test_every_rendered_object_exists_with_the_version_label(
    chart: LocalCluster, kube_admin: ApiClient, helm: Helm
) -> None:
    """The whole manifest Helm applied, read back: each object is on the server as rendered."""
    manifest = helm("get", "manifest", RELEASE, "--kubeconfig", str(chart.kubeconfig("admin")), "-n", NAMESPACE).stdout
    rendered = [d for d in yaml.safe_load_all(manifest) if d]
    kinds = {d["kind"] for d in rendered}
    assert {"StatefulSet", "PodDisruptionBudget", "Deployment", "Service", "InferenceServiceClass"} <= kinds
    dynamic = DynamicClient(kube_admin)
    for doc in rendered:
        resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        namespace = doc["metadata"].get("namespace") if resource.namespaced else None
        stored = resource.get(name=doc["metadata"]["name"], namespace=namespace)
        assert stored.metadata.labels["app.kubernetes.io/version"] == "0.1.0", (doc["kind"], doc["metadata"]["name"])
        assert stored.metadata.labels["module"] == "ai-inference"


def test_the_embedded_temporal_server_is_installed_with_its_volume(chart: LocalCluster, kube_admin: ApiClient) -> None:
    apps, core = AppsV1Api(kube_admin), CoreV1Api(kube_admin)
    sts = apps.read_namespaced_stateful_set("ai-inference-temporal", NAMESPACE)
    assert sts.spec.replicas == 1
    assert sts.spec.template.spec.containers[0].args[:2] == ["server", "start-dev"]
    service = core.read_namespaced_service("ai-inference-temporal", NAMESPACE)
    # The TLS terminator's port only (the Web UI stays on the pod's loopback).
    assert [(p.name, p.port) for p in service.spec.ports] == [("grpc", 7233)]
    # The StatefulSet controller of the local control plane makes the claim of its database.
    claim = wait_until(
        lambda: core.read_namespaced_persistent_volume_claim("data-ai-inference-temporal-0", NAMESPACE),
        timeout=60,
        what="the embedded Temporal server's claim",
    )
    assert claim.spec.resources.requests["storage"] == "2Gi"
    # The worker and the watcher are pointed at it.
    for component in ("worker", "watcher"):
        env = {
            e.name: e.value
            for e in apps.read_namespaced_deployment(f"ai-inference-{component}", NAMESPACE)
            .spec.template.spec.containers[0]
            .env
        }
        assert env["AI_INFERENCE_TEMPORAL__ADDRESS"] == f"ai-inference-temporal.{NAMESPACE}.svc:7233"


def test_disruption_budgets_and_notes(chart: LocalCluster, kube_admin: ApiClient, helm: Helm) -> None:
    budgets = PolicyV1Api(kube_admin).list_namespaced_pod_disruption_budget(NAMESPACE).items
    assert {b.metadata.name for b in budgets} == {f"ai-inference-{c}" for c in ("worker", "watcher", "planner")}
    notes = helm("get", "notes", RELEASE, "--kubeconfig", str(chart.kubeconfig("admin")), "-n", NAMESPACE).stdout
    assert f"ai-inference-temporal.{NAMESPACE}.svc:7233" in notes
    assert f"kubectl -n {NAMESPACE} port-forward pod/ai-inference-temporal-0 8233" in notes
    assert "kubectl -n NAMESPACE wait --for=condition=Ready inferenceservice.ai.deckhouse.io/NAME" in notes


def test_default_llm_exists_as_rendered_and_validates_against_the_crd(
    chart: LocalCluster, kube_admin: ApiClient, helm: Helm
) -> None:
    rendered = find(helm.render(), "InferenceServiceClass", "default-llm")
    stored = CustomObjectsApi(kube_admin).get_cluster_custom_object(GROUP, VERSION, CLASSES, "default-llm")
    assert stored["metadata"]["labels"]["module"] == "ai-inference"
    # Nothing pruned, nothing defaulted in: the server kept exactly the admin guide's class.
    assert stored["spec"] == rendered["spec"]

    # The CRD the server judges it by is the module's (the one the chart carries).
    crd = ApiextensionsV1Api(kube_admin).read_custom_resource_definition(f"{CLASSES}.{GROUP}")
    assert crd.metadata.labels["module"] == "ai-inference"

    # Strict field validation: no unknown or duplicate field, every CEL rule holds.
    body = copy.deepcopy(rendered)
    body["metadata"] = {"name": "default-llm-validation"}
    _create_class_dry_run(kube_admin, body)

    # The same validation refuses a broken copy, so the dry run above did judge it.
    broken = copy.deepcopy(body)
    broken["spec"]["modelPolicy"]["allowedEndpointTypes"] = []
    with pytest.raises(ApiException) as refused:
        _create_class_dry_run(kube_admin, broken)
    assert refused.value.status == 422
    broken = copy.deepcopy(body)
    broken["spec"]["scalingPolicy"] = {"minReplicas": 3, "maxReplicas": 2}
    with pytest.raises(ApiException) as refused:
        _create_class_dry_run(kube_admin, broken)
    assert refused.value.status == 422


def test_processes_run_under_their_service_accounts(chart: LocalCluster, kube_admin: ApiClient) -> None:
    apps, core = AppsV1Api(kube_admin), CoreV1Api(kube_admin)
    for component in ("worker", "watcher", "planner"):
        deployment = apps.read_namespaced_deployment(f"ai-inference-{component}", NAMESPACE)
        assert deployment.spec.template.spec.service_account_name == f"ai-inference-{component}"
        core.read_namespaced_service_account(f"ai-inference-{component}", NAMESPACE)
    service = core.read_namespaced_service("ai-inference-planner", NAMESPACE)
    assert [(p.name, p.port) for p in service.spec.ports] == [("https", 8443)]


def test_the_planners_helm_made_certificate_survives_an_upgrade(
    chart: LocalCluster, kube_admin: ApiClient, helm: Helm
) -> None:
    """No cert-manager here: Helm makes the serving certificate on install and keeps it on upgrade
    (the worker trusts its CA; a new one on every upgrade would break that)."""
    core = CoreV1Api(kube_admin)
    before = core.read_namespaced_secret("ai-inference-planner-tls", NAMESPACE).data
    assert set(before) == {"tls.crt", "tls.key", "ca.crt"}
    helm.install(chart)
    assert core.read_namespaced_secret("ai-inference-planner-tls", NAMESPACE).data == before


def test_the_embedded_temporals_helm_made_certificates_survive_an_upgrade_and_come_back_from_the_same_ca(
    chart: LocalCluster, kube_admin: ApiClient, helm: Helm
) -> None:
    """The Temporal CA and every certificate it signed are kept on upgrade (lookup); a deleted
    client certificate is made again on the next upgrade, signed by the same CA, and the others stay."""
    core = CoreV1Api(kube_admin)
    names = ["ai-inference-temporal-ca", "ai-inference-temporal-tls"]
    names += [f"ai-inference-temporal-{c}-tls" for c in ("worker", "watcher", "cli")]
    before = {name: core.read_namespaced_secret(name, NAMESPACE).data for name in names}
    helm.install(chart)
    assert {name: core.read_namespaced_secret(name, NAMESPACE).data for name in names} == before
    core.delete_namespaced_secret("ai-inference-temporal-watcher-tls", NAMESPACE)
    helm.install(chart)
    after = {name: core.read_namespaced_secret(name, NAMESPACE).data for name in names}
    assert (
        after["ai-inference-temporal-watcher-tls"]["tls.crt"] != before["ai-inference-temporal-watcher-tls"]["tls.crt"]
    )
    assert after["ai-inference-temporal-watcher-tls"]["ca.crt"] == before["ai-inference-temporal-ca"]["tls.crt"]
    assert {n: d for n, d in after.items() if "watcher" not in n} == {
        n: d for n, d in before.items() if "watcher" not in n
    }


def test_catalog_none_removes_the_catalog_rbac_from_the_release(
    chart: LocalCluster, kube_admin: ApiClient, helm: Helm
) -> None:
    rbac = RbacAuthorizationV1Api(kube_admin)
    rbac.read_cluster_role("d8:ai-inference:catalog-reader")
    try:
        helm.install(chart, {"aiInference.catalog.mode": "None"})
        for read in (rbac.read_cluster_role, rbac.read_cluster_role_binding):
            with pytest.raises(ApiException) as gone:
                read("d8:ai-inference:catalog-reader")
            assert gone.value.status == 404
        env = {
            e.name: e.value
            for e in AppsV1Api(kube_admin)
            .read_namespaced_deployment("ai-inference-worker", NAMESPACE)
            .spec.template.spec.containers[0]
            .env
        }
        assert env["AI_INFERENCE_CATALOG__MODE"] == "None"
    finally:
        helm.install(chart)
    rbac.read_cluster_role_binding("d8:ai-inference:catalog-reader")


@pytest.mark.parametrize("name", list(EXAMPLE_CLASSES))
def test_example_classes_validate_against_the_crd(
    local_cluster: LocalCluster, kube_admin: ApiClient, name: str
) -> None:
    body = example(name)
    created = _create_class_dry_run(kube_admin, body)
    assert created["spec"] == body["spec"]


@pytest.mark.parametrize("name", list(EXAMPLE_PRIORITY_CLASSES))
def test_example_priority_classes_are_accepted(local_cluster: LocalCluster, kube_admin: ApiClient, name: str) -> None:
    body = example(name)
    created = SchedulingV1Api(kube_admin).create_priority_class(body, dry_run="All", field_validation="Strict")
    assert created.value == body["value"]
