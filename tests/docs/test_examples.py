"""docs/examples.md carries every manifest of deploy/examples/ verbatim, and every manifest is valid.

The classes and priority classes are applied to the real API server by tests/chart/test_install.py
(dry run, strict field validation); here the rest: the orders and their Secret, applied by the
namespace user with the real kubectl into their own namespaces — server-side apply, server dry run,
strict field validation — and read back unpruned. The ModuleConfigs are Deckhouse objects (no such
API locally): their settings are checked against the module's settings model.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml

from devstack.cluster.launcher import LocalCluster
from inference_api.settings import CatalogMode
from inference_api.types import InferenceService, InferenceServiceClass
from tests.examples import EXAMPLE_CLASSES, EXAMPLE_PRIORITY_CLASSES, EXAMPLES_DIR, REPO_ROOT, example_docs

EXAMPLES_DOC = REPO_ROOT / "docs" / "examples.md"

ALL_FILES = sorted(p.relative_to(EXAMPLES_DIR).as_posix() for p in EXAMPLES_DIR.rglob("*.yaml"))
# Kinds the chart's install test applies; everything else of the cluster's is applied here.
CHART_TESTED_KINDS = {"InferenceServiceClass", "PriorityClass"}
DECKHOUSE_KINDS = {"ModuleConfig"}


def _kinds(name: str) -> set[str]:
    return {d["kind"] for d in example_docs(name)}


APPLIED_HERE = [n for n in ALL_FILES if _kinds(n) - CHART_TESTED_KINDS - DECKHOUSE_KINDS]
MODULE_CONFIGS = [n for n in ALL_FILES if _kinds(n) & DECKHOUSE_KINDS]


def test_the_examples_the_seed_lists_are_all_there() -> None:
    assert {
        "order-minimal.yaml",
        "order-gated-huggingface.yaml",
        "order-catalog-chat.yaml",
        "moduleconfig/moduleconfig-minimal.yaml",
        "moduleconfig/moduleconfig-without-catalog.yaml",
        *EXAMPLE_CLASSES,
        *EXAMPLE_PRIORITY_CLASSES,
    } <= set(ALL_FILES)


@pytest.mark.parametrize("name", ALL_FILES)
def test_every_example_appears_verbatim_in_the_examples_page(name: str) -> None:
    page = EXAMPLES_DOC.read_text()
    text = (EXAMPLES_DIR / name).read_text()
    assert f"```yaml\n{text}```\n" in page, f"docs/examples.md does not carry deploy/examples/{name} verbatim"
    assert f"`deploy/examples/{name}`" in page, f"docs/examples.md does not name deploy/examples/{name}"


def test_the_examples_page_carries_no_manifest_that_is_not_a_file() -> None:
    page = EXAMPLES_DOC.read_text()
    blocks = re.findall(r"^```yaml\n(.*?)^```\n", page, re.M | re.S)
    files = {(EXAMPLES_DIR / n).read_text() for n in ALL_FILES}
    strays = [b for b in blocks if b not in files]
    assert not strays, f"manifests in docs/examples.md without a file in deploy/examples/: {strays}"


def test_every_example_is_applied_by_some_test() -> None:
    # What tests/chart applies (its lists), what this module applies, what is Deckhouse's: nothing else.
    for name in ALL_FILES:
        kinds = _kinds(name)
        if kinds <= CHART_TESTED_KINDS:
            assert name in {*EXAMPLE_CLASSES, *EXAMPLE_PRIORITY_CLASSES}, f"{name} is applied by no test"
        else:
            assert name in APPLIED_HERE or name in MODULE_CONFIGS, name


@pytest.mark.parametrize("name", APPLIED_HERE)
def test_orders_match_the_api_types(name: str) -> None:
    for doc in example_docs(name):
        if doc["kind"] == "InferenceService":
            order = InferenceService.model_validate(doc)
            assert order.metadata.namespace, f"{name}: an order names its namespace"
            assert set(doc["spec"]) == {"inferenceServiceClassName", "model"}
        elif doc["kind"] == "InferenceServiceClass":
            InferenceServiceClass.model_validate(doc)


def test_the_gated_order_names_its_secret_in_its_own_namespace() -> None:
    secret, order = example_docs("order-gated-huggingface.yaml")
    assert secret["kind"] == "Secret"
    assert order["kind"] == "InferenceService"
    assert secret["metadata"]["namespace"] == order["metadata"]["namespace"]
    ref = order["spec"]["model"]["authSecretRef"]
    assert ref["name"] == secret["metadata"]["name"]
    assert ref["key"] in secret["stringData"]
    # A placeholder, never a token.
    assert secret["stringData"][ref["key"]] == "<HUGGING_FACE_TOKEN>"


@pytest.mark.parametrize("name", MODULE_CONFIGS)
def test_module_configs_carry_only_the_public_setting(name: str) -> None:
    (doc,) = example_docs(name)
    assert doc["apiVersion"] == "deckhouse.io/v1alpha1"
    assert doc["kind"] == "ModuleConfig"
    assert doc["metadata"] == {"name": "ai-inference"}
    spec = doc["spec"]
    assert spec["enabled"] is True
    assert spec["version"] == 1
    settings = spec.get("settings", {})
    # The module has exactly one setting: catalog.mode.
    assert set(settings) <= {"catalog"}
    assert set(settings.get("catalog", {})) <= {"mode"}
    if "catalog" in settings:
        CatalogMode(settings["catalog"]["mode"])


# ---------------------------------------------------------------------- against the API server


@pytest.mark.cluster
@pytest.mark.parametrize("name", APPLIED_HERE)
def test_example_is_accepted_by_the_api_server(local_cluster: LocalCluster, name: str) -> None:
    docs = example_docs(name)
    for namespace in sorted({d["metadata"]["namespace"] for d in docs if d["metadata"].get("namespace")}):
        # The examples' own namespaces; the namespace user edits there, as in the user guide.
        local_cluster.create_namespace(namespace, users=("ns-user",))
    result = local_cluster.kubectl(
        "apply",
        "--server-side",
        "--field-manager=docs-examples",
        "--dry-run=server",
        "--validate=strict",
        "-f",
        str(EXAMPLES_DIR / name),
        "-o",
        "json",
        user="ns-user",
        check=False,
    )
    assert result.returncode == 0, f"the API server refused deploy/examples/{name}:\n{result.stderr}"
    answer = json.loads(result.stdout)
    stored = answer["items"] if answer.get("kind") == "List" else [answer]
    assert [(d["kind"], d["metadata"]["name"]) for d in stored] == [(d["kind"], d["metadata"]["name"]) for d in docs]
    for sent, kept in zip(docs, stored, strict=True):
        if sent["kind"] == "InferenceService":
            # Nothing pruned, nothing the user did not write (the key's default is written out already).
            assert kept["spec"] == sent["spec"], name


@pytest.mark.cluster
def test_an_order_with_a_runtime_block_is_refused_under_strict_validation(local_cluster: LocalCluster) -> None:
    """The user guide: a runtime block is rejected by strict field validation, pruned without it."""
    (order,) = example_docs("order-minimal.yaml")
    local_cluster.create_namespace(order["metadata"]["namespace"], users=("ns-user",))
    order["spec"]["runtime"] = {"image": "vllm/vllm-openai:latest"}
    args = ("create", "--dry-run=server", "-f", "-", "-o", "json")
    strict = local_cluster.kubectl(*args, "--validate=strict", input=yaml.safe_dump(order), user="ns-user", check=False)
    assert strict.returncode != 0
    assert 'unknown field "spec.runtime"' in strict.stderr, strict.stderr
    lax = local_cluster.kubectl(*args, "--validate=false", input=yaml.safe_dump(order), user="ns-user", check=False)
    assert lax.returncode == 0, lax.stderr
    assert "runtime" not in json.loads(lax.stdout)["spec"]
