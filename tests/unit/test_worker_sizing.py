"""The worker's sizing settings reach the Temporal worker the module runs (``ai-inference worker``)."""

from __future__ import annotations

import uuid

import pytest
from kubernetes.client import ApiClient
from temporalio.client import Client

from inference_api.settings import ModuleSettings
from worker.processes import order_worker


@pytest.fixture(autouse=True)
def own_task_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    # One worker per task queue and client: each test's worker on a queue of its own.
    monkeypatch.setenv("AI_INFERENCE_TEMPORAL__TASKQUEUE", f"sizing-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def sized(monkeypatch: pytest.MonkeyPatch) -> ModuleSettings:
    monkeypatch.setenv("AI_INFERENCE_WORKER__WORKFLOWTASKSLOTS", "7")
    monkeypatch.setenv("AI_INFERENCE_WORKER__ACTIVITYSLOTS", "5")
    monkeypatch.setenv("AI_INFERENCE_WORKER__CACHEDWORKFLOWS", "4321")
    return ModuleSettings()


async def test_the_worker_takes_its_slots_and_cache_from_the_settings(
    temporal_client: Client, sized: ModuleSettings
) -> None:
    config = order_worker(temporal_client, ApiClient(), sized).config()
    assert config.get("max_concurrent_workflow_tasks") == 7
    assert config.get("max_concurrent_activities") == 5
    assert config.get("max_cached_workflows") == 4321


async def test_the_production_defaults(temporal_client: Client) -> None:
    config = order_worker(temporal_client, ApiClient(), ModuleSettings()).config()
    assert config.get("max_cached_workflows") == 1000
    assert config.get("max_concurrent_workflow_tasks") == 10
