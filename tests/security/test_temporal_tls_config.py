"""The terminator's configuration and credentials, without a server: the chart's file
(files/temporal-tls-proxy.conf) as the local stack fills it in, the limits Temporal's traffic needs,
the credentials made once, and a clear refusal when nginx is missing."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from devstack import temporal_tls
from devstack.temporal_tls import PROXY_CONFIG, TemporalCredentials, TLSTerminator, render_config

# The Temporal SDK's long polls carry a 70 s deadline; the server holds them about a minute.
POLL_DEADLINE_SECONDS = 70
# Temporal's own payload limit (limit.blobSize.error) is 2 MiB; a gRPC message up to 4 MiB.
LARGEST_MESSAGE_BYTES = 4 * 1024 * 1024

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
SIZES = {"k": 1024, "m": 1024**2, "g": 1024**3}


def _directive(config: str, name: str) -> str:
    values = re.findall(rf"(?m)^[ \t]*{name}[ \t]+([^;{{\n]+);", config)
    assert len(values) == 1, f"{name}: {values}"
    return values[0].strip()


def _seconds(value: str) -> int:
    return sum(int(n) * UNITS[u] for n, u in re.findall(r"(\d+)([smhd])", value))


def _config(tmp_path: Path, user: str | None = None) -> str:
    return render_config(
        listen="127.0.0.1:7233",
        upstream="127.0.0.1:7234",
        cert=tmp_path / "server.crt",
        key=tmp_path / "server.key",
        ca=tmp_path / "ca.crt",
        run_dir=tmp_path,
        user=user,
    )


def _config_with_crl(tmp_path: Path) -> str:
    return render_config(
        listen="127.0.0.1:7233", upstream="127.0.0.1:7234", cert=tmp_path / "server.crt", key=tmp_path / "server.key",
        ca=tmp_path / "ca.crt", run_dir=tmp_path, user="", crl=tmp_path / "ca.crl",
    )  # fmt: skip


def test_every_placeholder_is_filled_and_nothing_else_changes(tmp_path: Path) -> None:
    config = _config(tmp_path, user="")
    assert not re.search(r"@[A-Z_]+@", config)
    assert _directive(config, "listen") == "127.0.0.1:7233 ssl http2"
    assert _directive(config, "server") == "127.0.0.1:7234"
    assert f"default {tmp_path}/server.crt;" in config
    assert _directive(config, "ssl_client_certificate") == f"{tmp_path}/ca.crt"
    assert _directive(config, "pid") == f"{tmp_path}/nginx.pid"
    # Root: nginx's workers read the owner-only key, so they run as root too; otherwise no directive.
    assert _config(tmp_path, user="user root;").startswith(PROXY_CONFIG.read_text().split("@USER@")[0] + "user root;")
    assert "\nuser " not in config


def test_a_client_certificate_is_required_before_anything_is_forwarded(tmp_path: Path) -> None:
    config = _config(tmp_path, user="")
    assert _directive(config, "ssl_verify_client") == "optional_no_ca"
    location = config[config.index("location / {") :]
    # The check comes before grpc_pass, in the only location that forwards.
    assert location.index("if ($ssl_client_verify != SUCCESS)") < location.index("grpc_pass")
    assert config.count("grpc_pass") == 1
    statuses = re.findall(r"(?m)^[ \t]*add_header grpc-status[ \t]+([^;]+);", config)
    # UNAUTHENTICATED (no certificate of the CA, or a revoked one), PERMISSION_DENIED (a method the
    # certificate's identity may not call).
    assert statuses == ["16 always", "7 always", "16 always"]
    # The method check too comes before grpc_pass, after the certificate's.
    assert location.index("if ($ssl_client_verify != SUCCESS)") < location.index("if ($temporal_allowed = 0)")
    assert location.index("if ($temporal_allowed = 0)") < location.index("grpc_pass")
    assert "map $ssl_client_s_dn $temporal_identity" in config
    assert _config_with_crl(tmp_path).count(f"ssl_crl {tmp_path}/ca.crl;") == 1
    assert _directive(config, "ssl_protocols") == "TLSv1.2 TLSv1.3"


def test_the_limits_let_temporal_traffic_through(tmp_path: Path) -> None:
    """nginx's defaults would cut a long poll at 60 s, refuse bodies over 1 MiB and close an HTTP/2
    connection after 1,000 calls (the SDK multiplexes every call over one)."""
    config = _config(tmp_path, user="")
    for name in ("grpc_read_timeout", "grpc_send_timeout", "client_body_timeout"):
        assert _seconds(_directive(config, name)) >= 2 * POLL_DEADLINE_SECONDS, name
    size = _directive(config, "client_max_body_size")
    assert int(size[:-1]) * SIZES[size[-1].lower()] >= 8 * LARGEST_MESSAGE_BYTES
    assert int(_directive(config, "keepalive_requests")) >= 10_000_000
    assert int(_directive(config, "http2_max_concurrent_streams")) >= 1000


def test_credentials_are_made_once_and_kept(tmp_path: Path) -> None:
    first = TemporalCredentials.ensure(tmp_path)
    made = {p: p.read_bytes() for c in (first.server, *first.clients.values()) for p in (c.cert, c.key)}
    again = TemporalCredentials.ensure(tmp_path)
    assert again == first
    assert {p: p.read_bytes() for p in made} == made
    assert set(first.clients) == {"worker", "watcher", "cli", "admin"}
    assert first.crl.read_text().startswith("-----BEGIN X509 CRL-----")
    for client in first.clients:
        env = first.module_env(client)
        assert env["AI_INFERENCE_TEMPORAL__TLS__ENABLED"] == "true"
        assert Path(env["AI_INFERENCE_TEMPORAL__TLS__CLIENTKEYFILE"]) == first.client(client).key
        assert (Path(env["AI_INFERENCE_TEMPORAL__TLS__CLIENTCERTFILE"]).stat().st_mode & 0o077) == 0
    cli = first.cli_env()
    assert set(cli) == {
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH",
        "TEMPORAL_TLS_CLIENT_CERT_PATH",
        "TEMPORAL_TLS_CLIENT_KEY_PATH",
        "TEMPORAL_TLS_SERVER_NAME",
    }
    # A missing file: everything is made again, from a new CA.
    first.clients["watcher"].key.unlink()
    remade = TemporalCredentials.ensure(tmp_path)
    assert remade.ca.cert.read_bytes() != made.get(first.ca.cert, b"")


def test_a_missing_nginx_is_a_clear_refusal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    terminator = TLSTerminator(tmp_path, TemporalCredentials.ensure(tmp_path / "pki"), "127.0.0.1:1")
    monkeypatch.setattr(temporal_tls.shutil, "which", lambda *_a, **_k: None)
    with pytest.raises(temporal_tls.NginxMissingError, match="apt-get install nginx-light"):
        terminator.start()


def test_nginx_accepts_the_configuration(tmp_path: Path) -> None:
    """``nginx -t`` with the modules the configuration needs (ssl, http2, grpc) and real files."""
    assert shutil.which("nginx") or Path("/usr/sbin/nginx").exists(), temporal_tls.INSTALL_HINT
    terminator = TLSTerminator(tmp_path / "nginx", TemporalCredentials.ensure(tmp_path / "pki"), "127.0.0.1:1")
    terminator.write_config()
    terminator.check()
