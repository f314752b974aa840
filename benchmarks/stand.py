"""The end-to-end benchmarks' stand: a local control plane of its own, a Temporal dev server and the
module's processes (the e2e tests' ``open_stand``), for the run of one benchmark."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from devstack.temporal_dev import temporal_binary
from tests.e2e.stand import Stand, open_stand
from tests.fixtures.cluster import running_cluster
from workflows.search_attributes import ALL_KEYS


@contextlib.asynccontextmanager
async def benchmark_stand(prefix: str, overrides: dict[str, Any]) -> AsyncIterator[Stand]:
    """A stand whose module settings take ``overrides``; everything it started is stopped on exit."""
    with tempfile.TemporaryDirectory(prefix=prefix) as state, running_cluster(Path(state), "cluster: ") as cluster:
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=str(temporal_binary()),
            data_converter=pydantic_data_converter,
            search_attributes=list(ALL_KEYS),
            ui=False,
        )
        try:
            with cluster.api_client("admin") as api:
                async with open_stand(cluster, api, env.client, overrides) as stand:
                    yield stand
        finally:
            await env.shutdown()
