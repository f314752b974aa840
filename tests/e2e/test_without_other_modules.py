"""The module on a cluster without the modules it integrates with, on a control plane of its own
(the shared one has the stand-in ai-models CRDs, and must keep them and have no cert-manager).

* Without ai-models (its Model/ClusterModel CRDs absent: every list of them is a 404), with the default
  ``catalog.mode: Enabled``: the watcher is Ready and a Hugging Face order is served end to end; a
  catalog order waits with ``CatalogNotInstalled``, a message naming the missing module; ai-models
  installed later, it goes on by itself.
* Without cert-manager, a class naming a ClusterIssuer stays Ready (the issuer cannot be checked, and
  Ready's message says so); cert-manager installed (its ClusterIssuer CRD), the class is Ready=False
  ``IssuerNotFound`` until the issuer is made.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiClient, ApiextensionsV1Api, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException
from temporalio.testing import WorkflowEnvironment

from devstack.cluster.build import CONTROL_PLANE_TOOLS, ensure_binaries
from devstack.cluster.launcher import LocalCluster
from devstack.standins.fleet import StandInFleet
from inference_api.catalog_types import CATALOG_GROUP, CATALOG_VERSION, ModelFacts
from inference_api.settings import ModuleSettings
from inference_api.types import CLASSES, GROUP, VERSION, EndpointType
from tests.e2e.catalog_models import ClusterModels
from tests.e2e.stand import DEFAULT_LLM, Stand, e2e_settings, free_port
from tests.observer.class_watch import class_body, class_watch, until_ready
from worker.processes import Health, order_worker, run_watcher

pytestmark = [pytest.mark.cluster, pytest.mark.temporal]

REPO_ROOT = Path(__file__).resolve().parents[2]
CATALOG_CRDS = [
    REPO_ROOT / "deploy" / "crds" / "stand-ins" / f"{plural}.{CATALOG_GROUP}.yaml"
    for plural in ("models", "clustermodels")
]
EMBEDDING_REPO = "Qwen/Qwen3-Embedding-0.6B"
EMBEDDING_FACTS = ModelFacts(
    parameterCount="0.6B", format="safetensors", endpointTypes=[EndpointType.EMBEDDINGS], servedName=EMBEDDING_REPO
)
CLUSTER_ISSUER_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "clusterissuers.cert-manager.io"},
    "spec": {
        "group": "cert-manager.io",
        "scope": "Cluster",
        "names": {"kind": "ClusterIssuer", "plural": "clusterissuers", "singular": "clusterissuer"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            }
        ],
    },
}


def served(api: ApiClient, group: str, version: str, plural: str) -> bool:
    try:
        found = CustomObjectsApi(api).get_api_resources(group, version)
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return any(r.name == plural for r in found.resources or [])


def wait_served(api: ApiClient, group: str, version: str, plurals: list[str], want: bool, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while any(served(api, group, version, p) != want for p in plurals):
        assert time.monotonic() < deadline, f"{group}/{version} {plurals} served={not want} still"
        time.sleep(0.3)


@pytest.fixture(scope="module")
def bare_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A control plane of this module's own, never a reused one: the ai-models CRDs are removed."""
    cluster = LocalCluster(tmp_path_factory.mktemp("bare-cluster"), binaries=ensure_binaries(CONTROL_PLANE_TOOLS))
    cluster.up(progress=lambda line: print(f"bare cluster: {line}", file=sys.stderr, flush=True))
    try:
        cluster.create_namespace(ModuleSettings().moduleNamespace, users=())
        with cluster.api_client("admin") as api:
            extensions = ApiextensionsV1Api(api)
            for path in CATALOG_CRDS:
                extensions.delete_custom_resource_definition(yaml.safe_load(path.read_text())["metadata"]["name"])
            wait_served(api, CATALOG_GROUP, CATALOG_VERSION, ["models", "clustermodels"], want=False)
        yield cluster
    finally:
        cluster.down()


@pytest.fixture
def bare_admin(bare_cluster: LocalCluster) -> Iterator[ApiClient]:
    with bare_cluster.api_client("admin") as api:
        yield api


async def test_without_ai_models_the_watcher_is_ready_serves_hugging_face_and_catalog_orders_wait(
    bare_cluster: LocalCluster, bare_admin: ApiClient, temporal_env: WorkflowEnvironment
) -> None:
    api, client = bare_admin, temporal_env.client
    assert not served(api, CATALOG_GROUP, CATALOG_VERSION, "clustermodels")
    # The default catalog.mode (Enabled); the lookup service is nowhere (nothing listens there).
    overrides = {
        "aiModels": {
            "catalogLookup": {
                "baseURL": f"http://127.0.0.1:{free_port()}",
                "timeoutSeconds": 2,
                "notReadyRequeueSeconds": 1,
                "allowInsecureHttp": True,
            }
        }
    }
    settings = e2e_settings(f"bare-{uuid.uuid4().hex[:6]}", overrides)
    assert settings.catalog.mode == "Enabled"
    namespace = bare_cluster.create_namespace(f"bare-{uuid.uuid4().hex[:6]}", users=())
    with contextlib.suppress(ApiException):
        CustomObjectsApi(api).create_cluster_custom_object(GROUP, VERSION, CLASSES, DEFAULT_LLM)
    fleet = StandInFleet(api).start()
    health = Health(starting=True)
    watcher = asyncio.create_task(run_watcher(client, api, settings, health))
    stand = Stand(api, client, fleet, namespace, settings)
    model = f"qwen3-embedding-{uuid.uuid4().hex[:6]}"
    try:
        async with order_worker(client, api, settings, max_cached_workflows=100):
            # Ready: every informer listed — the catalog's as "not served" — and Temporal answers.
            deadline = time.monotonic() + 60
            while not (verdict := await health.ready())[0]:
                assert time.monotonic() < deadline, f"the watcher never got ready: {verdict[1]}"
                await asyncio.sleep(0.3)

            stand.create_order("chat", {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}})
            stand.create_order("catalog", {"src": "ai-models", "ref": {"kind": "ClusterModel", "name": model}})
            await stand.until_phase("catalog", "Pending", "CatalogNotInstalled")
            resolved = stand.condition("catalog", "ModelResolved")
            assert resolved is not None
            assert resolved["message"].startswith(
                "the ai-models module is not installed: its Model and ClusterModel kinds are not served"
            ), resolved["message"]
            assert f'ClusterModel "{model}" cannot be looked up' in resolved["message"]
            await stand.until_phase("chat", "Ready", timeout=180)
            assert (await health.ready())[0]

            # ai-models installed, then its model published: the catalog order goes on by itself.
            extensions = ApiextensionsV1Api(api)
            for path in CATALOG_CRDS:
                extensions.create_custom_resource_definition(yaml.safe_load(path.read_text()))
            await asyncio.to_thread(wait_served, api, CATALOG_GROUP, CATALOG_VERSION, ["models", "clustermodels"], True)
            await stand.until_phase("catalog", "Pending", "ModelNotFound")
            ClusterModels(api).create(model, source=f"hf://{EMBEDDING_REPO}", facts=EMBEDDING_FACTS)
            await stand.until_phase("catalog", "Ready", timeout=180)
            assert stand.status("catalog")["model"]["endpointType"] == "Embeddings"
            assert (await health.ready())[0]
        # (the orders go with the cluster)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await watcher
        fleet.stop()
        with contextlib.suppress(ApiException):
            CoreV1Api(api).delete_namespace(namespace)


async def test_an_issuer_is_checked_once_cert_manager_is_installed(
    bare_cluster: LocalCluster, bare_admin: ApiClient
) -> None:
    api = bare_admin
    custom = CustomObjectsApi(api)
    namespace = bare_cluster.create_namespace(f"issuer-{uuid.uuid4().hex[:6]}", users=())
    suffix = uuid.uuid4().hex[:6]
    class_name, issuer = f"refs-issuer-{suffix}", f"issuer-{suffix}"
    https = {"mode": "CertManager", "certManager": {"clusterIssuerName": issuer}}
    custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        CLASSES,
        class_body(class_name, exposurePolicy={"type": "External", "authentication": "Token", "https": https}),
    )
    # A short watch: a kind that is not served is listed again within a second or two.
    async with class_watch(api, namespace, watch_timeout_seconds=4):
        unchecked = await until_ready(api, class_name, "True", "ClassValid")
        assert (
            f'cert-manager is not installed (the API server serves no ClusterIssuer kind), so ClusterIssuer "{issuer}"'
            in (unchecked["Ready"]["message"])
        )

        ApiextensionsV1Api(api).create_custom_resource_definition(CLUSTER_ISSUER_CRD)
        missing = await until_ready(api, class_name, "False", "IssuerNotFound")
        assert f'ClusterIssuer "{issuer}", which does not exist: create it' in missing["Ready"]["message"]
        assert missing["Validated"]["status"] == "True"

        custom.create_cluster_custom_object(
            "cert-manager.io",
            "v1",
            "clusterissuers",
            {"apiVersion": "cert-manager.io/v1", "kind": "ClusterIssuer", "metadata": {"name": issuer}, "spec": {}},
        )
        ready = await until_ready(api, class_name, "True", "ClassValid")
        assert ready["Ready"]["message"] == "the class is valid and everything it names exists"
