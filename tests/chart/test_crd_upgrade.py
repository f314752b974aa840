"""The CRD upgrade hook: Helm installs ``crds/`` but never upgrades it, so the chart runs
``ai-inference crds --apply`` in a pre-upgrade hook Job, as a ServiceAccount that may only get, patch
and update the module's two CRDs.

The render tests pin the hook's shape (hook annotations and weights, the RBAC, Pod Security
restricted, off for Deckhouse). The install test does a real ``helm upgrade`` against the local
control plane with both CRDs made stale beforehand: one lacks a field the generated CRD has (server-side
apply adds it), the other has a conversion webhook the generated CRD does not set (only the spec
replacement removes it).

kwok runs no containers, so nothing would ever run the hook's pod and the upgrade would wait for
the Job forever. The test plays the kubelet for that one pod and nothing else: it waits for the pod
the real Job controller creates, runs the pod's own command (read from the pod spec: ``ai-inference
crds --apply``, from this venv's installed package) with the pod's own identity — a token of the pod's
ServiceAccount from the TokenRequest API, bound to the pod, used as a bearer token against the local
API server, so the chart's RBAC is what allows or refuses each call — then reports the pod Succeeded
through the status subresource. The Job controller (kube-controller-manager runs in the fixture)
completes the Job and Helm carries on. The command and the identity are the real ones; only the
container runtime is stood in for.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import config as kube_config
from kubernetes.client import (
    ApiClient,
    ApiextensionsV1Api,
    AuthenticationV1TokenRequest,
    BatchV1Api,
    CoreV1Api,
    RbacAuthorizationV1Api,
    V1BoundObjectReference,
    V1TokenRequestSpec,
)
from kubernetes.client.rest import ApiException

from devstack.cluster.launcher import LocalCluster
from tests.chart.helm import CHART_DIR, NAMESPACE, RELEASE, Doc, Helm, find, set_args
from tests.chart.test_module import _module_config, deckhouse_values, render_values
from worker.crd_upgrade import module_crds

MODULE_CRDS = sorted(c["metadata"]["name"] for c in module_crds())
RESTRICTED = "pod-security.kubernetes.io/enforce"
VENV_BIN = Path(sys.executable).parent


def _hooks(docs: list[Doc]) -> list[Doc]:
    # The pre-upgrade hook's objects (the pre-delete hook's: tests/chart/test_disable.py).
    return [d for d in docs if (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == "pre-upgrade"]


# -- render ------------------------------------------------------------------------------------


def test_the_hook_runs_the_command_before_upgrades_only_with_rbac_made_first(helm: Helm) -> None:
    hooks = _hooks(helm.render())
    assert {(d["kind"], d["metadata"]["name"]) for d in hooks} == {
        ("ServiceAccount", "ai-inference-crd-upgrade"),
        ("ClusterRole", "d8:ai-inference:crd-upgrade"),
        ("ClusterRoleBinding", "d8:ai-inference:crd-upgrade"),
        ("Job", "ai-inference-crd-upgrade"),
        # What the Job's pod may reach (DNS, the API server) in the default-deny module namespace.
        ("NetworkPolicy", "ai-inference-crd-upgrade"),
    }
    weight = {}
    for doc in hooks:
        annotations = doc["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "pre-upgrade", doc["kind"]
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded", doc["kind"]
        weight[doc["kind"]] = int(annotations["helm.sh/hook-weight"])
    assert weight["ServiceAccount"] < weight["ClusterRoleBinding"] < weight["Job"]
    assert weight["ClusterRole"] < weight["ClusterRoleBinding"]
    assert weight["NetworkPolicy"] < weight["Job"]
    job = find(hooks, "Job", "ai-inference-crd-upgrade")
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] + container["args"] == ["ai-inference", "crds", "--apply"]
    assert container["image"] == "ai-inference:0.1.0"
    assert pod["serviceAccountName"] == "ai-inference-crd-upgrade"
    assert pod["restartPolicy"] == "Never"
    assert job["metadata"]["namespace"] == NAMESPACE


def test_the_hook_may_only_get_patch_and_update_the_two_module_crds(helm: Helm) -> None:
    hooks = _hooks(helm.render())
    role = find(hooks, "ClusterRole", "d8:ai-inference:crd-upgrade")
    assert role["rules"] == [
        {
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "resourceNames": ["inferenceservices.ai.deckhouse.io", "inferenceserviceclasses.ai.deckhouse.io"],
            "verbs": ["get", "patch", "update"],
        }
    ]
    assert sorted(role["rules"][0]["resourceNames"]) == MODULE_CRDS  # the generated ones, no other
    binding = find(hooks, "ClusterRoleBinding", "d8:ai-inference:crd-upgrade")
    assert binding["roleRef"]["name"] == "d8:ai-inference:crd-upgrade"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "ai-inference-crd-upgrade", "namespace": NAMESPACE}
    ]


def test_the_hook_pod_meets_pod_security_restricted(helm: Helm) -> None:
    pod = find(helm.render(), "Job", "ai-inference-crd-upgrade")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    context = container["securityContext"]
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["readOnlyRootFilesystem"] is True
    assert not any("hostPath" in v for v in pod.get("volumes", []))


def test_the_hook_is_off_with_the_value_and_for_deckhouse(helm: Helm, tmp_path: Path) -> None:
    assert not _hooks(helm.render({"crdUpgrade.enabled": False}))
    deckhouse = render_values(helm, deckhouse_values(_module_config("moduleconfig-minimal.yaml")), tmp_path)
    assert not _hooks(deckhouse)
    assert "ai-inference-crd-upgrade" not in {d["metadata"]["name"] for d in deckhouse}


def test_the_hook_values_are_schema_checked(helm: Helm) -> None:
    result = helm(
        "template", RELEASE, str(CHART_DIR), "--kube-version", "1.34.0", *set_args({"crdUpgrade.enabld": False}),
        check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert "additional properties 'enabld' not allowed" in result.stderr


# -- a real upgrade ----------------------------------------------------------------------------


def _stale(crd: dict[str, Any], *, drop_status_field: bool) -> dict[str, Any]:
    """An older copy of ``crd``: without one status field and the status description (server-side
    apply puts them back: a version's schema is atomic), or with a conversion webhook an older release
    had (server-side apply keeps a field another manager set that the applied CRD does not name: only
    the spec replacement drops it)."""
    old = copy.deepcopy(crd)
    if drop_status_field:
        status = old["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
        del status["properties"][sorted(status["properties"])[-1]]
        status.pop("description", None)
    else:
        old["spec"]["conversion"] = {
            "strategy": "Webhook",
            "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": {"url": "https://old.invalid/convert"}},
        }
    return old


def _stored_spec(crd: dict[str, Any]) -> dict[str, Any]:
    return {**copy.deepcopy(crd["spec"]), "conversion": {"strategy": "None"}}


@pytest.fixture
def uninstalled(local_cluster: LocalCluster, helm: Helm, kube_admin: ApiClient) -> Iterator[LocalCluster]:
    """No release before (so the first install is an install, not an upgrade) and none after; the CRDs
    left as generated and the namespace without the Pod Security label afterwards."""
    helm.uninstall(local_cluster)
    try:
        yield local_cluster
    finally:
        helm.uninstall(local_cluster)
        api = ApiextensionsV1Api(kube_admin)
        for crd in module_crds():
            server = api.read_custom_resource_definition(crd["metadata"]["name"]).to_dict()
            body = {**crd, "metadata": {**crd["metadata"], "resourceVersion": server["metadata"]["resource_version"]}}
            api.replace_custom_resource_definition(crd["metadata"]["name"], body)
        try:
            CoreV1Api(kube_admin).patch_namespace(NAMESPACE, {"metadata": {"labels": {RESTRICTED: None}}})
        except ApiException as err:
            if err.status != 404:
                raise


def _wait_for_hook_pod(core: CoreV1Api, helm_run: subprocess.Popen[str], timeout: float = 150) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if helm_run.poll() is not None:
            _, err = helm_run.communicate()
            raise AssertionError(f"helm upgrade ended before the hook's pod ran:\n{err}")
        pods = core.list_namespaced_pod(NAMESPACE, label_selector="app=ai-inference-crd-upgrade").items
        if pods:
            return pods[0]
        time.sleep(0.5)
    raise AssertionError(f"no pod of Job ai-inference-crd-upgrade within {timeout}s")


def _pod_token(core: CoreV1Api, pod: Any) -> str:
    """A token of the pod's ServiceAccount, bound to the pod, as the kubelet would project it (secret:
    never printed)."""
    request = AuthenticationV1TokenRequest(
        spec=V1TokenRequestSpec(
            audiences=[],
            expiration_seconds=600,
            bound_object_ref=V1BoundObjectReference(
                api_version="v1", kind="Pod", name=pod.metadata.name, uid=pod.metadata.uid
            ),
        )
    )
    answer = core.create_namespaced_service_account_token(pod.spec.service_account_name, NAMESPACE, request)
    token: str = answer.status.token
    return token


def _kubeconfig_for(cluster: LocalCluster, token: str, path: Path) -> Path:
    admin = yaml.safe_load(cluster.kubeconfig("admin").read_text())
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": admin["clusters"],
        "users": [{"name": "hook", "user": {"token": token}}],
        "contexts": [{"name": "hook", "context": {"cluster": admin["clusters"][0]["name"], "user": "hook"}}],
        "current-context": "hook",
    }
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        yaml.safe_dump(doc, handle)
    return path


def _as_hook(kubeconfig: Path) -> ApiClient:
    return kube_config.new_client_from_config(config_file=str(kubeconfig), persist_config=False)


def test_helm_upgrade_brings_stale_crds_to_the_generated_ones_through_the_hook(
    uninstalled: LocalCluster, helm: Helm, kube_admin: ApiClient, tmp_path: Path
) -> None:
    cluster = uninstalled
    helm.install(cluster)
    extensions, core = ApiextensionsV1Api(kube_admin), CoreV1Api(kube_admin)
    # Both CRDs stale, written by another manager as `helm install` would have (an update, not an apply).
    generated = {c["metadata"]["name"]: c for c in module_crds()}
    for index, (name, crd) in enumerate(sorted(generated.items())):
        server = extensions.read_custom_resource_definition(name).to_dict()
        old = _stale(crd, drop_status_field=index == 0)
        old["metadata"]["resourceVersion"] = server["metadata"]["resource_version"]
        extensions.replace_custom_resource_definition(name, old, field_manager="helm")
        stored = extensions.api_client.sanitize_for_serialization(extensions.read_custom_resource_definition(name))
        assert stored["spec"] != _stored_spec(crd), name
    # New pods in the namespace must pass Pod Security restricted (the hook's pod included).
    core.patch_namespace(NAMESPACE, {"metadata": {"labels": {RESTRICTED: "restricted"}}})

    upgrade = subprocess.Popen(
        [
            str(helm.binary), "upgrade", RELEASE, str(CHART_DIR), "--kubeconfig", str(cluster.kubeconfig("admin")),
            "--namespace", NAMESPACE, "--reset-values", "--timeout", "4m",
            *set_args({"crdUpgrade.enabled": True, "disableHook.enabled": False}),
        ],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        pod = _wait_for_hook_pod(core, upgrade)
        (container,) = pod.spec.containers
        command = [*(container.command or []), *(container.args or [])]
        assert command == ["ai-inference", "crds", "--apply"]
        kubeconfig = _kubeconfig_for(cluster, _pod_token(core, pod), tmp_path / "hook-kubeconfig.yaml")

        # The hook's identity may touch nothing but the two module CRDs.
        other = next(
            c.metadata.name
            for c in extensions.list_custom_resource_definition().items
            if c.metadata.name not in generated
        )
        with _as_hook(kubeconfig) as hook_api:
            with pytest.raises(ApiException) as refused:
                ApiextensionsV1Api(hook_api).patch_custom_resource_definition(
                    other, {"metadata": {"labels": {"touched": "yes"}}}
                )
            assert refused.value.status == 403
            with pytest.raises(ApiException) as refused_rbac:
                RbacAuthorizationV1Api(hook_api).list_cluster_role()
            assert refused_rbac.value.status == 403

        # The pod's own command, from this venv, as the pod's ServiceAccount (KUBECONFIG: no in-cluster env here).
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        env["KUBECONFIG"] = str(kubeconfig)
        ran = subprocess.run(
            [str(VENV_BIN / command[0]), *command[1:]], capture_output=True, text=True, timeout=120, env=env
        )
        assert ran.returncode == 0, f"{' '.join(command)} exited {ran.returncode}:\n{ran.stderr}"
        assert sorted(ran.stdout.splitlines()) == sorted(
            [
                f"{MODULE_CRDS[0]}: applied (server-side)",
                f"{MODULE_CRDS[1]}: applied (server-side), spec replaced (fields the generated CRD no longer has)",
            ]
        ), ran.stdout
        # What the kubelet would report: the container exited 0.
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        core.patch_namespaced_pod_status(
            pod.metadata.name,
            NAMESPACE,
            {
                "status": {
                    "phase": "Succeeded",
                    "containerStatuses": [
                        {
                            "name": container.name,
                            "image": container.image,
                            "imageID": "",
                            "ready": False,
                            "restartCount": 0,
                            "state": {
                                "terminated": {
                                    "exitCode": 0,
                                    "reason": "Completed",
                                    "startedAt": now,
                                    "finishedAt": now,
                                }
                            },
                        }
                    ],
                }
            },
        )
        out, err = upgrade.communicate(timeout=240)
    finally:
        if upgrade.poll() is None:
            upgrade.kill()
            upgrade.communicate()
    assert upgrade.returncode == 0, f"helm upgrade failed:\n{err}{out}"

    for name, crd in generated.items():
        stored = extensions.api_client.sanitize_for_serialization(extensions.read_custom_resource_definition(name))
        assert stored["spec"] == _stored_spec(crd), name
        assert stored["metadata"]["labels"].items() >= crd["metadata"]["labels"].items()
    # The hook objects went once it succeeded (hook-succeeded); the release is upgraded.
    with pytest.raises(ApiException) as gone:
        BatchV1Api(kube_admin).read_namespaced_job("ai-inference-crd-upgrade", NAMESPACE)
    assert gone.value.status == 404
    with pytest.raises(ApiException) as sa_gone:
        core.read_namespaced_service_account("ai-inference-crd-upgrade", NAMESPACE)
    assert sa_gone.value.status == 404
    history = helm("history", RELEASE, "--kubeconfig", str(cluster.kubeconfig("admin")), "-n", NAMESPACE, "-o", "yaml")
    assert [r["status"] for r in yaml.safe_load(history.stdout)][-1] == "deployed"
