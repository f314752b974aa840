"""The catalog's lookup service (the REST stand-in) down while catalog orders are made, edited and deleted.

Orders name ClusterModels the lookup service answers for (and that exist as objects too); it is
stopped for 30 s and started again on the same port: meanwhile the module resolves from the objects.
The resolve activity's retry policy backs off to at most 30 s (K8S_RETRY), so 30 s down covers a full
backoff; a minute would only add time. Ends with the shared convergence check (tests/faults/churn.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from kubernetes.client import ApiClient

from devstack.standins.catalog_service import CatalogServiceProcess, StandInModel
from inference_api.catalog_types import ModelFacts
from inference_api.types import EndpointType, ModelKind
from tests.e2e.catalog_models import ClusterModels
from tests.faults.churn import FaultStand, churn

DOWN_SECONDS = 30


MODELS = [
    StandInModel(
        kind=ModelKind.CLUSTER_MODEL,
        name=name,
        source=f"hf://{repo}",
        facts=ModelFacts(parameterCount=size, format="safetensors", endpointTypes=[EndpointType.CHAT]),
    )
    for name, repo, size in (
        ("faults-small", "Qwen/Qwen2.5-0.5B-Instruct", "0.5B"),
        ("faults-larger", "Qwen/Qwen2.5-1.5B-Instruct", "1.5B"),
    )
]


@pytest.fixture
def catalog(faults_admin: ApiClient) -> Iterator[CatalogServiceProcess]:
    # The models as the stand-in's fixtures: started again, it serves them again (a catalog that was
    # down, not one that lost its models). A generous start: on a loaded 2-core machine the process
    # takes its time to import. The same models as ClusterModel objects: with the lookup service
    # unreachable the module reads the catalog's objects (activities/catalog.py), as it would in a
    # cluster where ai-models runs.
    objects = ClusterModels(faults_admin)
    for model in MODELS:
        assert model.source is not None
        objects.create(model.name, source=model.source, facts=model.facts)
    try:
        with CatalogServiceProcess(MODELS, startup_timeout_seconds=90) as service:
            yield service
    finally:
        objects.delete_all()


async def test_the_catalog_lookup_service_down(fault_stand: FaultStand, catalog: CatalogServiceProcess) -> None:
    fs = fault_stand
    fs.model = {"src": "ai-models", "ref": {"kind": "ClusterModel", "name": "faults-small"}}
    fs.edit_patch = {"spec": {"model": {"ref": {"name": "faults-larger"}}}}
    fs.kill_worker()
    fs.kill_observer()
    fs.processes.env.update(
        {
            "AI_INFERENCE_AIMODELS__CATALOGLOOKUP__BASEURL": catalog.base_url,
            "AI_INFERENCE_AIMODELS__CATALOGLOOKUP__TIMEOUTSECONDS": "2",
            "AI_INFERENCE_AIMODELS__CATALOGLOOKUP__ALLOWINSECUREHTTP": "true",
        }
    )
    fs.start_worker()
    fs.start_observer()

    async def catalog_down() -> None:
        await asyncio.sleep(2)
        catalog.stop()
        await asyncio.sleep(DOWN_SECONDS)
        catalog.restart()

    await churn(fs, catalog_down)
