"""Catalog orders end to end: the ai-models path, its refusals, and a gated Hugging Face model.

The stand of tests/e2e/stand.py (real cluster, Temporal, watcher, worker, planner; stand-in
runtimes) with the catalog's lookup API played by the stand-in REST service
(``CatalogServiceProcess``) and its objects by the stand-in ClusterModel CRD.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from devstack.standins.catalog_service import CatalogServiceProcess
from inference_api.catalog_types import ModelFacts
from inference_api.types import EndpointType, ModelKind
from tests.e2e.catalog_models import ClusterModels
from tests.e2e.stand import MakeStand, Stand
from workflows import activity_names as act

pytestmark = [pytest.mark.cluster, pytest.mark.temporal]

EMBEDDING_REPO = "Qwen/Qwen3-Embedding-0.6B"
EMBEDDING_FACTS = ModelFacts(
    parameterCount="0.6B", format="safetensors", endpointTypes=[EndpointType.EMBEDDINGS], servedName=EMBEDDING_REPO
)
GATED_REPO = "meta-llama/Llama-3.2-1B-Instruct"


def catalog_settings(base_url: str, requeue_seconds: float = 1.0) -> dict[str, Any]:
    return {
        "aiModels": {
            "catalogLookup": {
                "baseURL": base_url,
                "timeoutSeconds": 2,
                "notReadyRequeueSeconds": requeue_seconds,
                # The stand-in catalog serves plain http on loopback; production refuses it.
                "allowInsecureHttp": True,
            }
        }
    }


def unique(prefix: str) -> str:
    # ClusterModels are cluster-wide and the cluster is shared by the session (or reused).
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def cluster_model_ref(name: str) -> dict[str, Any]:
    return {"src": "ai-models", "ref": {"kind": "ClusterModel", "name": name}}


@pytest.fixture
def catalog() -> Iterator[CatalogServiceProcess]:
    with CatalogServiceProcess([]) as service:
        yield service


def runtime_args(stand: Stand, name: str) -> list[str]:
    sts = stand.apps.read_namespaced_stateful_set(name, stand.namespace)
    container = sts.spec.template.spec.containers[0]
    return [*(container.command or []), *(container.args or [])]


async def test_a_catalog_embedding_model_is_served_as_embeddings_and_its_hf_twin_as_chat(
    make_stand: MakeStand, catalog: CatalogServiceProcess
) -> None:
    model = unique("qwen3-embedding")
    catalog.put_model(
        ModelKind.CLUSTER_MODEL, model, ready=True, source=f"hf://{EMBEDDING_REPO}", facts=EMBEDDING_FACTS
    )
    stand = await make_stand(catalog_settings(catalog.base_url))

    stand.create_order("embedder", cluster_model_ref(model))
    # The same artefact, named by its Hugging Face repository: no catalog facts narrow the class.
    stand.create_order("embedder-hf", {"src": "HuggingFace", "ref": {"name": EMBEDDING_REPO}})
    await stand.until_phase("embedder", "Ready")
    await stand.until_phase("embedder-hf", "Ready")

    status = stand.status("embedder")
    assert status["model"]["endpointType"] == "Embeddings"
    assert status["constraints"]["modelScope"] == "Cluster"
    resolved = stand.condition("embedder", "ModelResolved")
    assert resolved is not None
    assert resolved["status"] == "True"
    assert catalog.lookups() >= 1, "the REST lookup was never asked"
    # The catalog's servedName is what the runtime serves (and what the probe found listed).
    args = runtime_args(stand, "embedder")
    assert args[args.index("--served-model-name") + 1] == EMBEDDING_REPO

    hf_status = stand.status("embedder-hf")
    assert hf_status["model"]["endpointType"] == "Chat"
    assert (hf_status.get("constraints") or {}).get("modelScope") != "Cluster"


async def test_a_model_not_ready_in_the_catalog_waits_and_proceeds_without_an_edit(
    make_stand: MakeStand, catalog: CatalogServiceProcess
) -> None:
    model = unique("qwen3-embedding-loading")
    catalog.put_model(
        ModelKind.CLUSTER_MODEL, model, ready=False, source=f"hf://{EMBEDDING_REPO}", facts=EMBEDDING_FACTS
    )
    stand = await make_stand(catalog_settings(catalog.base_url, requeue_seconds=1))

    stand.create_order("waiting", cluster_model_ref(model))
    await stand.until_phase("waiting", "Pending", "ModelNotReady")
    assert stand.apps.list_namespaced_stateful_set(stand.namespace).items == []

    catalog.put_model(ModelKind.CLUSTER_MODEL, model, ready=True)
    await stand.until_phase("waiting", "Ready")
    order = stand.order("waiting")
    assert order is not None, "the order was edited"
    assert order["metadata"]["generation"] == 1, "the order was edited"
    assert order["status"]["model"]["endpointType"] == "Embeddings"


async def test_with_the_rest_service_stopped_the_cluster_model_object_answers_in_the_same_reconcile(
    make_stand: MakeStand, catalog: CatalogServiceProcess, cluster_models: ClusterModels
) -> None:
    model = unique("qwen3-embedding-object")
    cluster_models.create(model, source=f"hf://{EMBEDDING_REPO}", facts=EMBEDDING_FACTS)
    catalog.stop()  # the lookup API is gone: connections to its port are refused
    stand = await make_stand(catalog_settings(catalog.base_url))

    stand.create_order("fallback", cluster_model_ref(model))
    await stand.until_phase("fallback", "Ready")
    status = stand.status("fallback")
    assert status["model"]["endpointType"] == "Embeddings"
    assert status["constraints"]["modelScope"] == "Cluster"

    # The first resolve-model call, on its first attempt, already had the facts: REST failing was
    # answered by the object within that same call, not by a retry or a later reconcile.
    runs = await stand.activity_runs("fallback", act.RESOLVE_MODEL)
    assert runs, runs
    assert all(run.attempt == 1 and run.completed for run in runs), runs
    first = json.loads(runs[0].result)
    assert first.get("refusal") is None, first
    assert first["facts"]["endpointTypes"] == ["Embeddings"]
    assert first["scope"] == "Cluster"


async def test_with_catalog_mode_none_a_catalog_order_is_refused_and_a_hugging_face_order_serves(
    make_stand: MakeStand, catalog: CatalogServiceProcess
) -> None:
    model = unique("qwen3-embedding-off")
    catalog.put_model(
        ModelKind.CLUSTER_MODEL, model, ready=True, source=f"hf://{EMBEDDING_REPO}", facts=EMBEDDING_FACTS
    )
    overrides = catalog_settings(catalog.base_url) | {"catalog": {"mode": "None"}}
    stand = await make_stand(overrides)

    stand.create_order("from-catalog", cluster_model_ref(model))
    stand.create_order("from-hf", {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}})
    await stand.until_phase("from-catalog", "Pending", "CatalogDisabled")
    await stand.until_phase("from-hf", "Ready")
    assert stand.phase("from-catalog") == ("Pending", "CatalogDisabled")
    assert catalog.lookups() == 0, "catalog.mode None must not call the lookup API"
    names = {s.metadata.name for s in stand.apps.list_namespaced_stateful_set(stand.namespace).items}
    assert names == {"from-hf"}


async def test_a_gated_model_waits_for_its_token_secret_which_never_enters_the_history(make_stand: MakeStand) -> None:
    stand = await make_stand({"aiModels": {"catalogLookup": {"notReadyRequeueSeconds": 1}}})
    token = f"hf_e2e_{uuid.uuid4().hex}"

    stand.create_order(
        "gated",
        {"src": "HuggingFace", "ref": {"name": GATED_REPO}, "authSecretRef": {"name": "hf-token", "key": "token"}},
    )
    await stand.until_phase("gated", "Pending", "AuthSecretNotFound")
    assert stand.apps.list_namespaced_stateful_set(stand.namespace).items == []

    stand.core.create_namespaced_secret(
        stand.namespace,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "hf-token"},
            "type": "Opaque",
            "data": {"token": base64.b64encode(token.encode()).decode()},
        },
    )
    await stand.until_phase("gated", "Ready")

    # The model fetcher reads the token from the user's Secret, by reference.
    sts = stand.apps.read_namespaced_stateful_set("gated", stand.namespace)
    (fetcher,) = [c for c in sts.spec.template.spec.init_containers if c.name == "model-fetcher"]
    (hf_token,) = [e for e in fetcher.env or [] if e.name == "HF_TOKEN"]
    assert hf_token.value is None
    assert (hf_token.value_from.secret_key_ref.name, hf_token.value_from.secret_key_ref.key) == ("hf-token", "token")

    # Neither the value nor its base64 form is anywhere in the workflow's history; the reference is.
    history = await stand.history_text("gated")
    assert "hf-token" in history, "the history was not decoded"
    assert GATED_REPO in history, "the history was not decoded"
    assert token not in history
    assert base64.b64encode(token.encode()).decode() not in history
