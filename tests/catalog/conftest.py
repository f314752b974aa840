"""Fixtures of the catalog tests (their factories are in tests/factories.py, their fakes in fakes.py)."""

from __future__ import annotations

import pytest

from inference_api.types import ModelKind
from tests.catalog.fakes import FakeReader
from tests.factories import E5_FACTS, QWEN_FACTS, QWEN_SOURCE, catalog_object


@pytest.fixture
def fake_reader() -> FakeReader:
    return FakeReader(
        [
            catalog_object(ModelKind.CLUSTER_MODEL, "qwen2-5-32b-instruct-awq", facts=QWEN_FACTS, source=QWEN_SOURCE),
            catalog_object(ModelKind.MODEL, "e5-large", "team-a", facts=E5_FACTS),
            catalog_object(ModelKind.MODEL, "pending-model", "team-a", phase="Pending", facts=E5_FACTS),
        ]
    )


# The stand-in catalog (and the in-memory transports) speak plain http, which the client refuses by
# default (a token would travel in clear). These tests say, explicitly and for this folder only,
# that this is a test: ModuleSettings reads it from the environment whatever else a test passes.
# A test of the refusal itself passes allowInsecureHttp=False, which wins over the environment.
INSECURE_CATALOG_FOR_TESTS = "AI_INFERENCE_AIMODELS__CATALOGLOOKUP__ALLOWINSECUREHTTP"


@pytest.fixture(autouse=True)
def plain_http_catalog_is_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(INSECURE_CATALOG_FOR_TESTS, "true")
