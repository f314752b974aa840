"""Helm as a subprocess: render the chart, lint it, install it into the local control plane.

Tests take the ``helm`` fixture (tests/fixtures/binaries.py): a ``Helm`` over the pinned binary that
``devstack.cluster.build`` builds from Go modules. The fixture marks the test ``binaries`` and the
binary is built once before the first test (never skipped, never inside a test's timeout). Such a
helm carries no version stamps, so ``template``/``lint`` default to Kubernetes v1.20; the chart needs
>= 1.34, hence ``--kube-version``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes.client import ApiClient, CoordinationV1Api, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from devstack.cluster.build import Binaries, missing_binaries
from devstack.cluster.launcher import LocalCluster

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = REPO_ROOT / "deploy" / "charts" / "ai-inference"
RELEASE = "ai-inference"
NAMESPACE = "d8-ai-inference"
KUBE_VERSION = "1.34.0"
MONITORING_APIS = ("monitoring.coreos.com/v1/PrometheusRule", "monitoring.coreos.com/v1/PodMonitor")

Doc = dict[str, Any]
# Values files of this process's helm calls; removed when the interpreter exits.
_VALUES_DIR = tempfile.TemporaryDirectory(prefix="ai-inference-chart-values-")


def nested(values: dict[str, Any] | None) -> dict[str, Any]:
    """{"a.b": 1} -> {"a": {"b": 1}}: dotted keys as a values document (no --set parsing rules)."""
    out: dict[str, Any] = {}
    for key, value in (values or {}).items():
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def set_args(values: dict[str, Any] | None) -> list[str]:
    """``--values <file>`` holding ``values`` (dotted keys), or nothing."""
    if not values:
        return []
    fd, path = tempfile.mkstemp(prefix="values-", suffix=".yaml", dir=_VALUES_DIR.name)
    with os.fdopen(fd, "w") as handle:
        yaml.safe_dump(nested(values), handle)
    return ["--values", path]


def template_args(values: dict[str, Any] | None = None, api_versions: Iterable[str] = ()) -> list[str]:
    args = ["template", RELEASE, str(CHART_DIR), "--namespace", NAMESPACE, "--kube-version", KUBE_VERSION]
    for api in api_versions:
        args += ["--api-versions", api]
    return args + set_args(values)


def find(docs: list[Doc], kind: str, name: str) -> Doc:
    matches = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}: {len(matches)} rendered"
    return matches[0]


def of_kind(docs: list[Doc], kind: str) -> list[Doc]:
    return [d for d in docs if d["kind"] == kind]


def container_env(deployment: Doc) -> dict[str, str]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


@dataclass(frozen=True)
class Helm:
    """The pinned helm binary: ``helm(*args)`` runs it; render, install, uninstall, installed."""

    binary: Path

    @classmethod
    def pinned(cls) -> Helm:
        """The pinned helm if it is built already (this never builds it): for code that cannot take
        the ``helm`` fixture."""
        if missing_binaries(("helm",)):
            raise AssertionError("helm is not built: take the `helm` fixture, which builds it before the first test")
        return cls(Binaries.pinned().helm)

    def __call__(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([str(self.binary), *args], capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({result.returncode}):\n{result.stderr}{result.stdout}")
        return result

    def render(self, values: dict[str, Any] | None = None, api_versions: Iterable[str] = ()) -> list[Doc]:
        """The chart's objects as helm renders them (CRDs of crds/ are not templates and not included)."""
        out = self(*template_args(values, api_versions)).stdout
        return [d for d in yaml.safe_load_all(out) if d]

    def install(self, cluster: LocalCluster, values: dict[str, Any] | None = None) -> None:
        """``helm upgrade --install`` as the cluster admin (idempotent; takes over objects a previous
        run left behind in a reused cluster).

        The CRD upgrade hook is off unless ``values`` turn it on: kwok runs no container, so its Job
        would never finish and an upgrade would wait for it (tests/chart/test_crd_upgrade.py runs it).
        So is the disable hook, for the same reason on uninstall (tests/chart/test_disable.py runs it)."""
        values = {"crdUpgrade.enabled": False, "disableHook.enabled": False, **(values or {})}
        self(
            "upgrade",
            "--install",
            RELEASE,
            str(CHART_DIR),
            "--kubeconfig",
            str(cluster.kubeconfig("admin")),
            "--namespace",
            NAMESPACE,
            "--create-namespace",
            "--take-ownership",
            # Without values helm would reuse the previous release's, not the chart's defaults.
            "--reset-values",
            *set_args(values),
            timeout=180,
        )

    def uninstall(self, cluster: LocalCluster) -> None:
        self(
            "uninstall",
            RELEASE,
            "--kubeconfig",
            str(cluster.kubeconfig("admin")),
            "--namespace",
            NAMESPACE,
            "--ignore-not-found",
            # A test's cleanup: the disable hook's Job would wait for a kubelet kwok does not run
            # (tests/chart/test_disable.py runs the hook with an uninstall of its own).
            "--no-hooks",
            timeout=180,
        )
        marks_guard_gone(cluster)

    @contextmanager
    def installed(self, cluster: LocalCluster, values: dict[str, Any] | None = None) -> Iterator[None]:
        """The chart installed for the duration; uninstalled afterwards (the CRDs stay, as with helm)."""
        self.install(cluster, values)
        try:
            yield
        finally:
            self.uninstall(cluster)


def render(values: dict[str, Any] | None = None, api_versions: Iterable[str] = ()) -> list[Doc]:
    """``Helm.pinned().render(...)``: for a test that cannot take the ``helm`` fixture (prefer the
    fixture: it marks the test ``binaries`` and builds helm when missing)."""
    return Helm.pinned().render(values, api_versions)


def marks_guard_gone(cluster: LocalCluster, timeout: float = 30) -> None:
    """Wait until the API server no longer enforces the chart's marks guard: the policy is deleted at
    once, but its admission takes a moment to drop it, and a test after an uninstall that writes the
    module's labels as the cluster administrator (a decoy, a forged object) would be refused meanwhile."""
    probe = {
        "metadata": {"name": "marks-guard-gone", "labels": {"ai.deckhouse.io/inference-service": "probe"}},
        "data": {},
    }
    deadline = time.monotonic() + timeout
    with cluster.api_client("admin") as api:
        core = CoreV1Api(api)
        while True:
            try:
                core.create_namespaced_config_map("default", probe, dry_run="All")
                return
            except ApiException as err:
                if err.status != 403 or time.monotonic() > deadline:
                    raise
            time.sleep(0.2)


def forget_chart_pods_leases(api: ApiClient) -> None:
    """Delete the Leases the chart's own pods hold in the module's namespace (the stand-in kubelet ran them).

    The uninstall removes the chart's RBAC beside its Deployments, so a watcher stopping then cannot
    release its Lease (Forbidden) and leaves it to expire — harmless on a cluster, where the next observer
    takes it 15 s later, but the local stack's observers in a later test would stand by behind a holder
    that no longer exists."""
    coordination = CoordinationV1Api(api)
    for lease in coordination.list_namespaced_lease(NAMESPACE).items:
        if (lease.spec.holder_identity or "").startswith(f"{RELEASE}-"):
            with contextlib.suppress(ApiException):
                coordination.delete_namespaced_lease(lease.metadata.name, NAMESPACE)


def create_default_llm_order(api: ApiClient, namespace: str, name: str) -> None:
    """An order of the small chat model under the chart's bundled class, as a namespace user writes it."""
    body = {
        "apiVersion": "ai.deckhouse.io/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {
            "inferenceServiceClassName": "default-llm",
            "model": {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}},
        },
    }
    CustomObjectsApi(api).create_namespaced_custom_object(
        "ai.deckhouse.io", "v1alpha1", namespace, "inferenceservices", body
    )
