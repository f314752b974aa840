"""The temporal settings block: TLS files and the API key, as ``connect`` hands them to the SDK."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from structlog.testing import capture_logs

from inference_api.settings import ModuleSettings
from worker.temporal_client import TemporalCredentialsError, api_key, tls_config


def test_tls_off_by_default_and_the_old_flag_is_refused() -> None:
    assert tls_config(ModuleSettings().temporal) is False
    with pytest.raises(ValidationError, match=r"temporal\.tls block"):
        ModuleSettings(temporal={"tlsEnabled": True})


@pytest.mark.parametrize(
    ("temporal", "message"),
    [
        ({"tls": {"enabled": True, "clientCertFile": "/c.pem"}}, "go together"),
        ({"tls": {"serverCAFile": "/ca.pem"}}, "plain text"),
        ({"apiKeyFile": "/key"}, r"needs temporal\.tls\.enabled"),
    ],
)
def test_inconsistent_blocks_are_refused(temporal: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ModuleSettings(temporal=temporal)


def test_files_are_read_into_the_sdk_config_and_never_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = {"ca.crt": "CA", "tls.crt": "CERT", "tls.key": "KEY-SECRET", "api-key": "cloud-key-SECRET\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    # The chart's way: environment variables.
    for key, value in {
        "TLS__ENABLED": "true",
        "TLS__SERVERCAFILE": str(tmp_path / "ca.crt"),
        "TLS__CLIENTCERTFILE": str(tmp_path / "tls.crt"),
        "TLS__CLIENTKEYFILE": str(tmp_path / "tls.key"),
        "TLS__SERVERNAME": "temporal.example.com",
        "APIKEYFILE": str(tmp_path / "api-key"),
    }.items():
        monkeypatch.setenv(f"AI_INFERENCE_TEMPORAL__{key}", value)
    temporal = ModuleSettings().temporal
    config = tls_config(temporal)
    assert config is not False
    assert config is not True
    assert (config.server_root_ca_cert, config.client_cert, config.client_private_key, config.domain) == (
        b"CA",
        b"CERT",
        b"KEY-SECRET",
        "temporal.example.com",
    )
    assert api_key(temporal) == "cloud-key-SECRET"

    (tmp_path / "tls.key").unlink()
    with capture_logs() as logs, pytest.raises(TemporalCredentialsError, match=r"clientKeyFile .*tls\.key") as caught:
        tls_config(temporal)
    assert "SECRET" not in str(caught.value) + repr(logs)
