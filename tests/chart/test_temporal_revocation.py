"""Certificate revocation at the embedded Temporal's terminator, as the chart ships it
(``aiInference.temporal.embedded.tls.revocationList``; docs/admin-guide.md, "Revoking a certificate").

- Off by default: no ``ssl_crl``, nginx run as before. On: ``ssl_crl`` on the administrator's Secret,
  mounted (not optional), and nginx run under files/temporal-tls-proxy-reload.sh, which reloads it
  when the CRL, the CA or the configuration changes on disk.
- The CA must be allowed to sign CRLs: cert-manager's is asked for ``crl sign``; Helm's genCA gives
  none, so a CRL of the chart's Helm-made CA is refused by OpenSSL, and a Helm-mode install with
  revocation on and no CA of the administrator's is refused.
- The admin guide's shell blocks, run as written (kubectl stood in for, tests/chart/fake_kubectl.py),
  make a CRL of the CA that revokes exactly the certificate revoked.
- The chart-rendered configuration with the CRL passes ``nginx -t`` (and an empty CRL file does not).
- For real: the chart-rendered configuration and reload script, with the guide's CRL, in front of the
  test session's dev server: a certificate works, is revoked with the guide's commands, the Secret's
  file is swapped as the kubelet swaps it, and the terminator refuses it without a restart while the
  others keep working; a CRL nginx refuses leaves the previous one in force; SIGTERM stops it all.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.service import TLSConfig

from devstack.cluster.paths import REPO_ROOT
from devstack.temporal_tls import LocalTemporal, nginx_binary, render_config
from tests.chart import fake_kubectl
from tests.chart.helm import CHART_DIR, NAMESPACE, Doc, Helm, find

CERT_MANAGER = ("cert-manager.io/v1/Certificate", "cert-manager.io/v1/Issuer")
ENABLED = {"aiInference.temporal.embedded.tls.revocationList.enabled": True}
SERVER_NAME = f"ai-inference-temporal.{NAMESPACE}.svc"
SERVER_TLS_DIR = "/etc/ai-inference/temporal-server-tls"
PROXY_DIR = "/etc/ai-inference/temporal-tls-proxy"
CRL_DIR = "/etc/ai-inference/temporal-crl"
RELOAD_SCRIPT = CHART_DIR / "files" / "temporal-tls-proxy-reload.sh"
GUIDE = REPO_ROOT / "docs" / "admin-guide.md"
REVOKED = "revoked"


# -- rendering ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def revocation_docs(helm: Helm) -> list[Doc]:
    """The chart with revocation on, where cert-manager is served (its CA may sign CRLs)."""
    return helm.render(ENABLED, api_versions=CERT_MANAGER)


def _proxy_config(docs: list[Doc]) -> dict[str, str]:
    data: dict[str, str] = find(docs, "ConfigMap", "ai-inference-temporal-tls-proxy")["data"]
    return data


def _pod(docs: list[Doc]) -> dict[str, Any]:
    spec: dict[str, Any] = find(docs, "StatefulSet", "ai-inference-temporal")["spec"]["template"]["spec"]
    return spec


def _proxy(docs: list[Doc]) -> dict[str, Any]:
    (proxy,) = [c for c in _pod(docs)["containers"] if c["name"] == "tls-proxy"]
    return proxy


def test_without_the_setting_no_crl_is_checked_and_nginx_runs_as_before(helm: Helm) -> None:
    for docs in (helm.render(), helm.render(api_versions=CERT_MANAGER)):
        config = _proxy_config(docs)
        assert set(config) == {"nginx.conf"}
        assert not re.search(r"(?m)^\s*ssl_crl\s", config["nginx.conf"])
        assert "# no certificate revocation list" in config["nginx.conf"]
        proxy = _proxy(docs)
        assert proxy["command"] == ["nginx", "-c", f"{PROXY_DIR}/nginx.conf", "-e", "stderr", "-g", "daemon off;"]
        assert "crl" not in {m["name"] for m in proxy["volumeMounts"]}
        assert "crl" not in {v["name"] for v in _pod(docs)["volumes"]}


def test_the_setting_renders_ssl_crl_on_the_administrators_secret(revocation_docs: list[Doc], helm: Helm) -> None:
    config = _proxy_config(revocation_docs)
    # The local stack's file, filled in the same way with the CRL's path in the pod.
    expected = render_config(
        listen="7233", upstream="127.0.0.1:7234", cert=Path(f"{SERVER_TLS_DIR}/tls.crt"),
        key=Path(f"{SERVER_TLS_DIR}/tls.key"), ca=Path(f"{SERVER_TLS_DIR}/ca.crt"), run_dir=Path("/tmp"), user="",
        crl=Path(f"{CRL_DIR}/ca.crl"),
    )  # fmt: skip
    assert config["nginx.conf"].strip() == expected.strip()
    assert re.findall(r"(?m)^\s*ssl_crl\s+([^;]+);", config["nginx.conf"]) == [f"{CRL_DIR}/ca.crl"]
    assert "# no certificate revocation list" not in config["nginx.conf"]
    assert config["reload.sh"].strip() == RELOAD_SCRIPT.read_text().strip()
    proxy = _proxy(revocation_docs)
    conf = f"{PROXY_DIR}/nginx.conf"
    # The loop watches the CRL, the CA nginx trusts and the configuration.
    watched = [f"{CRL_DIR}/ca.crl", f"{SERVER_TLS_DIR}/ca.crt", conf]
    assert proxy["command"] == ["sh", f"{PROXY_DIR}/reload.sh", conf, *watched]
    assert {"name": "crl", "mountPath": CRL_DIR, "readOnly": True} in proxy["volumeMounts"]
    volumes = {v["name"]: v for v in _pod(revocation_docs)["volumes"]}
    # Not optional: without the Secret the pod waits rather than run without the revocations.
    assert volumes["crl"]["secret"] == {
        "secretName": "ai-inference-temporal-crl",
        "defaultMode": 0o444,
        "items": [{"key": "ca.crl", "path": "ca.crl"}],
    }
    # The Temporal server's container is untouched.
    (server,) = [c for c in _pod(revocation_docs)["containers"] if c["name"] == "temporal"]
    assert "crl" not in {m["name"] for m in server["volumeMounts"]}
    # The chart never writes the CRL's Secret.
    assert not [d for d in revocation_docs if d["kind"] == "Secret" and d["metadata"]["name"].endswith("-crl")]
    # Another Secret and key.
    other = helm.render(
        {
            **ENABLED,
            "aiInference.temporal.embedded.tls.revocationList.secretName": "my-crl",
            "aiInference.temporal.embedded.tls.revocationList.key": "temporal.crl.pem",
        },
        api_versions=CERT_MANAGER,
    )
    secret = {v["name"]: v for v in _pod(other)["volumes"]}["crl"]["secret"]
    assert (secret["secretName"], secret["items"]) == ("my-crl", [{"key": "temporal.crl.pem", "path": "ca.crl"}])


def test_cert_managers_ca_may_sign_crls_and_keeps_its_key(revocation_docs: list[Doc], helm: Helm) -> None:
    for docs in (revocation_docs, helm.render(api_versions=CERT_MANAGER)):
        ca = find(docs, "Certificate", "ai-inference-temporal-ca")["spec"]
        assert ca["isCA"] is True
        assert ca["usages"] == ["cert sign", "crl sign", "digital signature"]
        assert ca["privateKey"]["rotationPolicy"] == "Never"


def test_a_helm_mode_install_with_revocation_and_no_ca_of_its_own_is_refused(helm: Helm) -> None:
    result = helm("template", "ai-inference", str(CHART_DIR), "--namespace", NAMESPACE, "--kube-version", "1.34.0",
                  "--set", "aiInference.temporal.embedded.tls.revocationList.enabled=true", check=False)  # fmt: skip
    assert result.returncode != 0
    assert "revocationList needs a CA that may sign CRLs" in result.stderr
    assert "ai-inference-temporal-ca" in result.stderr


def test_the_schema_refuses_an_empty_secret_name_or_key(helm: Helm) -> None:
    for key, value in (("secretName", ""), ("key", ""), ("key", "a/b"), ("enable", True)):
        result = helm("template", "ai-inference", str(CHART_DIR), "--namespace", NAMESPACE, "--kube-version",
                      "1.34.0", "--set-json",
                      f"aiInference.temporal.embedded.tls.revocationList.{key}={json.dumps(value)}",
                      check=False)  # fmt: skip
        assert result.returncode != 0, (key, value)
        assert "revocationList" in result.stderr, result.stderr


# -- the admin guide's commands -------------------------------------------------------------------


def _guide_blocks() -> dict[str, str]:
    """The shell blocks of the guide's "Revoking a certificate": the Helm-mode CA, the CRL's start, a
    revocation."""
    text = GUIDE.read_text()
    section = text[text.index("**Revoking a certificate.**") : text.index("**An external Temporal.**")]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    named = {
        "ca": [b for b in blocks if "create secret tls ai-inference-temporal-ca" in b],
        "start": [b for b in blocks if "touch crl/index.txt" in b and "-gencrl" in b],
        "revoke": [b for b in blocks if "-revoke" in b],
    }
    assert len(blocks) == 3, blocks
    assert all(len(v) == 1 for v in named.values()), blocks
    return {k: v[0] for k, v in named.items()}


def _openssl(*args: str, cwd: Path | None = None) -> str:
    result = subprocess.run(["openssl", *args], capture_output=True, text=True, cwd=cwd)
    assert result.returncode == 0, f"openssl {' '.join(args)}: {result.stderr}"
    return result.stdout


def _verify(ca: Path, crl: Path, cert: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["openssl", "verify", "-crl_check", "-CAfile", str(ca), "-CRLfile", str(crl), str(cert)],
        capture_output=True,
        text=True,
    )


@dataclass
class Cluster:
    """The module's Secrets as the fake kubectl keeps them, and a directory where the guide's blocks run."""

    workdir: Path
    state: Path
    bin_dir: Path

    def secrets(self) -> dict[str, dict[str, Any]]:
        return fake_kubectl.read_secrets(self.state)

    def put(self, name: str, files: dict[str, bytes], kind: str = "kubernetes.io/tls") -> None:
        secrets = self.secrets()
        data = {k: base64.b64encode(v).decode() for k, v in files.items()}
        secrets[f"{NAMESPACE}/{name}"] = {"type": kind, "data": data}
        fake_kubectl.write_secrets(self.state, secrets)

    def get(self, name: str, key: str) -> bytes:
        return base64.b64decode(self.secrets()[f"{NAMESPACE}/{name}"]["data"][key])

    def run(self, block: str) -> str:
        env = {**os.environ, "PATH": f"{self.bin_dir}:{os.environ['PATH']}", "FAKE_KUBECTL_STATE": str(self.state)}
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=self.workdir, env=env,
                                capture_output=True, text=True, timeout=60)  # fmt: skip
        assert result.returncode == 0, f"the guide's block failed:\n{block}\n{result.stdout}{result.stderr}"
        return result.stdout + result.stderr


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(f'#!/bin/sh\nexec {sys.executable} {Path(fake_kubectl.__file__).resolve()} "$@"\n')
    kubectl.chmod(0o755)
    workdir = tmp_path / "admin"
    workdir.mkdir()
    return Cluster(workdir, tmp_path / "secrets.json", bin_dir)


def _cert_manager_like_ca(directory: Path) -> tuple[bytes, bytes]:
    """A CA as cert-manager issues the chart's now: ECDSA P-256, CN ai-inference-temporal-ca, key usage
    cert sign, crl sign, digital signature."""
    directory.mkdir(parents=True, exist_ok=True)
    key, crt = directory / "ca.key", directory / "ca.crt"
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key))
    _openssl("req", "-x509", "-new", "-key", str(key), "-sha256", "-days", "3650",
             "-subj", "/CN=ai-inference-temporal-ca", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature", "-out", str(crt))  # fmt: skip
    return crt.read_bytes(), key.read_bytes()


def _issue(ca: tuple[bytes, bytes], directory: Path, name: str, cn: str, *, server: bool = False) -> dict[str, bytes]:
    """A certificate of the CA as the chart's Secrets hold them (tls.crt, tls.key, ca.crt)."""
    ca_crt, ca_key = ca
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ca.crt").write_bytes(ca_crt)
    (directory / "ca.key").write_bytes(ca_key)
    key, csr, crt = (directory / f"{name}.{s}" for s in ("key", "csr", "crt"))
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-subj", f"/CN={cn}", "-keyout", str(key), "-out", str(csr))  # fmt: skip
    ext = directory / f"{name}.ext"
    usage = f"extendedKeyUsage=serverAuth\nsubjectAltName=DNS:{cn}\n" if server else "extendedKeyUsage=clientAuth\n"
    ext.write_text(usage)
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(directory / "ca.crt"), "-CAkey", str(directory / "ca.key"),
             "-CAcreateserial", "-days", "30", "-out", str(crt), "-extfile", str(ext))  # fmt: skip
    return {"tls.crt": crt.read_bytes(), "tls.key": key.read_bytes(), "ca.crt": ca_crt}


@dataclass
class Pki:
    """The module's Secrets in the fake cluster: the CA, the server's and the clients' certificates."""

    cluster: Cluster
    files: Path

    def ca(self) -> tuple[bytes, bytes]:
        secret = "ai-inference-temporal-ca"
        return self.cluster.get(secret, "tls.crt"), self.cluster.get(secret, "tls.key")

    def issue_all(self) -> None:
        server = _issue(self.ca(), self.files / "server", "server", SERVER_NAME, server=True)
        self.cluster.put("ai-inference-temporal-tls", server)
        for client in ("worker", "watcher", "cli"):
            issued = _issue(self.ca(), self.files / client, client, f"ai-inference-{client}")
            self.cluster.put(f"ai-inference-temporal-{client}-tls", issued)

    def write(self, secret: str, directory: Path) -> dict[str, Path]:
        directory.mkdir(parents=True, exist_ok=True)
        out = {}
        for key in ("tls.crt", "tls.key", "ca.crt"):
            path = directory / key
            path.write_bytes(self.cluster.get(secret, key))
            path.chmod(0o600)
            out[key] = path
        return out


def _pki(cluster: Cluster, mode: str) -> Pki:
    """The CA as the guide has it for ``mode`` (CertManager: the chart's; Helm: the administrator's, put
    in place by the guide's block), and certificates of it."""
    pki = Pki(cluster, cluster.workdir.parent / "issued")
    if mode == "Helm":
        # The block replaces the CA Secret Helm made; here one made by Helm's genCA stands for it.
        cluster.put("ai-inference-temporal-ca", {"tls.crt": b"helm's", "tls.key": b"helm's"})
        cluster.run(_guide_blocks()["ca"])
        assert cluster.secrets()[f"{NAMESPACE}/ai-inference-temporal-ca"]["type"] == "kubernetes.io/tls"
        key_file = cluster.workdir / "the-ca.key"
        key_file.write_bytes(cluster.get("ai-inference-temporal-ca", "tls.key"))
        _openssl("pkey", "-in", str(key_file), "-noout")
        ca_file = str(cluster.workdir / "temporal-ca.crt")
        usage = _openssl("x509", "-noout", "-ext", "keyUsage,basicConstraints", "-in", ca_file)
        assert "CRL Sign" in usage, usage
        assert "CA:TRUE" in usage, usage
    else:
        crt, key = _cert_manager_like_ca(cluster.workdir.parent / "cert-manager")
        cluster.put("ai-inference-temporal-ca", {"tls.crt": crt, "tls.key": key, "ca.crt": crt})
    pki.issue_all()
    return pki


@pytest.mark.parametrize("mode", ["CertManager", "Helm"])
def test_the_guides_commands_make_a_crl_of_the_ca_that_revokes_the_certificate_revoked(
    cluster: Cluster, mode: str
) -> None:
    pki = _pki(cluster, mode)
    ca = cluster.workdir / "the-ca.crt"
    ca.write_bytes(pki.ca()[0])
    certs = {c: pki.write(f"ai-inference-temporal-{c}-tls", cluster.workdir.parent / "check" / c)["tls.crt"]
             for c in ("worker", "cli")}  # fmt: skip

    cluster.run(_guide_blocks()["start"])
    crl = cluster.workdir / "crl-from-secret.pem"
    crl.write_bytes(cluster.get("ai-inference-temporal-crl", "ca.crl"))
    assert crl.read_text().startswith("-----BEGIN X509 CRL-----")
    text = _openssl("crl", "-in", str(crl), "-noout", "-text")
    assert "No Revoked Certificates" in text
    assert "CN = ai-inference-temporal-ca" in text
    # Signed by the CA, and ten years out.
    _openssl("crl", "-in", str(crl), "-noout", "-CAfile", str(ca))
    next_update = _openssl("crl", "-in", str(crl), "-noout", "-nextupdate").split("=", 1)[1].strip()
    assert int(next_update.split()[-2]) >= time.gmtime().tm_year + 9
    for cert in certs.values():
        verified = _verify(ca, crl, cert)
        assert verified.returncode == 0, verified.stdout + verified.stderr

    cluster.run(_guide_blocks()["revoke"])
    crl.write_bytes(cluster.get("ai-inference-temporal-crl", "ca.crl"))
    serial = _openssl("x509", "-in", str(certs["cli"]), "-noout", "-serial").split("=", 1)[1].strip()
    assert serial in _openssl("crl", "-in", str(crl), "-noout", "-text").replace(":", "").upper()
    refused = _verify(ca, crl, certs["cli"])
    assert refused.returncode != 0
    assert "certificate revoked" in refused.stdout + refused.stderr
    kept = _verify(ca, crl, certs["worker"])
    assert kept.returncode == 0, kept.stdout + kept.stderr

    # Revoking another certificate of the same subject later (its replacement) keeps the first.
    replacement = _issue(pki.ca(), cluster.workdir.parent / "cli-2", "cli-2", "ai-inference-cli")
    cluster.put("ai-inference-temporal-cli-tls", replacement)
    cluster.run(_guide_blocks()["revoke"])
    crl.write_bytes(cluster.get("ai-inference-temporal-crl", "ca.crl"))
    assert _openssl("crl", "-in", str(crl), "-noout", "-text").count("Serial Number:") == 2
    assert _verify(ca, crl, certs["cli"]).returncode != 0


def test_a_crl_of_the_charts_helm_made_ca_is_refused_by_openssl(helm: Helm, cluster: Cluster) -> None:
    """Why Helm mode needs the administrator's CA: Helm's genCA sets no cRLSign, and OpenSSL (nginx)
    refuses a CRL whose issuer may not sign CRLs — every client would be refused."""
    docs = helm.render()
    secret = find(docs, "Secret", "ai-inference-temporal-ca")
    cluster.put("ai-inference-temporal-ca", {k: base64.b64decode(v) for k, v in secret["data"].items()})
    ca = cluster.workdir / "helm-ca.crt"
    ca.write_bytes(cluster.get("ai-inference-temporal-ca", "tls.crt"))
    usage = _openssl("x509", "-in", str(ca), "-noout", "-ext", "keyUsage")
    assert "Certificate Sign" in usage, usage
    assert "CRL Sign" not in usage, usage
    worker = cluster.workdir / "worker.crt"
    worker.write_bytes(base64.b64decode(find(docs, "Secret", "ai-inference-temporal-worker-tls")["data"]["tls.crt"]))
    cluster.run(_guide_blocks()["start"])
    crl = cluster.workdir / "ca.crl"
    verified = _verify(ca, crl, worker)
    assert verified.returncode != 0
    assert "key usage does not include CRL signing" in verified.stdout + verified.stderr


# -- nginx ----------------------------------------------------------------------------------------


def _local_config(config: str, *, server_dir: Path, crl_dir: Path, run_dir: Path, listen: str, upstream: str) -> str:
    """The chart's rendered nginx.conf with the pod's paths and ports made this machine's."""
    config = config.replace(SERVER_TLS_DIR, str(server_dir)).replace(CRL_DIR, str(crl_dir))
    config = config.replace("127.0.0.1:7234", upstream)
    config = re.sub(r"listen 7233 ", f"listen {listen} ", config)
    config = re.sub(r"(?m)^(\s*(?:\w+_temp_path|pid) )/tmp", rf"\g<1>{run_dir}", config)
    if os.geteuid() == 0:
        # nginx's workers read the owner-only key (the pod runs nginx as its own user throughout).
        config = "user root;\n" + config
    return config


def _kubelet_write(directory: Path, files: dict[str, bytes]) -> None:
    """``files`` into ``directory`` as the kubelet updates a Secret volume: a new timestamped directory,
    the ``..data`` link swapped to it in one rename, each file a link through ``..data``."""
    directory.mkdir(parents=True, exist_ok=True)
    stamp = directory / f"..{time.time_ns()}"
    stamp.mkdir()
    for name, content in files.items():
        (stamp / name).write_bytes(content)
    tmp = directory / "..data_tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(stamp.name)
    tmp.rename(directory / "..data")
    for name in files:
        link = directory / name
        if not link.is_symlink():
            link.symlink_to(f"..data/{name}")


def _nginx_t(config: Path) -> subprocess.CompletedProcess[str]:
    argv = [str(nginx_binary()), "-t", "-c", str(config), "-e", "stderr"]
    return subprocess.run(argv, capture_output=True, text=True)


def test_nginx_accepts_the_rendered_configuration_with_the_guides_crl_and_not_an_empty_file(
    revocation_docs: list[Doc], cluster: Cluster, tmp_path: Path
) -> None:
    pki = _pki(cluster, "CertManager")
    cluster.run(_guide_blocks()["start"])
    server_dir, crl_dir, run_dir = tmp_path / "server-tls", tmp_path / "crl", tmp_path / "run"
    pki.write("ai-inference-temporal-tls", server_dir)
    run_dir.mkdir()
    _kubelet_write(crl_dir, {"ca.crl": cluster.get("ai-inference-temporal-crl", "ca.crl")})
    config = tmp_path / "nginx.conf"
    rendered = _proxy_config(revocation_docs)["nginx.conf"]
    local = _local_config(rendered, server_dir=server_dir, crl_dir=crl_dir, run_dir=run_dir,
                          listen="127.0.0.1:1", upstream="127.0.0.1:2")  # fmt: skip
    config.write_text(local)
    checked = _nginx_t(config)
    assert checked.returncode == 0, checked.stderr
    assert f"ssl_crl {crl_dir}/ca.crl;" in config.read_text()
    # nginx does not start on an empty file (hence: an empty CRL of the CA, never an empty Secret key).
    _kubelet_write(crl_dir, {"ca.crl": b""})
    assert _nginx_t(config).returncode != 0


@dataclass
class Terminator:
    """The chart's reload script running the chart's nginx.conf on this machine."""

    process: subprocess.Popen[bytes]
    address: str
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def running(
    revocation_docs: list[Doc], cluster: Cluster, temporal_server: LocalTemporal, tmp_path: Path
) -> Iterator[tuple[Terminator, Pki, Path]]:
    pki = _pki(cluster, "CertManager")
    cluster.run(_guide_blocks()["start"])
    server_dir, crl_dir, proxy_dir, run_dir = (tmp_path / d for d in ("server-tls", "crl", "proxy", "run"))
    pki.write("ai-inference-temporal-tls", server_dir)
    run_dir.mkdir()
    _kubelet_write(crl_dir, {"ca.crl": cluster.get("ai-inference-temporal-crl", "ca.crl")})
    address = f"127.0.0.1:{_free_port()}"
    rendered = _proxy_config(revocation_docs)
    config = _local_config(rendered["nginx.conf"], server_dir=server_dir, crl_dir=crl_dir, run_dir=run_dir,
                           listen=address, upstream=temporal_server.upstream)  # fmt: skip
    _kubelet_write(proxy_dir, {"nginx.conf": config.encode(), "reload.sh": rendered["reload.sh"].encode()})
    # The container's command, with this machine's directories.
    command = [
        c.replace(PROXY_DIR, str(proxy_dir)).replace(CRL_DIR, str(crl_dir)).replace(SERVER_TLS_DIR, str(server_dir))
        for c in _proxy(revocation_docs)["command"]
    ]
    assert command[0] == "sh"
    env = {**os.environ, "PATH": f"{nginx_binary().parent}:{os.environ['PATH']}", "TLS_PROXY_RELOAD_INTERVAL": "1"}
    log = tmp_path / "tls-proxy.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    terminator = Terminator(process, address, log)
    try:
        deadline = time.monotonic() + 30
        while not _listening(address):
            assert process.poll() is None, f"the terminator exited: {terminator.log_text()}"
            assert time.monotonic() < deadline, f"the terminator does not listen: {terminator.log_text()}"
            time.sleep(0.1)
        yield terminator, pki, crl_dir
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _listening(address: str) -> bool:
    import socket

    host, port = address.rsplit(":", 1)
    with socket.socket() as sock:
        return sock.connect_ex((host, int(port))) == 0


def _tls(pki: Pki, client: str, directory: Path) -> TLSConfig:
    files = pki.write(f"ai-inference-temporal-{client}-tls", directory / client)
    return TLSConfig(
        server_root_ca_cert=files["ca.crt"].read_bytes(),
        client_cert=files["tls.crt"].read_bytes(),
        client_private_key=files["tls.key"].read_bytes(),
        domain=SERVER_NAME,
    )


async def _describe(address: str, tls: TLSConfig) -> None:
    client = await asyncio.wait_for(Client.connect(address, tls=tls), 30)
    await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace=client.namespace))


async def _refused(address: str, tls: TLSConfig) -> str:
    try:
        await _describe(address, tls)
    except RuntimeError as err:
        return str(err)
    return ""


async def test_the_chart_terminator_refuses_a_certificate_revoked_with_the_guides_commands_without_a_restart(
    running: tuple[Terminator, Pki, Path], cluster: Cluster, tmp_path: Path
) -> None:
    terminator, pki, crl_dir = running
    cli, worker = _tls(pki, "cli", tmp_path / "clients"), _tls(pki, "worker", tmp_path / "clients")
    nginx_pid = int((tmp_path / "run" / "nginx.pid").read_text())
    # Before: both get through (the empty CRL of the CA checks out for every certificate of the chain).
    await _describe(terminator.address, cli)
    await _describe(terminator.address, worker)

    # The guide's revocation; the Secret's new file reaches the pod as the kubelet writes it.
    cluster.run(_guide_blocks()["revoke"])
    _kubelet_write(crl_dir, {"ca.crl": cluster.get("ai-inference-temporal-crl", "ca.crl")})
    deadline = time.monotonic() + 30
    while not (why := await _refused(terminator.address, cli)):
        assert time.monotonic() < deadline, f"still let through after 30 s: {terminator.log_text()}"
        await asyncio.sleep(0.5)
    assert REVOKED in why, why
    assert "reloading nginx" in terminator.log_text()
    # The others keep working, and nginx was reloaded, not restarted (same master).
    await _describe(terminator.address, worker)
    assert int((tmp_path / "run" / "nginx.pid").read_text()) == nginx_pid
    assert terminator.process.poll() is None

    # A CRL nginx cannot load: logged, not loaded, the previous one stays in force.
    _kubelet_write(crl_dir, {"ca.crl": b"not a CRL\n"})
    deadline = time.monotonic() + 30
    while "nginx refuses it" not in terminator.log_text():
        assert time.monotonic() < deadline, terminator.log_text()
        await asyncio.sleep(0.2)
    assert REVOKED in await _refused(terminator.address, cli)
    await _describe(terminator.address, worker)
    assert terminator.process.poll() is None

    # SIGTERM (the kubelet's, to the container's first process) reaches nginx; the script exits with it.
    terminator.process.send_signal(signal.SIGTERM)
    terminator.process.wait(timeout=15)
    deadline = time.monotonic() + 10
    while _alive(nginx_pid):
        assert time.monotonic() < deadline, "nginx outlived the container's process"
        await asyncio.sleep(0.1)
    assert not _listening(terminator.address)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not reaped by its parent yet) is gone for this purpose.
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    except FileNotFoundError:
        return False


def test_the_script_exits_when_nginx_does(revocation_docs: list[Doc], tmp_path: Path) -> None:
    """nginx gone, whatever the cause: the container's process ends with it (and is restarted)."""
    config = tmp_path / "nginx.conf"
    config.write_text("this is not an nginx configuration\n")
    env = {**os.environ, "PATH": f"{nginx_binary().parent}:{os.environ['PATH']}", "TLS_PROXY_RELOAD_INTERVAL": "1"}
    started = time.monotonic()
    result = subprocess.run(["sh", str(RELOAD_SCRIPT), str(config), str(config)], capture_output=True, text=True,
                            env=env, timeout=30)  # fmt: skip
    assert result.returncode != 0
    assert time.monotonic() - started < 10
