"""The embedded Temporal behind mutual TLS, as the chart renders it.

The dev server binds the pod's loopback only; the Service's one port is the TLS terminator's (nginx
with files/temporal-tls-proxy.conf, the file the local stack and the tests run); the certificates
come from cert-manager where it is served, else from Helm; the worker, the watcher and the CLI each
have their own client certificate, and the settings name the files the pod mounts. Then the chart's
own rendered configuration and Helm-made certificates are run for real: nginx in front of the test
session's dev server lets the worker's certificate through and refuses another CA's.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.service import RPCError, RPCStatusCode

from devstack.temporal_tls import PROXY_CONFIG, LocalTemporal, TLSTerminator, render_config
from inference_api.settings import ModuleSettings
from tests.chart.helm import NAMESPACE, Doc, Helm, container_env, find, of_kind
from worker.temporal_client import connect

CERT_MANAGER = ("cert-manager.io/v1/Certificate", "cert-manager.io/v1/Issuer")
CLIENTS = ("worker", "watcher", "cli")
SERVER_NAME = f"ai-inference-temporal.{NAMESPACE}.svc"
SERVER_TLS_DIR = "/etc/ai-inference/temporal-server-tls"
CLIENT_TLS_DIR = "/etc/ai-inference/temporal-tls"


@pytest.fixture(scope="module")
def docs(helm: Helm) -> list[Doc]:
    return helm.render()


def _pod(docs: list[Doc]) -> dict[str, Any]:
    spec: dict[str, Any] = find(docs, "StatefulSet", "ai-inference-temporal")["spec"]["template"]["spec"]
    return spec


def _containers(docs: list[Doc]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in _pod(docs)["containers"]}


def test_the_service_exposes_only_the_tls_terminator(docs: list[Doc]) -> None:
    service = find(docs, "Service", "ai-inference-temporal")
    assert [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [("grpc", 7233, "grpc")]
    containers = _containers(docs)
    assert set(containers) == {"temporal", "tls-proxy"}
    # The port named grpc is the terminator's; the server declares none and binds loopback only
    # (frontend, HTTP API, metrics and Web UI follow --ip / --ui-ip).
    assert containers["tls-proxy"]["ports"] == [{"name": "grpc", "containerPort": 7233, "protocol": "TCP"}]
    server = containers["temporal"]
    assert "ports" not in server
    args = server["args"]
    assert args[args.index("--ip") + 1] == "127.0.0.1"
    assert args[args.index("--ui-ip") + 1] == "127.0.0.1"
    assert args[args.index("--port") + 1] == "7234"
    # Its probes ask it on loopback (a kubelet's TCP probe would knock on the pod's address).
    for probe in ("readinessProbe", "livenessProbe"):
        assert server[probe]["exec"]["command"][-2:] == ["--address", "127.0.0.1:7234"]
    # The terminator is locked down like the module's other containers.
    assert containers["tls-proxy"]["securityContext"] == server["securityContext"]
    assert containers["tls-proxy"]["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_terminator_runs_the_charts_configuration_file(docs: list[Doc]) -> None:
    config = find(docs, "ConfigMap", "ai-inference-temporal-tls-proxy")["data"]["nginx.conf"]
    expected = render_config(
        listen="7233",
        upstream="127.0.0.1:7234",
        cert=Path(f"{SERVER_TLS_DIR}/tls.crt"),
        key=Path(f"{SERVER_TLS_DIR}/tls.key"),
        ca=Path(f"{SERVER_TLS_DIR}/ca.crt"),
        run_dir=Path("/tmp"),
        user="",
    )
    assert config.strip() == expected.strip()
    assert "ssl_verify_client" in PROXY_CONFIG.read_text()
    assert "if ($ssl_client_verify != SUCCESS)" in config
    proxy = _containers(docs)["tls-proxy"]
    assert proxy["command"][:3] == ["nginx", "-c", "/etc/ai-inference/temporal-tls-proxy/nginx.conf"]
    mounts = {m["name"]: m["mountPath"] for m in proxy["volumeMounts"]}
    assert mounts["server-tls"] == SERVER_TLS_DIR
    volumes = {v["name"]: v for v in _pod(docs)["volumes"]}
    assert volumes["server-tls"]["secret"]["secretName"] == "ai-inference-temporal-tls"
    assert volumes["tls-proxy-config"]["configMap"]["name"] == "ai-inference-temporal-tls-proxy"


def test_each_client_mounts_its_own_certificate_and_its_settings_read_it(
    docs: list[Doc], monkeypatch: pytest.MonkeyPatch
) -> None:
    for component in ("worker", "watcher"):
        deployment = find(docs, "Deployment", f"ai-inference-{component}")
        pod = deployment["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["temporal-tls"]["secret"]["secretName"] == f"ai-inference-temporal-{component}-tls"
        (container,) = pod["containers"]
        assert {"name": "temporal-tls", "mountPath": CLIENT_TLS_DIR, "readOnly": True} in container["volumeMounts"]
        temporal = _settings(deployment, monkeypatch).temporal
        assert temporal.tls.enabled is True
        assert (temporal.tls.serverCAFile, temporal.tls.clientCertFile, temporal.tls.clientKeyFile) == (
            f"{CLIENT_TLS_DIR}/ca.crt",
            f"{CLIENT_TLS_DIR}/tls.crt",
            f"{CLIENT_TLS_DIR}/tls.key",
        )
        assert temporal.tls.serverName == SERVER_NAME
        assert temporal.address == f"{SERVER_NAME}:7233"


def test_helm_makes_the_ca_and_every_certificate_without_cert_manager(docs: list[Doc], tmp_path: Path) -> None:
    assert not [d for d in docs if d["apiVersion"].startswith("cert-manager.io/")]
    ca = _write(find(docs, "Secret", "ai-inference-temporal-ca"), tmp_path / "ca")
    server = _write(find(docs, "Secret", "ai-inference-temporal-tls"), tmp_path / "server")
    assert server["ca.crt"].read_bytes() == ca["tls.crt"].read_bytes()
    _verify(ca["tls.crt"], server["tls.crt"], "sslserver")
    sans = _openssl("x509", "-in", str(server["tls.crt"]), "-noout", "-ext", "subjectAltName")
    for name in ("ai-inference-temporal", f"ai-inference-temporal.{NAMESPACE}", SERVER_NAME):
        assert f"DNS:{name}," in sans or sans.rstrip().endswith(f"DNS:{name}"), sans
    for client in CLIENTS:
        files = _write(find(docs, "Secret", f"ai-inference-temporal-{client}-tls"), tmp_path / client)
        assert files["ca.crt"].read_bytes() == ca["tls.crt"].read_bytes()
        _verify(ca["tls.crt"], files["tls.crt"], "sslclient")
        subject = _openssl("x509", "-in", str(files["tls.crt"]), "-noout", "-subject", "-nameopt", "RFC2253")
        assert subject.strip() == f"subject=CN=ai-inference-{client}"


def test_cert_manager_issues_and_renews_them_where_it_is_served(helm: Helm) -> None:
    docs = helm.render(api_versions=CERT_MANAGER)
    issuer = find(docs, "Issuer", "ai-inference-temporal-ca")
    assert issuer["spec"] == {"ca": {"secretName": "ai-inference-temporal-ca"}}
    assert find(docs, "Certificate", "ai-inference-temporal-ca")["spec"]["isCA"] is True
    server = find(docs, "Certificate", "ai-inference-temporal")["spec"]
    assert server["secretName"] == "ai-inference-temporal-tls"
    assert SERVER_NAME in server["dnsNames"]
    assert server["usages"] == ["server auth", "digital signature"]
    assert server["issuerRef"] == {"kind": "Issuer", "name": "ai-inference-temporal-ca"}
    for client in CLIENTS:
        spec = find(docs, "Certificate", f"ai-inference-temporal-{client}")["spec"]
        assert spec["secretName"] == f"ai-inference-temporal-{client}-tls"
        assert spec["usages"] == ["client auth", "digital signature"]
        assert spec["issuerRef"] == {"kind": "Issuer", "name": "ai-inference-temporal-ca"}
        assert (spec["duration"], spec["renewBefore"]) == ("8760h", "2160h")
    # Helm makes none of them then.
    names = {s["metadata"]["name"] for s in of_kind(docs, "Secret")}
    assert not {n for n in names if n.startswith("ai-inference-temporal")}
    # Forced either way.
    assert of_kind(helm.render({"aiInference.temporal.embedded.tls.mode": "CertManager"}), "Certificate")
    forced = helm.render({"aiInference.temporal.embedded.tls.mode": "Helm"}, api_versions=CERT_MANAGER)
    assert not [c for c in of_kind(forced, "Certificate") if c["metadata"]["name"].startswith("ai-inference-temporal")]


def test_an_existing_temporal_gets_none_of_it(helm: Helm) -> None:
    docs = helm.render(
        {"aiInference.temporal.embedded.enabled": False, "aiInference.temporal.address": "temporal.example:7233"}
    )
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert not {n for n in names if n[1].startswith("ai-inference-temporal")}


async def test_the_charts_terminator_and_certificates_work_for_real(
    docs: list[Doc], temporal_server: LocalTemporal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nginx with the rendered ConfigMap and the Helm-made server Secret, in front of the session's
    dev server; the worker connects with its rendered settings and Secret, verifying the server as
    the Service's DNS name. The planner's certificate (another CA of the same chart) is refused."""
    server_dir = tmp_path / "server-tls"
    _write(find(docs, "Secret", "ai-inference-temporal-tls"), server_dir)
    config = find(docs, "ConfigMap", "ai-inference-temporal-tls-proxy")["data"]["nginx.conf"]
    # The chart's configuration names the chart's certificates: the session's credentials go unread.
    terminator = TLSTerminator(tmp_path / "nginx", temporal_server.credentials, temporal_server.upstream)
    config = config.replace(SERVER_TLS_DIR, str(server_dir)).replace("127.0.0.1:7234", temporal_server.upstream)
    config = re.sub(r"listen 7233 ", f"listen {terminator.address} ", config)
    config = re.sub(r"(?m)^(\s*(?:\w+_temp_path|pid) )/tmp", rf"\1{terminator.directory}", config)
    if os.geteuid() == 0:
        config = "user root;\n" + config
    terminator.start(config=config)
    try:
        server_ca = _write(_secret_for(docs, "worker"), tmp_path / "worker")["ca.crt"]
        for component, refused in (("worker", False), ("planner", True)):
            files = _write(_secret_for(docs, component), tmp_path / component)
            deployment = find(docs, "Deployment", "ai-inference-worker")
            settings = _settings(deployment, monkeypatch)
            tls = settings.temporal.tls.model_copy(
                update={
                    "serverCAFile": str(server_ca),
                    "clientCertFile": str(files["tls.crt"]),
                    "clientKeyFile": str(files["tls.key"]),
                }
            )
            # The Service's address is not resolvable here: the terminator's, with the Service's name.
            temporal = settings.temporal.model_copy(update={"address": terminator.address, "tls": tls})
            attempt = connect(settings.model_copy(update={"temporal": temporal}))
            if refused:
                with pytest.raises(RuntimeError, match="client certificate of the module's Temporal CA"):
                    await asyncio.wait_for(attempt, 30)
            else:
                client = await asyncio.wait_for(attempt, 30)
                # The Helm-made certificate's subject is the worker identity's: its methods, not others.
                described = await client.workflow_service.describe_namespace(
                    DescribeNamespaceRequest(namespace=client.namespace)
                )
                assert described.namespace_info.name == client.namespace
                with pytest.raises(RPCError) as denied:
                    await client.list_workflows().fetch_next_page()  # a count it may (patch retirement)
                assert denied.value.status == RPCStatusCode.PERMISSION_DENIED
    finally:
        terminator.stop()


# -- helpers ------------------------------------------------------------------------------------


def _settings(deployment: Doc, monkeypatch: pytest.MonkeyPatch) -> ModuleSettings:
    for key in list(os.environ):
        if key.upper().startswith("AI_INFERENCE_"):
            monkeypatch.delenv(key)
    for key, value in container_env(deployment).items():
        monkeypatch.setenv(key, value)
    return ModuleSettings()


def _write(secret: Doc, directory: Path) -> dict[str, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    out = {}
    for key, value in secret["data"].items():
        path = directory / key
        path.write_bytes(base64.b64decode(value))
        path.chmod(0o600)
        out[key] = path
    return out


def _secret_for(docs: list[Doc], component: str) -> Doc:
    if component == "planner":
        return find(docs, "Secret", "ai-inference-planner-tls")
    return find(docs, "Secret", f"ai-inference-temporal-{component}-tls")


def _openssl(*args: str) -> str:
    result = subprocess.run(["openssl", *args], capture_output=True, text=True, check=True)
    return result.stdout


def _verify(ca: Path, cert: Path, purpose: str) -> None:
    result = subprocess.run(
        ["openssl", "verify", "-CAfile", str(ca), "-purpose", purpose, str(cert)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
