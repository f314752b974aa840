"""``ai-inference dev env`` gives the Temporal CLI and ``ai-inference`` what they need to reach the
local stack's Temporal over mutual TLS, and nothing less works.

The stack's credentials (``DevStack.temporal_credentials``, as ``dev up`` makes them) and a terminator
on the stack's ``temporal`` port in front of the test session's dev server; then the variables
``dev env`` prints, exported as a shell would: the real ``temporal`` CLI lists workflows, the
module's settings connect, and the CLI without the certificate variables is refused.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from devstack.cli import dev_app
from devstack.stack import DevStack
from devstack.temporal_dev import temporal_binary
from devstack.temporal_tls import LocalTemporal, TLSTerminator
from inference_api.settings import ModuleSettings
from worker.temporal_client import connect


@pytest.fixture
def stack_env(
    temporal_server: LocalTemporal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, str]]:
    monkeypatch.setenv("AI_INFERENCE_STATE", str(tmp_path / "state"))
    stack = DevStack(tmp_path / "state" / "dev")
    stack.state.mkdir(parents=True)
    upstream_port = int(temporal_server.upstream.rsplit(":", 1)[1])
    terminator = TLSTerminator(tmp_path / "nginx", stack.temporal_credentials(), temporal_server.upstream)
    stack.ports_file.write_text(json.dumps({"temporal": terminator.port, "temporal-upstream": upstream_port}))
    terminator.start()
    try:
        printed = CliRunner().invoke(dev_app, ["env"])
        assert printed.exit_code == 0, printed.output
        exported = {}
        for line in printed.stdout.splitlines():
            assert line.startswith("export "), line
            key, _, value = line.removeprefix("export ").partition("=")
            (exported[key],) = shlex.split(value)
        yield exported
    finally:
        terminator.stop()


def _temporal(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    argv = [str(temporal_binary()), "workflow", "list", "--limit", "1"]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def test_the_temporal_cli_works_with_dev_env_and_not_without_its_certificate(stack_env: dict[str, str]) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "AI_INFERENCE_"))}
    assert stack_env["TEMPORAL_TLS_SERVER_NAME"] == "localhost"
    for key in ("TEMPORAL_TLS_SERVER_CA_CERT_PATH", "TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CLIENT_KEY_PATH"):
        assert Path(stack_env[key]).is_file(), key
    listed = _temporal({**base, **stack_env})
    assert listed.returncode == 0, listed.stderr
    without = {k: v for k, v in stack_env.items() if not k.startswith(("TEMPORAL_TLS_CLIENT_",))}
    refused = _temporal({**base, **without})
    assert refused.returncode != 0
    # The terminator's UNAUTHENTICATED, as the CLI words it.
    assert "unauthenticated" in refused.stderr


async def test_ai_inference_connects_with_dev_env(stack_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("AI_INFERENCE_"):
            monkeypatch.delenv(key)
    for key, value in stack_env.items():
        if key.startswith("AI_INFERENCE_"):
            monkeypatch.setenv(key, value)
    client = await asyncio.wait_for(connect(ModuleSettings()), 30)
    assert (await client.count_workflows()).count >= 0
