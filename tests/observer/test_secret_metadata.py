"""The observer's Secrets: no informer, the Secrets an order owns read by name, metadata kept slim.

Pure logic (no API server): the observer informs on no Secret (issue 33), what ``slim_metadata``
keeps of a Secret, that the drift decisions still tell who changed a Secret's data, and the observer's
by-name reads (a token cached for ``secret_check_seconds``, a rotation read after that, a 404 told
as the owned Secret deleted). The API server side (the watcher's own token refused any list or
watch, the reads by name) is tests/security/test_secret_flood.py and tests/rbac/test_roles.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes.client import ApiClient
from temporalio.client import Client

from activities.builders.common import LABEL_MANAGED_BY, LABEL_ORDER, MANAGED_BY
from inference_api.settings import HealthSettings, ModuleSettings, ObserverSettings, TemporalSettings
from tests.observer import signals
from worker.observer import Observer
from worker.observer import decisions as d
from worker.observer import informer as inf
from worker.observer import observer as observer_module
from worker.observer.decisions import FIELD_MANAGER
from worker.observer.informer import PARTIAL_METADATA, Listed, slim_metadata

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


def test_the_observer_informs_on_no_secret_and_no_resource_is_metadata_only() -> None:
    """Issue 33: no module identity lists or watches Secrets, so the observer informs on none (the
    Secrets an order owns are read by name, ``Observer.check_secret``)."""
    resources = inf.resources(ApiClient(), catalog=True)
    assert inf.SECRET not in {r.kind for r in resources}
    assert inf.SECRET not in inf.OWNED_KINDS
    assert not [r.kind for r in resources if r.metadata_only]
    (service,) = [r for r in resources if r.kind == inf.SERVICE]
    assert "_headers" not in inf._selector(service)
    # What the observer keeps of a Secret read by name is still its slim metadata.
    slim = slim_metadata(partial("1", [(FIELD_MANAGER, "t")]), inf.SECRET)
    assert "data" not in slim
    assert PARTIAL_METADATA.startswith("application/json;as=PartialObjectMetadata")


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


def full_secret(rv: str, token_b64: str, writers: list[tuple[str, str]] | None = None, **extra: Any) -> dict[str, Any]:
    """A Secret as a GET by name returns it: the metadata of ``partial`` and the data."""
    metadata = partial(rv, writers or [(FIELD_MANAGER, "t0")], **extra)["metadata"]
    return {"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "data": {"token": token_b64}}


class Clock:
    """Monotonic time the test moves (``time.monotonic`` as the observer reads it)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 1000.0
        monkeypatch.setattr(observer_module.time, "monotonic", lambda: self.now)


def observed(obs: Observer) -> list[str]:
    return signals.observed(obs, "u-chat")


def secret_observer(
    client: Client, read_secret: observer_module.SecretReader, period: float, **observer: Any
) -> Observer:
    """An observer with no informers that reads Secrets through ``read_secret``, every ``period``
    seconds (``observer``: more of its settings)."""
    settings = ModuleSettings(
        temporal=TemporalSettings(taskQueue="secret-metadata"),
        health=HealthSettings(intervalSeconds=3600),
        observer=ObserverSettings(debounceSeconds=0.01, **observer),
    )
    return Observer(
        ApiClient(),
        client,
        settings,
        resources=[],
        fingerprint="fp",
        read_secret=read_secret,
        secret_check_seconds=period,
    )


async def loop_until(obs: Observer, done: Callable[[], bool], tries: int) -> None:
    """The observer's secret loop, run until ``done`` (looked at every 20 ms, ``tries`` times)."""
    loop = asyncio.create_task(obs.secret_loop())
    try:
        for _ in range(tries):
            if done():
                break
            await asyncio.sleep(0.02)
    finally:
        loop.cancel()


async def test_the_token_is_read_by_name_at_most_once_a_period_and_a_deletion_or_edit_is_told(
    temporal_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No informer: the probe's token comes from a GET by the order's own Secret name, cached for
    ``secret_check_seconds``; a rotation reaches the probes after that; a GET answering 404 is the
    owned Secret deleted (the workflow told, as the informer's DELETED did), once; someone else's edit
    is drift by its writer."""
    clock = Clock(monkeypatch)
    secrets: dict[str, dict[str, Any]] = {"team/chat-auth": full_secret("1", "b25l")}  # "one"
    reads: list[str] = []

    def read_secret(namespace: str, name: str) -> dict[str, Any] | None:
        reads.append(f"{namespace}/{name}")
        return secrets.get(f"{namespace}/{name}")

    obs = secret_observer(temporal_client, read_secret, period=30)
    obs.handle(Listed(inf.ORDER, [serving_order()]))
    ((ref, _),) = list(obs.probe_candidates())
    assert obs.owned_secret_names(serving_order()) == ["chat-auth"]
    assert (await obs.probe_spec(ref)).token == "one"
    clock.now += 10
    assert (await obs.probe_spec(ref)).token == "one"
    assert reads == ["team/chat-auth"]
    # Nothing of the data but the token is kept, and the token never shows.
    assert "data" not in (obs.secrets["team/chat-auth"].metadata or {})
    assert "one" not in repr(obs.secrets)
    # Rotated by the module (its own field manager): read again once the period is over, no drift.
    secrets["team/chat-auth"] = full_secret("2", "dHdv", [(FIELD_MANAGER, "t2")])  # "two"
    assert (await obs.probe_spec(ref)).token == "one"
    clock.now += 30
    assert (await obs.probe_spec(ref)).token == "two"
    assert reads == ["team/chat-auth"] * 2
    assert observed(obs) == []
    # Edited by the tenant: the token follows, and the workflow hears who wrote it.
    secrets["team/chat-auth"] = full_secret("3", "", [(FIELD_MANAGER, "t2"), ("kubectl-edit", "t3")])
    clock.now += 30
    assert (await obs.probe_spec(ref)).token is None
    assert observed(obs) == ["Secret team/chat-auth changed by kubectl-edit"]
    # Deleted: a 404 on the GET, told once (not again while it stays missing), and no token.
    del secrets["team/chat-auth"]
    clock.now += 30
    assert (await obs.probe_spec(ref)).token is None
    assert observed(obs) == ["Secret team/chat-auth deleted"]
    clock.now += 30
    assert (await obs.probe_spec(ref)).token is None
    assert observed(obs) == []
    # Made again by the module's reconcile: served again, nothing told.
    secrets["team/chat-auth"] = full_secret("5", "dGhyZWU=", [(FIELD_MANAGER, "t5")], uid="s-2")  # "three"
    clock.now += 30
    assert (await obs.probe_spec(ref)).token == "three"
    assert observed(obs) == []
    # A Secret of that name someone else made (no ownerReference to the order): nothing believed of
    # its metadata, nothing told (the worker's apply refuses it); its token read as the worker's is.
    secrets["team/chat-auth"] = full_secret("6", "Zm9yZ2Vk", ownerReferences=[])  # "forged"
    clock.now += 30
    assert (await obs.probe_spec(ref)).token == "forged"
    assert obs.secrets["team/chat-auth"].metadata is None
    assert observed(obs) == []


async def test_a_missing_secret_is_told_on_the_first_look_and_gone_orders_are_forgotten(
    temporal_client: Client,
) -> None:
    """A Secret deleted while no observer ran is told on the first look (level-triggered); the
    periodic check reads only the Secrets the observer's orders own, by name, and forgets the rest."""
    reads: list[str] = []

    def read_secret(namespace: str, name: str) -> dict[str, Any] | None:
        reads.append(f"{namespace}/{name}")
        return None

    obs = secret_observer(temporal_client, read_secret, period=0.05)
    other = serving_order()
    other["metadata"] = {**other["metadata"], "name": "plain", "uid": "u-plain"}
    other["status"] = {k: v for k, v in other["status"].items() if k != "authSecretName"}
    obs.handle(Listed(inf.ORDER, [serving_order(), other]))
    await loop_until(obs, lambda: len(reads) >= 2, tries=100)
    # Only the Token order's own Secret, by name: nothing for the order without a token.
    assert set(reads) == {"team/chat-auth"}
    assert observed(obs) == ["Secret team/chat-auth deleted"]
    obs.handle(Listed(inf.ORDER, [other]))
    loop = asyncio.create_task(obs.secret_loop())
    await asyncio.sleep(0.1)
    loop.cancel()
    assert obs.secrets == {}


async def test_the_secret_reads_keep_within_the_budget_and_the_period_grows_past_it(
    temporal_client: Client,
) -> None:
    """``observer.secretReadsPerSecond``: the loop reads one Secret at a time no faster than the
    budget, and with more Secrets than a period's budget the period grows (20 Secrets at 100 a
    second: 0.2 s, not the 0.05 s asked)."""
    reads: list[tuple[float, str]] = []

    def read_secret(namespace: str, name: str) -> dict[str, Any] | None:
        reads.append((time.monotonic(), f"{namespace}/{name}"))
        return full_secret("1", "b25l")

    rate = 100.0
    obs = secret_observer(temporal_client, read_secret, period=0.05, secretReadsPerSecond=rate)
    orders = []
    for i in range(20):
        order = serving_order()
        order["metadata"] = {**order["metadata"], "name": f"chat-{i}", "uid": f"u-{i}"}
        orders.append(order)
    obs.handle(Listed(inf.ORDER, orders))
    await loop_until(obs, lambda: len(reads) >= 50, tries=200)
    assert len(reads) >= 50, len(reads)
    assert obs.secret_max_age() == pytest.approx(20 / rate)
    # Never faster than the budget: n reads span at least (n - 1) / rate seconds, within a round too.
    first_round = reads[19][0] - reads[0][0]
    assert first_round >= 19 / rate * 0.95, first_round
    span = reads[49][0] - reads[0][0]
    assert span >= 49 / rate * 0.95, span
    # Every Secret read in the first round, each once, before any is read again.
    assert sorted(name for _, name in reads[:20]) == sorted(f"team/chat-{i}-auth" for i in range(20))
