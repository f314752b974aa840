"""Pinned revisions end to end (issue 35 item 2, docs/workload.md "Pinned revisions"): the worker pins
the commit an order's repository points at when the plan is made, and every replica fetches it — a
push to the repository afterwards gives no replica other weights; a replan asked by hand takes the new
commit.

The stand of tests/e2e with the module's hub endpoint (``workload.modelSource.huggingFace.endpoint``)
naming a hub of this test's own (devstack.standins.hub, the fleet's fetchers download from it too):
the worker asks it without a token; each replica's own ``model-fetcher`` runs with the real Hugging
Face CLI against it (the stand-in fleet, as a kubelet would), the engine is the real vLLM.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from kubernetes.client import ApiClient
from temporalio.testing import WorkflowEnvironment

from activities.builders.fetcher import FETCH_MARKER
from devstack import tiny_model
from devstack.cluster.launcher import LocalCluster
from devstack.standins.hub import HubServer, Served, standard_hub
from devstack.vllm_cpu_env import VllmCpuEnv
from inference_api.types import GROUP, VERSION
from tests.e2e.stand import ORDERS, Stand, open_stand, replan_once_settled
from tests.engine.serving import ENGINE_STAND_OVERRIDES

pytestmark = [pytest.mark.engine, pytest.mark.cluster, pytest.mark.temporal]

TINY = tiny_model.REPOSITORY
NAME = "pinned"


@pytest.fixture(scope="module")
def hub_server() -> Iterator[HubServer]:
    with HubServer(standard_hub()) as running:
        yield running


@pytest_asyncio.fixture(scope="module")
async def pinned_stand(
    local_cluster: LocalCluster,
    kube_admin: ApiClient,
    temporal_env: WorkflowEnvironment,
    engine_env: VllmCpuEnv,
    hub_server: HubServer,
) -> AsyncIterator[Stand]:
    overrides = {**ENGINE_STAND_OVERRIDES, "workload": {"modelSource": {"huggingFace": {"endpoint": hub_server.url}}}}
    async with open_stand(local_cluster, kube_admin, temporal_env.client, overrides) as stand:
        stand.fleet.hub_url = hub_server.url
        yield stand


def commit_of(stand: Stand) -> str | None:
    return ((stand.status(NAME).get("resolved") or {}).get("modelCommit")) or None


def template_revision(stand: Stand) -> str | None:
    sts = stand.apps.read_namespaced_stateful_set(NAME, stand.namespace)
    (fetcher,) = [c for c in sts.spec.template.spec.init_containers if c.name == "model-fetcher"]
    return next((e.value for e in fetcher.env or [] if e.name == "MODEL_REVISION"), None)


def pod_uid(stand: Stand) -> str | None:
    try:
        pod = stand.core.read_namespaced_pod(f"{NAME}-0", stand.namespace)
    except Exception:
        return None
    return str(pod.metadata.uid) if pod.metadata.deletion_timestamp is None else None


def fetched(stand: Stand, uid: str) -> bool:
    return any(code == 0 for _, _, code in stand.fleet.fetches(uid))


def asked_for(served: list[Served], kind: str) -> set[str]:
    """The revisions asked of the hub for the tiny model: ``info`` (model info: the worker's pin asks
    for the reference, a fetcher for its commit) or ``files`` (downloads, the fetchers' only)."""
    prefix = {"info": f"/api/models/{TINY}/revision/", "files": f"/{TINY}/resolve/"}[kind]
    return {s.path[len(prefix) :].split("/")[0] for s in served if s.path.startswith(prefix)}


async def test_every_replica_fetches_the_pinned_commit_after_a_push_and_a_replan_by_hand_takes_the_new_one(
    pinned_stand: Stand, hub_server: HubServer
) -> None:
    stand = pinned_stand
    hub = hub_server.hub
    first = hub.sha(TINY)
    stand.create_order(
        NAME, {"src": "HuggingFace", "ref": {"name": TINY}, "parameterCount": tiny_model.PARAMETER_COUNT}
    )
    try:
        await stand.until(lambda: commit_of(stand) == first, timeout=120, what=lambda: stand.describe(NAME))
        assert template_revision(stand) == first
        await stand.until(lambda: pod_uid(stand) is not None, timeout=120, what="the replica's pod")
        one = pod_uid(stand)
        assert one is not None
        await stand.until(lambda: fetched(stand, one), timeout=300, what="the first replica's fetcher completed")
        served = list(hub.served)
        # The worker asked for main once; the fetcher for the commit itself, never "main".
        assert asked_for(served, "info") == {"main", first}, served
        assert asked_for(served, "files") == {first}, served

        # The repository moves on; a replica made now (the pod deleted, as a node lost would) fetches
        # the pinned commit still.
        second = hub.push(TINY, {"README.md": b"a newer commit of the tiny model\n"}, message="newer")
        assert second != first
        before = len(hub.served)
        stand.core.delete_namespaced_pod(f"{NAME}-0", stand.namespace, grace_period_seconds=0)
        await stand.until(
            lambda: (uid := pod_uid(stand)) is not None and uid != one and fetched(stand, uid),
            timeout=300,
            what="the replica made again fetched its model",
        )
        again = hub.served[before:]
        assert "main" not in asked_for(again, "info"), again  # no new pin, no fetcher asked what main is now
        assert asked_for(again, "files") <= {first}, again  # (the volume kept the commit: nothing to fetch)
        await stand.until(
            lambda: (r := stand.fleet.engine(stand.namespace, NAME)) is not None and r.pod_uid == pod_uid(stand),
            timeout=120,
            what="the engine of the replica made again",
        )
        replica = stand.fleet.engine(stand.namespace, NAME)
        assert replica is not None
        model_dir = Path(replica.argv[replica.argv.index("--model") + 1])
        assert (model_dir / FETCH_MARKER).read_text().strip() == f"{TINY}@{first}"
        assert commit_of(stand) == first
        assert template_revision(stand) == first

        # A replan asked by hand takes what the repository points at now; the replicas fetch it.
        before = len(hub.served)
        outcome = await replan_once_settled(stand.workflow(NAME))
        assert outcome.planned, outcome
        await stand.until(lambda: commit_of(stand) == second, timeout=120, what=lambda: stand.describe(NAME))
        await stand.until(lambda: template_revision(stand) == second, timeout=120, what="the template's commit")
        await stand.until(
            lambda: second in asked_for(hub.served[before:], "files"),
            timeout=300,
            what="a replica fetched the new commit",
        )
        assert first not in asked_for(hub.served[before:], "files")
    finally:
        await asyncio.to_thread(
            stand.custom.delete_namespaced_custom_object, GROUP, VERSION, stand.namespace, ORDERS, NAME
        )
