"""``ai-inference plan`` on the local control plane: the installed command, the chart's default-llm class,
the simulated GPUs. A plan for the user guide's model; the refusal a class too small for it would give."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient, CustomObjectsApi
from kubernetes.client.rest import ApiException

from devstack.cluster.launcher import LocalCluster
from inference_api.types import CLASSES, GROUP, VERSION
from tests.chart.helm import Helm, find
from worker.cli import ExitCode

MODEL = "Qwen/Qwen2.5-32B-Instruct-AWQ"
SCRIPTS = Path(sys.executable).parent


def cli(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AI_INFERENCE_")}
    return subprocess.run(
        [str(SCRIPTS / "ai-inference"), *args, "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def _ready(custom: CustomObjectsApi, name: str) -> None:
    """The status the observer writes for a valid class (the observer does not run here)."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    made = custom.get_cluster_custom_object(GROUP, VERSION, CLASSES, name)
    condition = {"status": "True", "reason": "ClassValid", "message": "the class is valid", "lastTransitionTime": now}
    status = {
        "phase": "Ready",
        "observedGeneration": made["metadata"]["generation"],
        "conditions": [{"type": "Validated", **condition}, {"type": "Ready", **condition}],
    }
    custom.patch_cluster_custom_object_status(GROUP, VERSION, CLASSES, name, {"status": status})


@pytest.fixture(scope="module")
def classes(local_cluster: LocalCluster, kube_admin: ApiClient, helm: Helm) -> Iterator[tuple[str, str]]:
    """The chart's default-llm class (as helm renders it), and a class that allows T4s only."""
    custom = CustomObjectsApi(kube_admin)
    made: list[str] = []
    rendered = helm.render({"defaultClass": {"clusterIssuerName": "letsencrypt"}})
    bundled = find(rendered, "InferenceServiceClass", "default-llm")
    try:
        custom.create_cluster_custom_object(GROUP, VERSION, CLASSES, bundled)
        made.append("default-llm")
    except ApiException as err:
        if err.status != 409:  # a reused cluster (`ai-inference dev up`) has it already
            raise
    _ready(custom, "default-llm")
    small = f"t4-only-{uuid.uuid4().hex[:6]}"
    spec: dict[str, Any] = {
        **bundled["spec"],
        "acceleratorPolicy": {
            "allowedDeviceClasses": ["nvidia-t4-mps-physical"],
            "allowedSharingModes": ["Shared", "Dedicated"],
            "allowedPlacementTypes": ["WholeDevice"],
            "maxAcceleratorCount": 1,
        },
    }
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceServiceClass", "metadata": {"name": small}}
    custom.create_cluster_custom_object(GROUP, VERSION, CLASSES, {**body, "spec": spec})
    made.append(small)
    _ready(custom, small)
    try:
        yield "default-llm", small
    finally:
        for name in made:
            custom.delete_cluster_custom_object(GROUP, VERSION, CLASSES, name)


def test_plan_prints_the_plan_the_default_class_gives_the_user_guides_model(
    local_cluster: LocalCluster, classes: tuple[str, str]
) -> None:
    kubeconfig = local_cluster.kubeconfig("admin")
    text = cli(kubeconfig, "plan", "--class", classes[0], "--model", MODEL)
    print(text.stdout)
    assert text.returncode == ExitCode.OK, text.stderr
    assert "planned" in text.stdout.splitlines()[0]
    assert "the order would get: device class nvidia-" in text.stdout
    assert "recipe: compiled vllm" in text.stdout or "recipe: preset vllm" in text.stdout, text.stdout
    assert "per device class:" in text.stdout
    # The T4s cannot hold a 32B model: their line says why, with the planner's reason.
    (t4,) = [line for line in text.stdout.splitlines() if line.startswith("  nvidia-t4-mps-physical:")]
    assert "refused" in t4

    out = cli(kubeconfig, "plan", "--class", classes[0], "--model", MODEL, "-o", "json")
    assert out.returncode == ExitCode.OK, out.stderr
    run = json.loads(out.stdout)
    assert run["planned"] is True
    assert run["refusal"] is None
    plan = run["plan"]
    assert plan["deviceClass"].startswith("nvidia-h100") or plan["deviceClass"] == "nvidia-hopper-s3-shared"
    assert 1 <= plan["sharePercent"] <= 100
    assert plan["recipe"]["runtime"] == "vllm"
    assert plan["recipe"]["args"]
    assert run["endpointType"] == "Chat"
    assert run["servedName"] == MODEL
    verdicts = {v["deviceClass"]: v for v in run["deviceClasses"]}
    # default-llm names no device class: every one of the cluster is judged.
    assert set(verdicts) == {"nvidia-h100-mps-mig", "nvidia-hopper-s3-shared", "nvidia-t4-mps-physical",
                             "nvidia-h100-dedicated"}  # fmt: skip
    assert verdicts[plan["deviceClass"]]["plan"] is not None
    assert verdicts["nvidia-t4-mps-physical"]["plan"] is None
    assert verdicts["nvidia-t4-mps-physical"]["refusal"]["reason"]


def test_plan_against_a_class_that_cannot_hold_the_model_prints_the_refusal(
    local_cluster: LocalCluster, classes: tuple[str, str]
) -> None:
    kubeconfig = local_cluster.kubeconfig("admin")
    text = cli(kubeconfig, "plan", "--class", classes[1], "--model", MODEL)
    print(text.stdout)
    assert text.returncode == ExitCode.REFUSED, text.stdout + text.stderr
    assert "refused" in text.stdout.splitlines()[0]
    assert "the order would wait: Planned=False, reason NoAcceleratorWithEnoughMemory" in text.stdout, text.stdout

    out = cli(kubeconfig, "plan", "--class", classes[1], "--model", MODEL, "--output", "json")
    assert out.returncode == ExitCode.REFUSED
    run = json.loads(out.stdout)
    assert run["planned"] is False
    assert run["plan"] is None
    assert run["refusal"]["condition"] == "Planned"
    assert run["refusal"]["reason"] == "NoAcceleratorWithEnoughMemory"
    assert "Tesla T4" in run["refusal"]["message"] or "16" in run["refusal"]["message"], run["refusal"]["message"]
    assert [v["deviceClass"] for v in run["deviceClasses"]] == ["nvidia-t4-mps-physical"]


def test_plan_for_a_class_that_does_not_exist_exits_not_found(local_cluster: LocalCluster) -> None:
    out = cli(local_cluster.kubeconfig("admin"), "plan", "--class", "no-such-class", "--model", MODEL, "-o", "json")
    assert out.returncode == ExitCode.NOT_FOUND
    run = json.loads(out.stdout)
    assert run["refusal"]["reason"] == "ClassNotFound"
    assert "no-such-class" in run["refusal"]["message"]


def test_plan_says_when_the_api_server_cannot_be_reached(local_cluster: LocalCluster, tmp_path: Path) -> None:
    # The admin kubeconfig, pointed at a port nothing listens on.
    text = local_cluster.kubeconfig("admin").read_text()
    dead = tmp_path / "kubeconfig"
    dead.write_text(re.sub(r"server: https://[^\s]+", "server: https://127.0.0.1:9", text))
    out = cli(dead, "plan", "--class", "default-llm", "--model", MODEL)
    assert out.returncode == ExitCode.UNREACHABLE, out.stdout + out.stderr
    assert "cannot reach the Kubernetes API server" in out.stderr


def test_kubectl_runs_the_installed_plugin(local_cluster: LocalCluster) -> None:
    kubectl = local_cluster.binaries.kubectl
    env = {**os.environ, "PATH": f"{SCRIPTS}{os.pathsep}{os.environ.get('PATH', '')}"}
    listed = subprocess.run([str(kubectl), "plugin", "list"], capture_output=True, text=True, timeout=60, env=env)
    assert "kubectl-ai_inference" in listed.stdout, listed.stdout + listed.stderr
    argv = [str(kubectl), "ai-inference", "--version"]
    shown = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert shown.returncode == ExitCode.OK, shown.stderr
    assert shown.stdout.startswith("ai-inference ")


def test_replan_of_an_order_that_does_not_exist_exits_not_found(local_cluster: LocalCluster) -> None:
    out = cli(local_cluster.kubeconfig("admin"), "replan", "default/no-such-order")
    assert out.returncode == ExitCode.NOT_FOUND, out.stdout + out.stderr
    assert "HTTP 404" in out.stderr
