"""The installed ``ai-inference`` script and its kubectl plugin: version, exit codes, ``-o json``.

Run as a person runs them (the scripts pip installed next to python); an unreachable API server is a
kubeconfig naming a port nothing listens on."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from worker.cli import ExitCode, Output, app

SCRIPTS = Path(sys.executable).parent
MODEL = "Qwen/Qwen2.5-32B-Instruct-AWQ"


def run(script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AI_INFERENCE_")}
    return subprocess.run(
        [str(SCRIPTS / script), *args], capture_output=True, text=True, timeout=120, env={**clean, **(env or {})}
    )


def dead_kubeconfig(path: Path) -> Path:
    """A kubeconfig whose API server is a closed port of this machine."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "not-a-real-token"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def test_version_is_the_package_metadatas() -> None:
    shown = run("ai-inference", "--version")
    assert shown.returncode == ExitCode.OK
    assert shown.stdout.strip() == f"ai-inference {version('ai-inference')}"


def test_the_kubectl_plugin_script_is_the_same_command() -> None:
    # kubectl runs `kubectl-ai_inference <args>` for `kubectl ai-inference <args>`.
    shown = run("kubectl-ai_inference", "--version")
    assert shown.returncode == ExitCode.OK
    assert shown.stdout.strip() == f"ai-inference {version('ai-inference')}"
    helped = run("kubectl-ai_inference", "plan", "--help", env={"COLUMNS": "200"})
    assert helped.returncode == ExitCode.OK
    assert "Usage: kubectl ai-inference plan" in helped.stdout


def test_exit_codes_are_distinct() -> None:
    codes = [int(code) for code in ExitCode]
    assert len(codes) == len(set(codes))
    assert ExitCode.OK == 0
    assert ExitCode.USAGE == 2  # typer's (click's) own for a usage error


@pytest.mark.parametrize(
    "args",
    [
        ["plan", "--model", MODEL],  # no --class
        ["plan", "--class", "default-llm", "--model", "not-a-repo"],
        ["plan", "--class", "default-llm", "--model", MODEL, "--source", "Git"],
        ["plan", "--class", "default-llm", "--model", MODEL, "-o", "yaml"],
        ["replan", "no-slash"],
        ["no-such-command"],
    ],
    ids=["missing option", "bad HF reference", "bad source", "bad output", "bad order", "unknown command"],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == ExitCode.USAGE, result.output


@pytest.mark.parametrize(
    "args", [["plan", "--class", "default-llm", "--model", MODEL], ["replan", "support/support-llm"]], ids=str
)
def test_an_unreachable_api_server_exits_4(tmp_path: Path, args: list[str]) -> None:
    kubeconfig = dead_kubeconfig(tmp_path / "kubeconfig")
    shown = run("ai-inference", *args, "-o", "json", "--kubeconfig", str(kubeconfig))
    assert shown.returncode == ExitCode.UNREACHABLE, shown.stdout + shown.stderr
    assert "cannot reach the Kubernetes API server" in shown.stderr
    assert "Traceback" not in shown.stderr
    assert "not-a-real-token" not in shown.stdout + shown.stderr


def test_commands_that_print_state_take_output_json() -> None:
    for command in ("plan", "replan"):
        shown = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
        assert shown.exit_code == 0
        assert "--output" in shown.output
        assert "-o" in shown.output
    assert [o.value for o in Output] == ["text", "json"]
