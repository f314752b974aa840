"""The observer's Secrets: metadata only in its cache, the token of an auth Secret read by name.

Pure logic (no API server): what ``slim_metadata`` keeps of a PartialObjectMetadata, that the drift
decisions still tell who changed a Secret's data, and the observer's token cache (read once per
resourceVersion, read again after a rotation, forgotten with a deleted Secret). The API server side
(the Accept header, a flood of labelled Secrets) is tests/security/test_secret_flood.py.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes.client import ApiClient
from temporalio.client import Client

from activities.builders.common import LABEL_MANAGED_BY, LABEL_ORDER, MANAGED_BY
from inference_api.observation import OrderSignal
from inference_api.settings import HealthSettings, ModuleSettings, ObserverSettings, TemporalSettings
from worker.observer import Observer
from worker.observer import decisions as d
from worker.observer import informer as inf
from worker.observer.decisions import FIELD_MANAGER
from worker.observer.informer import PARTIAL_METADATA, Listed, Watched, slim_metadata

OWNER = [
    {
        "apiVersion": "ai.deckhouse.io/v1alpha1",
        "kind": "InferenceService",
        "name": "chat",
        "uid": "u-chat",
        "controller": True,
    }
]


def partial(rv: str, writers: list[tuple[str, str]], **extra: Any) -> dict[str, Any]:
    """A Secret as a metadata-only list or watch sends it (PartialObjectMetadata)."""
    metadata: dict[str, Any] = {
        "name": "chat-auth",
        "namespace": "team",
        "uid": "s-1",
        "resourceVersion": rv,
        "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_ORDER: "chat"},
        "ownerReferences": OWNER,
        "managedFields": [
            {
                "manager": m,
                "operation": "Update",
                "time": t,
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:data": {"f:token": {}}},
            }
            for m, t in writers
        ],
    }
    metadata.update(extra)
    return {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": metadata}


def test_only_the_secret_informer_is_metadata_only_and_it_asks_for_partial_metadata() -> None:
    resources = inf.resources(ApiClient(), catalog=True)
    assert [r.kind for r in resources if r.metadata_only] == [inf.SECRET]
    (secret,) = [r for r in resources if r.kind == inf.SECRET]
    assert inf._selector(secret) == {
        "label_selector": inf.MODULE_SELECTOR,
        "_headers": {"Accept": inf.PARTIAL_METADATA_LIST},
    }
    assert inf._selector(secret, watch=True)["_headers"] == {"Accept": PARTIAL_METADATA}
    (service,) = [r for r in resources if r.kind == inf.SERVICE]
    assert "_headers" not in inf._selector(service)


def test_slim_metadata_is_bounded_whatever_a_tenant_writes_into_the_metadata() -> None:
    bloated = partial(
        "1",
        [(FIELD_MANAGER, "2026-01-01T00:00:00Z")],
        annotations={f"a{i}": "x" * 1000 for i in range(200)},
        finalizers=["example.com/f"],
    )
    bloated["metadata"]["labels"].update({f"l{i}": "y" * 60 for i in range(500)})
    bloated["metadata"]["ownerReferences"] = OWNER + [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": f"c{i}", "uid": f"c{i}"} for i in range(100)
    ]
    slim = slim_metadata(bloated, inf.SECRET)
    assert len(json.dumps(slim)) < 1500, len(json.dumps(slim))
    assert slim["kind"] == "Secret"
    assert slim["apiVersion"] == "v1"
    # What the observer reads: the key, the module's labels, the order owner, who wrote it.
    assert d.object_key(slim) == "team/chat-auth"
    assert d.order_name_label(slim) == "chat"
    assert d.owner_order_uid(slim) == "u-chat"
    assert d.last_writer(slim) == FIELD_MANAGER
    assert "data" not in slim
    assert "annotations" not in slim["metadata"]


def test_a_data_edit_by_someone_else_is_drift_and_the_modules_own_write_is_not() -> None:
    made = slim_metadata(partial("1", [(FIELD_MANAGER, "2026-01-01T00:00:00Z")]), inf.SECRET)
    # kubectl edit of the token: the API server adds kubectl's managedFields entry.
    edited = slim_metadata(
        partial("2", [(FIELD_MANAGER, "2026-01-01T00:00:00Z"), ("kubectl-edit", "2026-01-01T00:05:00Z")]),
        inf.SECRET,
    )
    assert d.owned_change(inf.SECRET, d.MODIFIED, made, edited) == "Secret team/chat-auth changed by kubectl-edit"
    # The module writing again (a later time on its own entry) is no drift.
    rewritten = slim_metadata(partial("3", [(FIELD_MANAGER, "2026-01-01T00:09:00Z")]), inf.SECRET)
    assert d.owned_change(inf.SECRET, d.MODIFIED, made, rewritten) is None
    # An annotation someone adds changes the digest as well.
    annotated = slim_metadata(
        partial(
            "4",
            [(FIELD_MANAGER, "2026-01-01T00:00:00Z"), ("kubectl-annotate", "2026-01-01T00:06:00Z")],
            annotations={"x": "y"},
        ),
        inf.SECRET,
    )
    assert made["metadataDigest"] != annotated["metadataDigest"]
    assert (
        d.owned_change(inf.SECRET, d.MODIFIED, made, annotated) == "Secret team/chat-auth changed by kubectl-annotate"
    )


def serving_order() -> dict[str, Any]:
    return {
        "apiVersion": "ai.deckhouse.io/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": "chat", "namespace": "team", "uid": "u-chat", "generation": 1, "resourceVersion": "1"},
        "spec": {"inferenceServiceClassName": "default-llm", "model": {"src": "HuggingFace", "ref": {"name": "org/m"}}},
        "status": {
            "phase": "Ready",
            "observedGeneration": 1,
            "authSecretName": "chat-auth",
            "conditions": [{"type": "Ready", "status": "True", "reason": "ServiceReady", "lastTransitionTime": "t"}],
        },
    }


def full_secret(rv: str, token_b64: str) -> dict[str, Any]:
    return {"metadata": {"name": "chat-auth", "namespace": "team", "resourceVersion": rv}, "data": {"token": token_b64}}


async def test_the_token_is_read_by_name_once_per_version_and_forgotten_with_its_secret(
    temporal_client: Client,
) -> None:
    secrets = {"team/chat-auth": full_secret("1", "b25l")}  # "one"
    reads: list[str] = []

    def read_secret(namespace: str, name: str) -> dict[str, Any] | None:
        reads.append(f"{namespace}/{name}")
        return secrets.get(f"{namespace}/{name}")

    settings = ModuleSettings(
        temporal=TemporalSettings(taskQueue="secret-metadata"),
        health=HealthSettings(intervalSeconds=3600),
        observer=ObserverSettings(debounceSeconds=0.01),
    )
    obs = Observer(ApiClient(), temporal_client, settings, resources=[], fingerprint="fp", read_secret=read_secret)
    obs.handle(Listed(inf.SECRET, [slim_metadata(partial("1", [(FIELD_MANAGER, "t1")]), inf.SECRET)]))
    obs.handle(Listed(inf.ORDER, [serving_order()]))
    ((ref, _),) = list(obs.probe_candidates())
    assert (await obs.probe_spec(ref)).token == "one"
    assert (await obs.probe_spec(ref)).token == "one"
    assert reads == ["team/chat-auth"]
    # Rotated (a new resourceVersion): read again.
    secrets["team/chat-auth"] = full_secret("2", "dHdv")  # "two"
    obs.handle(Watched(inf.SECRET, d.MODIFIED, slim_metadata(partial("2", [(FIELD_MANAGER, "t2")]), inf.SECRET)))
    assert (await obs.probe_spec(ref)).token == "two"
    assert reads == ["team/chat-auth"] * 2
    # Deleted: the token is forgotten, no read is made, and the order's workflow hears of it.
    obs.outbox.pending.clear()
    obs.handle(Watched(inf.SECRET, d.DELETED, slim_metadata(partial("3", [(FIELD_MANAGER, "t2")]), inf.SECRET)))
    assert obs.tokens == {}
    assert (await obs.probe_spec(ref)).token is None
    assert reads == ["team/chat-auth"] * 2
    obs.flush("u-chat")
    signals = {key[1]: delivery.args for key, delivery in obs.outbox.pending.items()}
    (observed,) = signals[OrderSignal.OBSERVED]
    assert observed.what == "Secret team/chat-auth deleted"
    # Nothing but tokens of probed orders is ever held: no Secret data in the informer cache.
    assert all("data" not in s for s in obs.informers[inf.SECRET].cache.values())
