"""The order says how much of its model has arrived while a replica downloads it (issue 35 item 4,
docs/faq.md "ModelDownloading").

The stand of tests/e2e with the stand-in fleet running the replica's own ``model-fetcher`` (the real
Hugging Face CLI) against the fleet's hub, which serves the model of about 200 MiB at a bounded rate
so the download lasts long enough to watch. The watcher reads the fetcher's log through the API server
(``pods/log``: kube-apiserver asks the node's kubelet, played by the fleet) and the order's
``WorkloadReady`` says ``ModelDownloading`` with the share that arrived, in steps, then
``ModelLoading`` once the engine (the real vLLM) starts.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from kubernetes.client import ApiClient
from temporalio.testing import WorkflowEnvironment

from devstack.cluster.launcher import LocalCluster
from devstack.vllm_cpu_env import VllmCpuEnv
from inference_api.types import GROUP, VERSION
from tests.e2e.stand import ORDERS, Stand, open_stand
from tests.engine.serving import ENGINE_STAND_OVERRIDES
from tests.engine.test_model_cache import large_model

pytestmark = [pytest.mark.engine, pytest.mark.cluster, pytest.mark.temporal]

NAME = "watched"
# The hub's pace for each download: about 40 s for the ~200 MiB model, four progress lines of its fetcher.
RATE = 5 * 1024 * 1024
PERCENT = re.compile(r"the model downloads: (\d+) % of ([0-9.]+ [MG]iB) arrived")


@pytest_asyncio.fixture(scope="module")
async def progress_stand(
    local_cluster: LocalCluster, kube_admin: ApiClient, temporal_env: WorkflowEnvironment, engine_env: VllmCpuEnv
) -> AsyncIterator[Stand]:
    overrides = {**ENGINE_STAND_OVERRIDES, "observer": {"downloadProgressSeconds": 1}}
    async with open_stand(local_cluster, kube_admin, temporal_env.client, overrides) as stand:
        stand.fleet.hub_large = True  # before its first engine pod starts the fleet's hub
        yield stand


def workload(stand: Stand) -> tuple[str, str]:
    found = stand.condition(NAME, "WorkloadReady") or {}
    return str(found.get("reason") or ""), str(found.get("message") or "")


async def test_the_order_says_how_much_of_the_model_arrived_then_that_it_loads(progress_stand: Stand) -> None:
    stand = progress_stand
    hub = stand.fleet.own_hub().hub
    hub.rate = RATE
    told: list[tuple[float, str, str]] = []
    began = time.monotonic()
    stand.create_order(NAME, large_model())
    try:
        deadline = began + 600
        while time.monotonic() < deadline:
            reason, message = workload(stand)
            if not told or told[-1][1:] != (reason, message):
                told.append((time.monotonic() - began, reason, message))
                print(f"{told[-1][0]:6.1f} s  {reason}: {message[:160]}")
            if reason in ("ModelLoading", "WorkloadApplied") and any(r == "ModelDownloading" for _, r, _ in told):
                break
            await asyncio.sleep(0.5)
        steps = [int(m.group(1)) for _, r, msg in told if r == "ModelDownloading" and (m := PERCENT.search(msg))]
        assert len(set(steps)) >= 2, told  # the share arrived, told as it grows
        assert steps == sorted(steps), told
        assert all(s < 100 for s in steps[:-1]), told
        sizes = {m.group(2) for _, r, msg in told if r == "ModelDownloading" and (m := PERCENT.search(msg))}
        assert len(sizes) == 1, sizes  # the model's whole size, the same each time
        reasons = [r for _, r, _ in told]
        assert reasons.index("ModelDownloading") < len(reasons) - 1, told  # then the engine's turn
        assert told[-1][1] in ("ModelLoading", "WorkloadApplied"), told
        # The download was bounded by the hub's pace: the watcher told it while it ran, not after.
        replica = stand.fleet.engine(stand.namespace, NAME)
        assert replica is not None
        ((fetch_began, fetch_ended, code),) = stand.fleet.fetches(replica.pod_uid)
        assert code == 0
        assert fetch_ended - fetch_began > 10  # the hub's pace: about 20 s, the shards in parallel
    finally:
        hub.rate = None
        await asyncio.to_thread(
            stand.custom.delete_namespaced_custom_object, GROUP, VERSION, stand.namespace, ORDERS, NAME
        )
