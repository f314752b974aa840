"""Fixtures of the end-to-end tests: ``stand``, ``make_stand`` (see tests/e2e/stand.py), ``cluster_models``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio
from kubernetes.client import ApiClient
from temporalio.testing import WorkflowEnvironment

from devstack.cluster.launcher import LocalCluster
from tests.e2e.catalog_models import ClusterModels
from tests.e2e.stand import MakeStand, Stand, open_stand


@pytest_asyncio.fixture
async def make_stand(
    local_cluster: LocalCluster, kube_admin: ApiClient, temporal_env: WorkflowEnvironment
) -> AsyncIterator[MakeStand]:
    async with contextlib.AsyncExitStack() as stack:

        async def make(overrides: dict[str, Any] | None = None) -> Stand:
            return await stack.enter_async_context(
                open_stand(local_cluster, kube_admin, temporal_env.client, overrides)
            )

        yield make


@pytest_asyncio.fixture
async def stand(make_stand: MakeStand) -> Stand:
    return await make_stand()


@pytest.fixture
def cluster_models(kube_admin: ApiClient) -> Iterator[ClusterModels]:
    models = ClusterModels(kube_admin)
    yield models
    models.delete_all()
