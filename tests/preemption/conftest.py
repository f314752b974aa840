"""Fixtures of the preemption tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio
from temporalio.client import Client

from tests.workflows.world import Stand, open_stand


@pytest_asyncio.fixture
async def stand(temporal_client: Client) -> AsyncIterator[Stand]:
    """Orders of a simulated device class (four whole devices) with the preemption workflow and its
    real activities (tests/workflows/world.py). test_metrics_e2e.py has a ``stand`` of its own:
    the end-to-end one, over the local cluster."""
    async with open_stand(temporal_client, capacity=400) as opened:
        yield opened
