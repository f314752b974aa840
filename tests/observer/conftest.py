"""Fixtures of the observer's tests: a worker on a task queue of its own hosting the recording stand-ins."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest_asyncio
from temporalio.client import Client
from temporalio.worker import Worker

from tests.observer.recording import RecordingLegacyOrderWorkflow, RecordingOrderWorkflowV2


@pytest_asyncio.fixture
async def task_queue(temporal_client: Client) -> AsyncIterator[str]:
    """A task queue of its own (the resync's listing is scoped to it), served by the recording stand-ins."""
    queue = f"observer-{uuid.uuid4().hex[:8]}"
    async with Worker(
        temporal_client,
        task_queue=queue,
        workflows=[RecordingOrderWorkflowV2, RecordingLegacyOrderWorkflow],
        max_cached_workflows=0,
    ):
        yield queue
