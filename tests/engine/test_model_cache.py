"""The namespace's model cache end to end (``workload.modelCache``): a second order of a model the
first one downloaded does not download it again.

The stand of tests/e2e with the stand-in fleet running each pod's own model fetcher against the
fleet's hub (with the model of about 200 MiB) and the real engine. The module makes the namespace's
cache claim with the first order that needs it (ReadWriteMany, the module's label, owned by no order);
the first replica downloads the model and keeps it there; the second order's replica copies it from
the cache (the hub sends the weights once) and serves; the cache outlives the first order's deletion.
Each replica's time to Ready is printed beside its fetcher's run: the download against the copy.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from kubernetes.client import ApiClient
from temporalio.testing import WorkflowEnvironment

from activities.builders.common import LABEL_MANAGED_BY, MANAGED_BY
from devstack import tiny_model
from devstack.cluster.launcher import LocalCluster
from devstack.standins.engine import local_models_dir
from devstack.vllm_cpu_env import VllmCpuEnv
from inference_api.types import GROUP, VERSION
from tests.e2e.stand import ORDERS, Stand, open_stand
from tests.engine.serving import ENGINE_STAND_OVERRIDES

pytestmark = [pytest.mark.engine, pytest.mark.cluster, pytest.mark.temporal]

CLAIM = "ai-inference-model-cache"


def large_model() -> dict[str, Any]:
    from benchmarks.time_to_ready import parameter_count

    folder = tiny_model.install_large_model(local_models_dir() / tiny_model.LARGE_REPOSITORY)
    return {
        "src": "HuggingFace",
        "ref": {"name": tiny_model.LARGE_REPOSITORY},
        "parameterCount": parameter_count(folder),
    }


@pytest_asyncio.fixture(scope="module")
async def cached_stand(
    local_cluster: LocalCluster, kube_admin: ApiClient, temporal_env: WorkflowEnvironment, engine_env: VllmCpuEnv
) -> AsyncIterator[Stand]:
    overrides = {**ENGINE_STAND_OVERRIDES, "workload": {"modelCache": {"enabled": True, "claimName": CLAIM}}}
    async with open_stand(local_cluster, kube_admin, temporal_env.client, overrides) as stand:
        stand.fleet.hub_large = True  # before its first engine pod starts the fleet's hub
        yield stand


async def ready(stand: Stand, name: str, model: dict[str, Any]) -> float:
    started = time.monotonic()
    stand.create_order(name, model)
    await stand.until_phase(name, "Ready", timeout=900)
    return time.monotonic() - started


def fetcher_log(stand: Stand, name: str) -> tuple[str, float]:
    replica = stand.fleet.engine(stand.namespace, name)
    assert replica is not None
    ((began, ended, code),) = stand.fleet.fetches(replica.pod_uid)
    assert code == 0
    log = (stand.fleet.engine_root / replica.pod_uid / "model-fetcher.log").read_text()
    return log, ended - began


async def test_a_second_order_copies_the_model_from_the_namespaces_cache(cached_stand: Stand) -> None:
    stand = cached_stand
    hub = stand.fleet.own_hub().hub
    model = large_model()
    shards = sorted(name for name in hub.files(tiny_model.LARGE_REPOSITORY) if name.endswith(".safetensors"))

    first_seconds = await ready(stand, "first", model)
    first_log, first_fetch = fetcher_log(stand, "first")
    assert "kept in the namespace's model cache" in first_log, first_log
    claim = stand.core.read_namespaced_persistent_volume_claim(CLAIM, stand.namespace)
    assert claim.spec.access_modes == ["ReadWriteMany"]
    assert (claim.metadata.labels or {}).get(LABEL_MANAGED_BY) == MANAGED_BY
    assert not claim.metadata.owner_references  # the namespace's, no order's
    assert [len(hub.downloads(tiny_model.LARGE_REPOSITORY, shard)) for shard in shards] == [1] * len(shards)

    second_seconds = await ready(stand, "second", model)
    second_log, second_fetch = fetcher_log(stand, "second")
    assert "is in the namespace's model cache: copied from" in second_log, second_log
    # The weights left the hub once, for both orders.
    assert [len(hub.downloads(tiny_model.LARGE_REPOSITORY, shard)) for shard in shards] == [1] * len(shards)
    second = stand.fleet.engine(stand.namespace, "second")
    assert second is not None
    size = sum(p.stat().st_size for p in Path(second.argv[second.argv.index("--model") + 1]).glob("*.safetensors"))
    print(
        f"\nmodel {tiny_model.LARGE_REPOSITORY} ({size:,} bytes of weights): first replica Ready in "
        f"{first_seconds:.1f} s (download {first_fetch:.2f} s), second in {second_seconds:.1f} s "
        f"(copied from the namespace's cache in {second_fetch:.2f} s)"
    )

    # The cache outlives the orders that filled it.
    stand.custom.delete_namespaced_custom_object(GROUP, VERSION, stand.namespace, ORDERS, "first")
    await stand.until(lambda: stand.order("first") is None, timeout=120, what="the first order gone")
    assert (
        stand.core.read_namespaced_persistent_volume_claim(CLAIM, stand.namespace).metadata.deletion_timestamp is None
    )
