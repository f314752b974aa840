"""docs/cli.md says what the command does: its exit codes, the commands that take ``-o json``, and
commands that exist."""

from __future__ import annotations

import re
import shlex
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import typer
from kubernetes.client import CustomObjectsApi
from typer.testing import CliRunner

from devstack.cluster.launcher import LocalCluster
from inference_api.types import GROUP, VERSION
from worker.cli import ExitCode, app

PLUGINS = {"dev", "cluster"}
PAGE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_the_exit_code_table_is_the_exit_codes() -> None:
    table = PAGE.read_text().split("| code | name | when |\n|---|---|---|\n", 1)[1].split("\n\n", 1)[0]
    rows = re.findall(r"^\| (\d+) \| (\w[\w ]*) \|", table, re.M)
    assert [(int(code), name) for code, name in rows] == [
        (int(code), code.name.lower().replace("_", " ")) for code in ExitCode
    ]


def _commands() -> dict[str, Any]:
    """The visible commands of the production CLI (the local stack's plug-ins are documented elsewhere)."""
    group: Any = typer.main.get_command(app)
    return {name: c for name, c in sorted(group.commands.items()) if not c.hidden and name not in PLUGINS}


def test_the_commands_that_take_output_are_the_ones_the_page_lists() -> None:
    (listed,) = re.findall(r"The commands that take it: ([^.]+)\.", PAGE.read_text())
    documented = sorted(re.findall(r"`(\w+)`", listed))
    taking = [name for name, c in _commands().items() if any("-o" in p.opts for p in c.params)]
    assert documented == taking


def test_every_command_is_in_the_table() -> None:
    text = PAGE.read_text()
    for name in _commands():
        assert f"| `ai-inference {name}" in text, f"docs/cli.md does not list `ai-inference {name}`"


@pytest.mark.parametrize(
    "words", sorted({tuple(m.split()) for m in re.findall(r"ai-inference ((?:[a-z]+)(?: [a-z]+)?) ", PAGE.read_text())})
)
def test_commands_named_on_the_page_exist(words: tuple[str, ...]) -> None:
    # "dev up" / "plan --class": the first word is the command; a second word may be a sub-command.
    result = CliRunner().invoke(app, [words[0], "--help"])
    assert result.exit_code == 0, f"`ai-inference {words[0]}` is named in docs/cli.md but is no command"


def test_the_user_guides_kubectl_wait_works_as_written(local_cluster: LocalCluster, namespace: str) -> None:
    """The user guide's `kubectl wait … inferenceservice.ai.deckhouse.io/NAME` against a Ready order
    (status written by hand: no worker runs here), as the namespace user, in a namespace of the test."""
    guide = (PAGE.parent / "user-guide.md").read_text()
    (line,) = [line for line in guide.splitlines() if line.startswith("kubectl wait ")]
    argv = shlex.split(line)
    assert "inferenceservice.ai.deckhouse.io/support-llm" in argv
    custom = CustomObjectsApi(local_cluster.api_client("admin"))
    order = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceService",
        "metadata": {"name": "support-llm"},
        "spec": {"inferenceServiceClassName": "default-llm", "model": {"src": "HuggingFace", "ref": {"name": "a/b"}}},
    }
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "inferenceservices", order)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    ready = {"type": "Ready", "status": "True", "reason": "ServingHealthy", "message": "ok", "lastTransitionTime": now,
             "observedGeneration": 1}  # fmt: skip
    custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, "inferenceservices", "support-llm", {"status": {"conditions": [ready]}}
    )
    argv = [namespace if word == "support" else word for word in argv]
    argv = [word.replace("--timeout=30m", "--timeout=60s") for word in argv]
    kubeconfig = str(local_cluster.kubeconfig("ns-user"))
    result = subprocess.run(
        [str(local_cluster.binaries.kubectl), "--kubeconfig", kubeconfig, *argv[1:]],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert result.returncode == 0, result.stderr
    assert "condition met" in result.stdout
