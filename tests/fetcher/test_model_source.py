"""An air-gapped cluster's way to the hub (workload.modelSource.huggingFace): a mirror endpoint, a CA
bundle, a proxy, each given to the model-fetcher container the builder writes and run with the real
Hugging Face CLI against the hub stand-in (as ``test_fetcher_against_hub``).

The mirror is the stand-in under a path (``/mirror/hf``) on its own port; the CA is made here with
``openssl`` and the stand-in serves over TLS with a certificate it signed; the proxy is a CONNECT
proxy in this module that records what it relayed. The CA bundle reaches the container as the pod
would give it: the downward API file of the pod annotation, written where the volume is mounted.
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from activities.builders import ModelArtifact
from activities.builders.statefulset import (
    ANNOTATION_MODEL_SOURCE_CA,
    MODEL_SOURCE_CA_DIR,
    MODEL_SOURCE_CA_VOLUME,
    build_statefulset,
)
from devstack import tiny_model
from devstack.cluster.paths import cache_root
from devstack.standins.hub import Hub, HubServer
from devstack.standins.model_fetcher import FetcherRun, run_fetcher
from inference_api.settings import ModuleSettings
from tests import factories as f
from tests.fetcher.test_fetcher_against_hub import assert_intact

TINY = tiny_model.REPOSITORY
# Where no hub listens: the container's own HF_ENDPOINT must be the one used.
NOWHERE = "http://127.0.0.1:9"


@dataclass(frozen=True)
class Pki:
    ca_pem: str
    server: ssl.SSLContext


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA of the test's own, and the stand-in's certificate for 127.0.0.1 signed by it."""
    d = tmp_path_factory.mktemp("pki")
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ca.key", cwd=d)
    _openssl(
        "req", "-x509", "-new", "-key", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=air-gapped test CA",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=d,
    )  # fmt: skip
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "hub.key", cwd=d)
    _openssl("req", "-new", "-key", "hub.key", "-out", "hub.csr", "-subj", "/CN=127.0.0.1", cwd=d)
    (d / "ext").write_text(
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n"
        "keyUsage=critical,digitalSignature\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n"
    )
    _openssl(
        "x509", "-req", "-in", "hub.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "hub.crt", "-days", "2", "-extfile", "ext",
        cwd=d,
    )  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(d / "hub.crt", d / "hub.key")
    return Pki(ca_pem=(d / "ca.crt").read_text(), server=context)


def _hub() -> Hub:
    hub = Hub()
    hub.create_from_folder(TINY, tiny_model.install_model(cache_root() / "models" / TINY))
    return hub


@contextlib.contextmanager
def serving(**kwargs: Any) -> Iterator[HubServer]:
    with HubServer(_hub(), **kwargs) as running:
        yield running


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _ProxyListener

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_CONNECT(self) -> None:
        host, _, port = self.path.rpartition(":")
        with self.server.lock:
            self.server.relayed.append(self.path)
        try:
            upstream = socket.create_connection((host, int(port)), timeout=10)
        except OSError:
            self.send_error(502)
            return
        self.send_response(200, "Connection established")
        self.end_headers()
        self.close_connection = True
        with upstream:
            ends = [self.connection, upstream]
            while True:
                ready, _, _ = select.select(ends, [], [], 60)
                if not ready:
                    return
                for end in ready:
                    data = end.recv(65536)
                    if not data:
                        return
                    (upstream if end is self.connection else self.connection).sendall(data)


class _ProxyListener(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        self.relayed: list[str] = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _ProxyHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that goes away mid-tunnel is no error here."""


@pytest.fixture
def proxy() -> Iterator[_ProxyListener]:
    listener = _ProxyListener()
    thread = threading.Thread(target=listener.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield listener
    finally:
        listener.shutdown()
        listener.server_close()
        thread.join(5)


def _url(listener: _ProxyListener) -> str:
    host, port = listener.server_address[:2]
    return f"http://{host!s}:{port}"


def fetch(settings: ModuleSettings, tmp_path: Path) -> FetcherRun:
    """The fetcher of an order of the tiny model under ``settings``, run as its pod would run it."""
    artifact = ModelArtifact(repository=TINY, served_name=TINY)
    sts = build_statefulset(f.inputs(the_order=f.order(model=TINY), settings=settings, artifact=artifact))
    template = sts["spec"]["template"]
    container = f.fetcher_container(sts)
    # The downward API volume: the pod annotation as a file where the volume is mounted.
    ca_dir = tmp_path / "model-source-ca"
    for volume in template["spec"]["volumes"]:
        if volume["name"] == MODEL_SOURCE_CA_VOLUME:
            (item,) = volume["downwardAPI"]["items"]
            assert item["fieldRef"]["fieldPath"] == f"metadata.annotations['{ANNOTATION_MODEL_SOURCE_CA}']"
            ca_dir.mkdir(parents=True)
            (ca_dir / item["path"]).write_text(template["metadata"]["annotations"][ANNOTATION_MODEL_SOURCE_CA])
    for item in container["env"]:
        if str(item.get("value", "")).startswith(MODEL_SOURCE_CA_DIR + "/"):
            item["value"] = str(ca_dir) + item["value"][len(MODEL_SOURCE_CA_DIR) :]
    volume = tmp_path / "models"
    return run_fetcher(container, volume, tmp_path / "home", NOWHERE)


def source(**huggingface: Any) -> ModuleSettings:
    return ModuleSettings(workload={"modelSource": {"huggingFace": huggingface}})


def test_the_fetcher_downloads_from_the_mirror_the_module_names(tmp_path: Path) -> None:
    with serving(prefix="/mirror/hf") as mirror:
        run = fetch(source(endpoint=mirror.url), tmp_path)
        assert run.exit_code == 0, run.log
        assert_intact(mirror, tmp_path / "models", TINY)
        asked = [s.path for s in mirror.hub.served if s.listener == "hub"]
        assert asked
        assert all(path.startswith("/mirror/hf/") for path in asked), asked


def test_a_hub_signed_by_a_private_ca_is_refused_by_name_without_the_bundle_and_trusted_with_it(
    pki: Pki, tmp_path: Path
) -> None:
    with serving(tls=pki.server) as hub:
        assert hub.url.startswith("https://")
        refused = fetch(source(endpoint=hub.url), tmp_path / "without")
        assert refused.exit_code == 1, refused.log
        last = refused.termination_message.strip().splitlines()[-1]
        assert last.startswith(f"model-fetcher error: {TINY}@main: the hub at {hub.url} cannot be reached"), last
        assert "CERTIFICATE_VERIFY_FAILED" in last, last

        run = fetch(source(endpoint=hub.url, caBundle=pki.ca_pem), tmp_path / "with")
        assert run.exit_code == 0, run.log
        assert_intact(hub, tmp_path / "with" / "models", TINY)


def test_the_fetcher_goes_through_the_proxy_and_around_it_for_no_proxy_hosts(
    pki: Pki, proxy: _ProxyListener, tmp_path: Path
) -> None:
    with serving(tls=pki.server) as hub:
        run = fetch(source(endpoint=hub.url, httpsProxy=_url(proxy), caBundle=pki.ca_pem), tmp_path / "proxied")
        assert run.exit_code == 0, run.log
        assert_intact(hub, tmp_path / "proxied" / "models", TINY)
        # Every request of the fetcher (its program and the CLI's) through tunnels the proxy relayed.
        assert f"127.0.0.1:{hub.port}" in proxy.relayed
        assert set(proxy.relayed) <= {f"127.0.0.1:{hub.port}", f"127.0.0.1:{hub.cdn_port}"}, proxy.relayed

        proxy.relayed.clear()
        direct = source(endpoint=hub.url, httpsProxy=_url(proxy), noProxy=["127.0.0.1"], caBundle=pki.ca_pem)
        run = fetch(direct, tmp_path / "direct")
        assert run.exit_code == 0, run.log
        assert proxy.relayed == []
