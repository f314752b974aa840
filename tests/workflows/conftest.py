"""Fixtures of the workflow tests: the fake activity world of tests/workflows/world.py on the real dev server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio
from temporalio.client import Client

from tests.workflows.world import Harness, Stand, open_harness, open_stand


@pytest_asyncio.fixture
async def harness(temporal_client: Client) -> AsyncIterator[Harness]:
    """The order workflow alone, one order at a time."""
    async with open_harness(temporal_client) as opened:
        yield opened


@pytest_asyncio.fixture
async def preemption_stand(temporal_client: Client) -> AsyncIterator[Stand]:
    """Orders of a simulated device class (four whole devices) with the preemption workflow."""
    async with open_stand(temporal_client, capacity=400, prefix="replay-preemption") as opened:
        yield opened
