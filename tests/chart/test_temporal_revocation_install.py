"""The admin guide's Helm-mode revocation steps ("Revoking a certificate") on the real local control
plane, with the real kubectl and helm: the chart installed (Helm mode: no cert-manager here), the
guide's own CA put in place of Helm's with its block, the CRL's start with its block, then an upgrade
with ``revocationList.enabled``. The upgrade goes through (Helm still owns the CA Secret, and the chart
finds a CA so does not refuse), every certificate is made again from the administrator's CA, the
terminator is given the CRL, and the guide's revocation block revokes the CLI's certificate."""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path

import pytest
from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api
from kubernetes.client.exceptions import ApiException

from devstack.cluster.launcher import LocalCluster
from tests.chart.helm import NAMESPACE, Helm
from tests.chart.test_temporal_revocation import CRL_DIR, ENABLED, _guide_blocks

CLIENTS = ("worker", "watcher", "cli")


def _run(block: str, cluster: LocalCluster, workdir: Path) -> None:
    kubectl = cluster.binaries.kubectl
    env = {
        **os.environ,
        "PATH": f"{kubectl.parent}:{os.environ['PATH']}",
        "KUBECONFIG": str(cluster.kubeconfig("admin")),
    }
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=workdir, env=env,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, f"the guide's block failed:\n{block}\n{result.stdout}{result.stderr}"


def _secret(core: CoreV1Api, name: str) -> dict[str, bytes]:
    data = core.read_namespaced_secret(name, NAMESPACE).data
    return {k: base64.b64decode(v) for k, v in data.items()}


def _verify(workdir: Path, ca: bytes, cert: bytes, crl: bytes | None = None) -> subprocess.CompletedProcess[str]:
    (workdir / "check-ca.crt").write_bytes(ca)
    (workdir / "check.crt").write_bytes(cert)
    args = ["openssl", "verify", "-CAfile", "check-ca.crt"]
    if crl is not None:
        (workdir / "check.crl").write_bytes(crl)
        args += ["-crl_check", "-CRLfile", "check.crl"]
    return subprocess.run([*args, "check.crt"], cwd=workdir, capture_output=True, text=True)


def test_the_guides_helm_mode_steps_on_a_real_release(
    local_cluster: LocalCluster, kube_admin: ApiClient, helm: Helm, tmp_path: Path
) -> None:
    core = CoreV1Api(kube_admin)
    blocks = _guide_blocks()
    try:
        with helm.installed(local_cluster):
            helms_ca = _secret(core, "ai-inference-temporal-ca")["tls.crt"]
            _run(blocks["ca"], local_cluster, tmp_path)
            ours = (tmp_path / "temporal-ca.crt").read_bytes()
            assert _secret(core, "ai-inference-temporal-ca")["tls.crt"] == ours != helms_ca
            _run(blocks["start"], local_cluster, tmp_path)
            crl = _secret(core, "ai-inference-temporal-crl")["ca.crl"]

            helm.install(local_cluster, ENABLED)

            # Helm's CA is gone for good; every certificate is made again from the administrator's.
            assert _secret(core, "ai-inference-temporal-ca")["tls.crt"] == ours
            for name in ["ai-inference-temporal-tls", *(f"ai-inference-temporal-{c}-tls" for c in CLIENTS)]:
                secret = _secret(core, name)
                assert secret["ca.crt"] == ours, name
                verified = _verify(tmp_path, ours, secret["tls.crt"], crl)
                assert verified.returncode == 0, (name, verified.stdout + verified.stderr)
            # The terminator reads the administrator's CRL.
            pod = AppsV1Api(kube_admin).read_namespaced_stateful_set("ai-inference-temporal", NAMESPACE).spec.template
            volumes = {v.name: v for v in pod.spec.volumes}
            assert volumes["crl"].secret.secret_name == "ai-inference-temporal-crl"
            config = core.read_namespaced_config_map("ai-inference-temporal-tls-proxy", NAMESPACE).data
            assert f"ssl_crl {CRL_DIR}/ca.crl;" in config["nginx.conf"]
            # An upgrade keeps all of it.
            before = {n: _secret(core, n) for n in ("ai-inference-temporal-ca", "ai-inference-temporal-cli-tls")}
            helm.install(local_cluster, ENABLED)
            assert {n: _secret(core, n) for n in before} == before

            _run(blocks["revoke"], local_cluster, tmp_path)
            crl = _secret(core, "ai-inference-temporal-crl")["ca.crl"]
            refused = _verify(tmp_path, ours, _secret(core, "ai-inference-temporal-cli-tls")["tls.crt"], crl)
            assert refused.returncode != 0
            assert "certificate revoked" in refused.stdout + refused.stderr
            kept = _verify(tmp_path, ours, _secret(core, "ai-inference-temporal-worker-tls")["tls.crt"], crl)
            assert kept.returncode == 0, kept.stdout + kept.stderr
    finally:
        # Not the chart's: helm uninstall leaves it.
        try:
            core.delete_namespaced_secret("ai-inference-temporal-crl", NAMESPACE)
        except ApiException as e:
            if e.status != 404:
                raise


@pytest.fixture(autouse=True)
def _no_crl_left_behind(kube_admin: ApiClient) -> None:
    """A CRL Secret left by an interrupted run would make the start block's `create` fail."""
    try:
        CoreV1Api(kube_admin).delete_namespaced_secret("ai-inference-temporal-crl", NAMESPACE)
    except ApiException as e:
        if e.status != 404:
            raise
