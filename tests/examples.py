"""The manifests of deploy/examples/ (the ones docs/examples.md carries verbatim), as the tests read them.

``EXAMPLE_CLASSES`` and ``EXAMPLE_PRIORITY_CLASSES`` are the cluster-scoped examples the chart's
tests check and apply (tests/chart); every other example is applied by tests/docs/test_examples.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
EXAMPLES_DIR = REPO_ROOT / "deploy" / "examples"

# file -> the InferenceServiceClass it holds
EXAMPLE_CLASSES = {
    "class-llm-internal.yaml": "llm-internal",
    "class-llm-chat-external.yaml": "llm-chat-external",
    "class-llm-strict.yaml": "llm-strict",
    "class-embeddings-only.yaml": "embeddings-only",
}
# file -> (the PriorityClass it holds, its value)
EXAMPLE_PRIORITY_CLASSES = {
    "priorityclass-inference-low.yaml": ("inference-low", 100),
    "priorityclass-inference-normal.yaml": ("inference-normal", 500),
    "priorityclass-inference-high.yaml": ("inference-high", 1000),
}


def example_docs(name: str) -> list[dict[str, Any]]:
    """Every document of deploy/examples/<name>."""
    return [d for d in yaml.safe_load_all((EXAMPLES_DIR / name).read_text()) if d]


def example(name: str) -> dict[str, Any]:
    """The one document of deploy/examples/<name>."""
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES_DIR / name).read_text())
    return doc
