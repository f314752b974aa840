"""Certificates, service-account keys and bearer tokens of one local cluster.

Made with the ``openssl`` CLI (present on every dev box and CI image) so the project needs no
extra Python dependency for it. Everything is fresh per cluster and lives in the state dir with
owner-only permissions; tokens are never logged.

:func:`create_ca` and :func:`issue_certificate` make other TLS material the same way: the local
stack's planner serving certificate, and the CAs and client certificates of the TLS tests.
"""

from __future__ import annotations

import csv
import io
import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# Service IP of `kubernetes.default` for --service-cluster-ip-range=10.96.0.0/16: pods (and
# in-cluster clients of the module) reach the apiserver by it, so the serving cert names it.
SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"


@dataclass(frozen=True)
class User:
    """A bearer-token identity of the token-auth file."""

    name: str  # the key callers use: LocalCluster.api_client(name)
    username: str
    groups: tuple[str, ...]


# The three people of the brief, then the components' identities. The component user names are
# the ones the bootstrap RBAC policy binds (system:kube-controller-manager, system:kube-scheduler),
# so they get exactly their upstream permissions and nothing more.
USERS: tuple[User, ...] = (
    User("admin", "ai-inference:cluster-admin", ("system:masters",)),
    User("module-admin", "module-admin", ("ai-inference:admins",)),
    User("ns-user", "ns-user", ("ai-inference:users",)),
    User("kube-controller-manager", "system:kube-controller-manager", ()),
    User("kube-scheduler", "system:kube-scheduler", ()),
    # kwok writes node/pod status, leases and deletes pods: it stands in for every kubelet.
    User("kwok", "system:kwok-controller", ("system:masters",)),
)
HUMAN_USERS = ("admin", "module-admin", "ns-user")


@dataclass(frozen=True)
class PKI:
    dir: Path

    @property
    def ca_cert(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def serving_cert(self) -> Path:
        return self.dir / "apiserver.crt"

    @property
    def serving_key(self) -> Path:
        return self.dir / "apiserver.key"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"

    @property
    def token_file(self) -> Path:
        return self.dir / "tokens.csv"

    def tokens(self) -> dict[str, str]:
        """User key -> bearer token, read back from the token-auth file."""
        by_username = {u.username: u.name for u in USERS}
        out: dict[str, str] = {}
        with self.token_file.open() as f:
            for row in csv.reader(f):
                if len(row) >= 2 and row[1] in by_username:
                    out[by_username[row[1]]] = row[0]
        return out


def _openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {result.stderr.strip()}")


def _ec_key_args() -> list[str]:
    return ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


@dataclass(frozen=True)
class CertificateAuthority:
    cert: Path
    key: Path


@dataclass(frozen=True)
class IssuedCertificate:
    """A leaf certificate, its key and the CA that signed it (all PEM files)."""

    cert: Path
    key: Path
    ca: Path


def _owner_only(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)


def create_ca(directory: Path, name: str) -> CertificateAuthority:
    """A self-signed CA ``{name}.crt``/``{name}.key`` (EC P-256, ten years) in ``directory``."""
    if shutil.which("openssl") is None:
        raise RuntimeError("`openssl` is not on PATH; it makes the local TLS material")
    _owner_only(directory)
    _openssl("req", "-x509", *_ec_key_args(), "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "3650",
             "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)  # fmt: skip
    ca = CertificateAuthority(directory / f"{name}.crt", directory / f"{name}.key")
    for path in (ca.cert, ca.key):
        os.chmod(path, 0o600)
    return ca


def issue_certificate(
    ca: CertificateAuthority,
    directory: Path,
    name: str,
    *,
    sans: tuple[str, ...] = (),
    usage: str = "serverAuth",
    days: int = 825,
    common_name: str | None = None,
) -> IssuedCertificate:
    """``{name}.crt``/``{name}.key`` signed by ``ca``: ``usage`` serverAuth (``sans`` like
    ``DNS:localhost``, ``IP:127.0.0.1``) or clientAuth (the CN is ``common_name``, by default ``name``)."""
    _owner_only(directory)
    subject = f"/CN={common_name or name}"
    request = ["req", "-new", *_ec_key_args(), "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject]
    if sans:
        request += ["-addext", f"subjectAltName={','.join(sans)}"]
    request += ["-addext", f"extendedKeyUsage={usage}"]
    _openssl(*request, cwd=directory)
    # Leaf extensions strict verifiers (rustls/webpki, OpenSSL's X509_STRICT) expect.
    extensions = directory / f"{name}.ext"
    extensions.write_text(
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n"
    )
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", str(ca.cert), "-CAkey", str(ca.key), "-CAcreateserial",
             "-days", str(days), "-copy_extensions", "copy", "-extfile", extensions.name,
             "-out", f"{name}.crt", cwd=directory)  # fmt: skip
    issued = IssuedCertificate(directory / f"{name}.crt", directory / f"{name}.key", ca.cert)
    for path in (issued.cert, issued.key):
        os.chmod(path, 0o600)
    return issued


def _crl_config(ca: CertificateAuthority) -> Path:
    """The ``openssl ca`` configuration of ``ca``'s revocation list: its index of revoked certificates
    and CRL number beside the CA (made empty the first time)."""
    base = ca.cert.with_suffix("")
    index, number, config = (base.with_suffix(s) for s in (".index", ".crlnumber", ".crl.cnf"))
    if not index.exists():
        index.touch(mode=0o600)
    if not number.exists():
        number.write_text("01\n")
        os.chmod(number, 0o600)
    config.write_text(
        "[ca]\ndefault_ca = ca_default\n[ca_default]\n"
        f"database = {index}\ncrlnumber = {number}\ncertificate = {ca.cert}\nprivate_key = {ca.key}\n"
        "default_md = sha256\ndefault_crl_days = 3650\nunique_subject = no\n"
    )
    os.chmod(config, 0o600)
    return config


def crl_path(ca: CertificateAuthority) -> Path:
    """Where ``ca``'s certificate revocation list (PEM) is: ``{name}.crl`` beside it."""
    return ca.cert.with_suffix(".crl")


def write_crl(ca: CertificateAuthority) -> Path:
    """``ca``'s revocation list, signed by it, naming every certificate :func:`revoke_certificate`
    revoked (none at first): what a TLS terminator's ``ssl_crl`` reads."""
    config = _crl_config(ca)
    out = crl_path(ca)
    _openssl("ca", "-gencrl", "-config", str(config), "-out", str(out), cwd=ca.cert.parent)
    os.chmod(out, 0o644)
    return out


def revoke_certificate(ca: CertificateAuthority, cert: Path) -> Path:
    """Add ``cert`` (signed by ``ca``) to ``ca``'s revocation list and write the list again; the
    terminator refuses it once it reloads the list."""
    _openssl("ca", "-config", str(_crl_config(ca)), "-revoke", str(cert), cwd=ca.cert.parent)
    return write_crl(ca)


def create_pki(directory: Path) -> PKI:
    """CA, apiserver serving cert, service-account key pair and the token-auth file."""
    if shutil.which("openssl") is None:
        raise RuntimeError("`openssl` is not on PATH; it makes the local cluster's certificates")
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    pki = PKI(directory)
    _openssl("req", "-x509", *_ec_key_args(), "-keyout", "ca.key", "-out", "ca.crt", "-days", "3650",
             "-subj", "/CN=ai-inference-local-ca", cwd=directory)  # fmt: skip
    sans = ",".join(
        [
            "DNS:localhost",
            "DNS:kubernetes",
            "DNS:kubernetes.default",
            "DNS:kubernetes.default.svc",
            "DNS:kubernetes.default.svc.cluster.local",
            "IP:127.0.0.1",
            f"IP:{KUBERNETES_SERVICE_IP}",
        ]
    )
    _openssl("req", "-new", *_ec_key_args(), "-keyout", "apiserver.key", "-out", "apiserver.csr",
             "-subj", "/CN=kube-apiserver", "-addext", f"subjectAltName={sans}",
             "-addext", "extendedKeyUsage=serverAuth", cwd=directory)  # fmt: skip
    _openssl("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "3650", "-copy_extensions", "copy", "-out", "apiserver.crt", cwd=directory)  # fmt: skip
    # RSA: the algorithm every ServiceAccount token consumer (and JWT library) accepts.
    _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "sa.key", cwd=directory)
    _openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for i, user in enumerate(USERS):
        # token,user,uid,"group1,group2" -- the format of --token-auth-file.
        row = [secrets.token_urlsafe(32), user.username, f"uid-{i}-{user.name}"]
        if user.groups:  # an empty 4th column would add the group "" to the user
            row.append(",".join(user.groups))
        writer.writerow(row)
    pki.token_file.write_text(buf.getvalue())
    for path in directory.iterdir():
        os.chmod(path, 0o600)
    return pki
