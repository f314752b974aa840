"""The commands the docs tell people to type work.

* every `kubectl get …` of the docs' shell blocks runs with the real kubectl, as the reader the page
  is written for, against the local control plane and an order whose status is written by hand —
  exit status 0 and something printed;
* every `ai-inference …` command named in the docs exists (typer's CliRunner, `--help`);
* every `temporal …` command uses flags the real Temporal CLI has, and every workflow list query of
  the docs is accepted by a real Temporal server with the module's search attributes.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes.client.rest import ApiException
from temporalio.testing import WorkflowEnvironment
from typer.testing import CliRunner

from devstack.cluster.launcher import LocalCluster
from devstack.temporal_dev import temporal_binary
from devstack.temporal_tls import TemporalCredentials
from inference_api.types import GROUP, VERSION
from worker.cli import app

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS = REPO_ROOT / "docs"
OWN_PAGES = ("user-guide.md", "admin-guide.md", "faq.md", "examples.md", "local-run.md", "operations.md")
# Who each page is written for: its kubectl commands run as that user of the local cluster.
READER = {
    "user-guide.md": "ns-user",
    "examples.md": "ns-user",
    "faq.md": "ns-user",
    "admin-guide.md": "module-admin",
    "local-run.md": "admin",
    "operations.md": "admin",
}
# The names the docs use, and what the test made in their place.
DOC_NAMESPACES = ("support", "my-namespace")
DOC_ORDER = "support-llm"
DOC_CLASS = "llm-chat-external"
AUTH_SECRET = "support-llm-auth"
# Orders of the dev stack only (`dev up`; test_run_as_written.py runs their commands there).
DEV_ORDERS = {"tiny-chat": DOC_ORDER, "tiny-chat-auth": AUTH_SECRET}
STAND_IN_ANNOTATION = "ai.deckhouse.io/stand-in-url"


# --------------------------------------------------------------------------------- extraction


def shell_blocks(page: str) -> list[str]:
    """Bodies of the ```bash blocks of a page, with backslash continuations joined."""
    text = (DOCS / page).read_text()
    blocks = re.findall(r"^```bash\n(.*?)^```", text, re.M | re.S)
    return [re.sub(r"\\\n\s*", " ", block) for block in blocks]


def commands_of(page: str, program: str) -> list[list[str]]:
    """Every invocation of ``program`` in the page's shell blocks, as argv, also inside ``$(…)``
    and before a pipe."""
    found: list[list[str]] = []
    for block in shell_blocks(page):
        for line in block.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            for match in re.finditer(rf"(?:^|(?<=[\s(]))(?:\S*/)?{re.escape(program)} ", line):
                lexer = shlex.shlex(line[match.start() :], posix=True, punctuation_chars="|);&")
                lexer.whitespace_split = True
                argv: list[str] = []
                for token in lexer:
                    if token and set(token) <= set("|);&"):
                        break
                    argv.append(token)
                argv[0] = program
                found.append(argv)
    return found


def inline_and_block_code(text: str) -> list[str]:
    """Code of a Markdown page: fenced blocks and inline spans."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S)
    rest = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return blocks + re.findall(r"`([^`\n]+)`", rest)


def cli_commands() -> set[tuple[str, ...]]:
    """Sub-command paths of `ai-inference …` the docs (and the README) name."""
    out: set[tuple[str, ...]] = set()
    pages = [DOCS / p for p in OWN_PAGES] + [REPO_ROOT / "README.md"]
    pattern = re.compile(r"(?:^|(?<=[\s`(/]))ai-inference((?: [a-z][a-z-]*(?=[\s`)\"']|$))+)", re.M)
    for page in pages:
        for code in inline_and_block_code(page.read_text()):
            for match in pattern.finditer(code):
                out.add(tuple(match.group(1).split()))
    return out


# ----------------------------------------------------------------------------- unit checks


def test_the_docs_name_commands_at_all() -> None:
    assert len(commands_of("user-guide.md", "kubectl")) >= 5
    assert len(commands_of("examples.md", "kubectl")) >= 6
    jsonpaths = [c for p in ("user-guide.md", "examples.md") for c in commands_of(p, "kubectl") if _jsonpath(c)]
    assert len(jsonpaths) >= 8
    assert {("dev", "up"), ("dev", "env"), ("replan",)} <= cli_commands()


@pytest.mark.parametrize("words", sorted(cli_commands()), ids=" ".join)
def test_ai_inference_subcommands_named_in_the_docs_exist(words: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*words, "--help"])
    assert result.exit_code == 0, f"`ai-inference {' '.join(words)}` is named in the docs but is no command"


def _temporal_commands() -> list[list[str]]:
    return [c for page in OWN_PAGES for c in commands_of(page, "temporal")]


def test_the_docs_show_the_temporal_replan_equivalents() -> None:
    subcommands = {tuple(_subcommand(c)) for c in _temporal_commands()}
    assert ("workflow", "signal") in subcommands
    assert ("workflow", "update", "execute") in subcommands
    assert ("workflow", "list") in subcommands


def _subcommand(argv: list[str]) -> list[str]:
    words = []
    for token in argv[1:]:
        if token.startswith("-"):
            break
        words.append(token)
    return words


@pytest.mark.parametrize("argv", _temporal_commands(), ids=lambda a: " ".join(a[:4]))
def test_temporal_commands_use_flags_the_cli_has(argv: list[str]) -> None:
    words = _subcommand(argv)
    help_text = subprocess.run(
        [str(temporal_binary()), *words, "--help"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    # Connection flags (--address, --namespace, …) are global: `temporal options` lists them.
    help_text += subprocess.run(
        [str(temporal_binary()), "options"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    flags = {t.split("=", 1)[0] for t in argv if t.startswith("--")}
    assert flags, argv
    for flag in flags:
        assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text), (
            f"`temporal {' '.join(words)}` has no {flag}"
        )


# ---------------------------------------------------------------------- Temporal list queries


def _list_queries() -> list[str]:
    queries = []
    for argv in _temporal_commands():
        if _subcommand(argv) == ["workflow", "list"]:
            queries.append(argv[argv.index("--query") + 1])
    return queries


@pytest.mark.temporal
async def test_workflow_list_queries_of_the_docs_are_accepted(
    temporal_env: WorkflowEnvironment, temporal_credentials: TemporalCredentials
) -> None:
    queries = _list_queries()
    assert len(queries) >= 5
    address = temporal_env.client.service_client.config.target_host
    # Over mTLS, as `ai-inference dev env` sets the CLI up (its TEMPORAL_TLS_* variables).
    cli_env = {**os.environ, **temporal_credentials.cli_env()}
    for query in queries:
        result = subprocess.run(
            [
                str(temporal_binary()),
                "workflow",
                "list",
                "--address",
                address,
                "--namespace",
                "default",
                "--query",
                query,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=cli_env,
        )
        assert result.returncode == 0, f"Temporal refused the docs' query {query!r}: {result.stderr}"


# ---------------------------------------------------------------------- kubectl against a cluster


def _jsonpath(argv: list[str]) -> bool:
    # `-o jsonpath='…'` reaches argv as "-o", "jsonpath=…".
    return any(token.startswith("jsonpath=") for token in argv)


def _conditions(ready: bool, now: str, generation: int) -> list[dict[str, Any]]:
    def cond(type_: str, status: bool, reason: str, message: str) -> dict[str, Any]:
        return {
            "type": type_,
            "status": "True" if status else "False",
            "reason": reason,
            "message": message,
            "observedGeneration": generation,
            "lastTransitionTime": now,
        }

    if ready:
        return [
            cond("ClassResolved", True, "ClassResolved", "class default-llm is Ready"),
            cond("ModelResolved", True, "ModelResolved", "model Qwen/Qwen2.5-32B-Instruct-AWQ is served as Chat"),
            cond(
                "Planned",
                True,
                "LaunchPlanCalculated",
                "1x NVIDIA H100 80GB HBM3 (nvidia-hopper-s3-shared, WholeDevice, Shared, 30%), recipe compiled",
            ),
            cond("WorkloadReady", True, "WorkloadApplied", "a replica is ready"),
            cond(
                "Ready", True, "ProbeSucceeded", "the API answers: GET /v1/models lists Qwen/Qwen2.5-32B-Instruct-AWQ"
            ),
            cond("ScalingHealthy", True, "ScalingAllowed", "the autoscaler may grow the order"),
            cond("RuntimeCurrent", True, "RuntimeUpToDate", "All 1 replica(s) run the shipped runtime release 0.33.0."),
        ]
    return [
        cond("ClassResolved", True, "ClassResolved", "class default-llm is Ready"),
        cond("ModelResolved", True, "ModelResolved", "model Qwen/Qwen2.5-32B-Instruct-AWQ is served as Chat"),
        cond("Planned", False, "NoCapacity", "every device that could hold the model is taken"),
        cond("WorkloadReady", False, "WaitingForPreviousStep", "waits for Planned"),
        cond("Ready", False, "WaitingForPreviousStep", "waits for Planned"),
    ]


@dataclass
class Stand:
    namespace: str
    class_name: str
    uid: str


def _order(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "inferenceServiceClassName": "default-llm",
            "model": {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-32B-Instruct-AWQ"}},
        },
    }


@pytest.fixture
def stand(local_cluster: LocalCluster, kube_admin: ApiClient, make_namespace: Any) -> Iterator[Stand]:
    """A namespace with the docs' order (Ready, status written as the worker would), a Pending
    neighbour, the auth Secret and the Service; a class shaped like the docs' class, with status."""
    namespace = make_namespace("docs")
    custom, core = CustomObjectsApi(kube_admin), CoreV1Api(kube_admin)
    now = "2026-01-01T00:00:00Z"
    created = custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, "inferenceservices", _order(DOC_ORDER, namespace)
    )
    generation = created["metadata"]["generation"]
    custom.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        namespace,
        "inferenceservices",
        DOC_ORDER,
        {
            "status": {
                "phase": "Ready",
                "observedGeneration": generation,
                "conditions": _conditions(True, now, generation),
                "endpoint": {"type": "External", "url": f"https://{DOC_ORDER}.{namespace}.ai.example.com"},
                "authSecretName": AUTH_SECRET,
                "model": {"endpointType": "Chat"},
                "constraints": {"minReplicas": 1, "maxReplicas": 2},
                "resolved": {
                    "deviceClass": "nvidia-hopper-s3-shared",
                    "acceleratorProductName": "NVIDIA H100 80GB HBM3",
                    "acceleratorMemoryGiB": 80,
                    "placementMode": "WholeDevice",
                    "sharingMode": "Shared",
                    "sharePercent": 30,
                    "replanCount": 0,
                    "features": {"modelFamily": "qwen2.5", "toolCalling": True, "reasoning": False},
                },
            }
        },
    )
    pending = "support-llm-pending"
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "inferenceservices", _order(pending, namespace))
    custom.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        namespace,
        "inferenceservices",
        pending,
        {"status": {"phase": "Pending", "reason": "NoCapacity", "conditions": _conditions(False, now, 1)}},
    )
    core.create_namespaced_secret(
        namespace,
        {"metadata": {"name": AUTH_SECRET}, "type": "Opaque", "stringData": {"token": "docs-test-token"}},
    )
    core.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": DOC_ORDER, "annotations": {STAND_IN_ANNOTATION: "http://127.0.0.1:8000"}},
            "spec": {"ports": [{"name": "http", "port": 80}], "selector": {"app": DOC_ORDER}},
        },
    )
    class_name = f"docs-{uuid.uuid4().hex[:8]}"
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceServiceClass",
        "metadata": {"name": class_name},
        "spec": {
            "modelPolicy": {"allowedEndpointTypes": ["Chat"]},
            "exposurePolicy": {"type": "ClusterLocal", "authentication": "None"},
        },
    }
    made = custom.create_cluster_custom_object(GROUP, VERSION, "inferenceserviceclasses", body)
    condition = {"status": "True", "reason": "ClassValid", "message": "the class is valid", "lastTransitionTime": now}
    custom.patch_cluster_custom_object_status(
        GROUP,
        VERSION,
        "inferenceserviceclasses",
        class_name,
        {
            "status": {
                "phase": "Ready",
                "observedGeneration": made["metadata"]["generation"],
                "conditions": [{"type": "Validated", **condition}, {"type": "Ready", **condition}],
            }
        },
    )
    try:
        yield Stand(namespace, class_name, created["metadata"]["uid"])
    finally:
        try:
            custom.delete_cluster_custom_object(GROUP, VERSION, "inferenceserviceclasses", class_name)
        except ApiException as err:
            if err.status != 404:
                raise


def _substitute(argv: list[str], stand: Stand) -> list[str]:
    out = []
    for i, token in enumerate(argv):
        if argv[i - 1 : i] in (["-n"], ["--namespace"]) and token in DOC_NAMESPACES:
            token = stand.namespace
        elif token == DOC_CLASS:
            token = stand.class_name
        elif token == "$SECRET":
            token = AUTH_SECRET
        elif token in DEV_ORDERS:  # the dev stack's second order: the stand's order stands for it here
            token = DEV_ORDERS[token]
        out.append(token)
    return out


def _kubectl_gets() -> list[tuple[str, list[str]]]:
    out = []
    for page in OWN_PAGES:
        for argv in commands_of(page, "kubectl"):
            # The catalog's objects exist on the dev stack only (test_run_as_written.py reads them there).
            catalog = len(argv) > 2 and argv[2] in ("clustermodels", "models")
            if len(argv) > 1 and argv[1] == "get" and "-w" not in argv and "--watch" not in argv and not catalog:
                out.append((page, argv))
    return out


@pytest.mark.cluster
@pytest.mark.parametrize(
    ("page", "argv"), _kubectl_gets(), ids=[f"{p}: {' '.join(a)[:90]}" for p, a in _kubectl_gets()]
)
def test_kubectl_get_commands_of_the_docs_work(
    stand: Stand, local_cluster: LocalCluster, page: str, argv: list[str]
) -> None:
    kubectl = local_cluster.binaries.kubectl  # built with the cluster, before the first test
    user = READER[page]
    command = [str(kubectl), "--kubeconfig", str(local_cluster.kubeconfig(user)), *_substitute(argv, stand)[1:]]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    shown = shlex.join(argv)
    assert result.returncode == 0, f"{page} ({user}): `{shown}` failed:\n{result.stderr}"
    assert result.stdout.strip(), f"{page} ({user}): `{shown}` printed nothing:\n{result.stderr}"


# ---------------------------------------------------------------------- what operations.md quotes


def test_the_search_attributes_the_docs_list_are_the_workflows() -> None:
    from workflows.search_attributes import ALL_KEYS, type_name

    names = {key.name for key in ALL_KEYS}
    text = (DOCS / "operations.md").read_text()
    table_text = text.split("| attribute | value |\n|---|---|\n", 1)[1].split("\n\n", 1)[0]
    table = set(re.findall(r"^\| `(\w+)` \|", table_text, re.M))
    assert table == names
    (loop,) = re.findall(r"^for name in ((?:\w+ ?)+); do$", text, re.M)
    keywords = {key.name for key in ALL_KEYS if type_name(key) == "Keyword"}
    assert set(loop.split()) == keywords  # the loop makes the Keyword ones; each other type its own line
    for key in ALL_KEYS:
        if key.name not in keywords:
            assert f"--name {key.name} --type {type_name(key)}" in text, key.name


def test_the_replan_refusals_the_docs_quote_are_the_validators() -> None:
    import inspect

    from workflows.order import OrderWorkflow

    source = " ".join(inspect.getsource(OrderWorkflow.validate_replan).split())
    for page in ("operations.md", "local-run.md"):
        text = (DOCS / page).read_text()
        quoted = [q for q in re.findall(r"^- `([^`]+)`", text, re.M) if "replan" in q or "reconcile" in q]
        assert len(quoted) == 3, page
        for message in quoted:
            # The fixed part of each message (before a placeholder or the condition it names).
            fixed = re.split(r"<|, [A-Z]\w+=", message)[0]
            assert fixed in source, f"{page} quotes a replan refusal the workflow does not give: {message!r}"
