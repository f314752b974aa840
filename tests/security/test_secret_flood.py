"""A tenant's Secrets, labelled as the module's, reach the observer not at all; an order's own by name.

Anyone who may create Secrets in a namespace may put the module's labels on them. Before, the
observer's Secret informer listed and watched every such Secret cluster-wide (their metadata only:
tests of that and the memory numbers are in the history of this file and benchmarks/secret_flood.py),
and its ClusterRole granted list and watch of every Secret, whose data a stolen watcher token could
read. Now (issue 33) no module identity lists or watches Secrets: the observer reads the Secrets an
order owns by name (``Observer.check_secret``). Against the real API server: a flood of labelled
Secrets is never read, the order's own Secret is read by name only, a tenant's edit of its data
arrives as drift by the tenant's field manager, a deletion as the owned Secret deleted, and the
token the probes send follows.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from kubernetes.client import ApiClient, CoreV1Api, CustomObjectsApi
from temporalio.client import Client

from activities.builders.common import LABEL_MANAGED_BY, LABEL_ORDER, MANAGED_BY
from devstack.cluster.launcher import LocalCluster
from inference_api.settings import HealthSettings, ModuleSettings, ObserverSettings, TemporalSettings
from inference_api.types import GROUP, ORDERS, VERSION
from tests.observer.signals import observed
from worker.observer import Observer
from worker.observer import informer as inf
from worker.observer.decisions import FIELD_MANAGER
from worker.observer.informer import Listed
from worker.observer.observer import secret_reader

pytestmark = pytest.mark.cluster


def _order(namespace: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "ai.deckhouse.io/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": "chat", "namespace": namespace, "uid": uid, "generation": 1, "resourceVersion": "1"},
        "spec": SPEC,
        "status": {
            "phase": "Ready",
            "observedGeneration": 1,
            "authSecretName": "chat-auth",
            "conditions": [{"type": "Ready", "status": "True", "reason": "ServiceReady", "lastTransitionTime": "t"}],
        },
    }


SPEC = {"inferenceServiceClassName": "default-llm", "model": {"src": "HuggingFace", "ref": {"name": "org/m"}}}


async def test_labelled_secrets_are_never_read_and_the_orders_own_is_read_by_name(
    local_cluster: LocalCluster, kube_admin: ApiClient, namespace: str, temporal_client: Client
) -> None:
    core = CoreV1Api(kube_admin)
    # A real order to own the Secret (the garbage collector deletes what an absent owner owns).
    made = CustomObjectsApi(kube_admin).create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        ORDERS,
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService", "metadata": {"name": "chat"}, "spec": SPEC},
    )
    uid = made["metadata"]["uid"]
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_ORDER: "chat"}
    owner = {
        "apiVersion": "ai.deckhouse.io/v1alpha1",
        "kind": "InferenceService",
        "name": "chat",
        "uid": uid,
        "controller": True,
    }
    core.create_namespaced_secret(
        namespace,
        {
            "metadata": {"name": "chat-auth", "labels": labels, "ownerReferences": [owner]},
            "data": {"token": base64.b64encode(b"one").decode()},
        },
        field_manager=FIELD_MANAGER,
    )
    # A tenant's Secrets with the module's labels (the flood of before, in small).
    for i in range(20):
        core.create_namespaced_secret(
            namespace,
            {"metadata": {"name": f"flood-{i:02d}", "labels": labels}, "data": {"blob": "eA=="}},
        )
    read = secret_reader(kube_admin)
    reads: list[str] = []

    def counted(ns: str, name: str) -> dict[str, Any] | None:
        reads.append(f"{ns}/{name}")
        return read(ns, name)

    # The production observer informs on no Secret: the flood is never listed, watched or cached.
    assert inf.SECRET not in {r.kind for r in inf.resources(kube_admin, catalog=True)}
    settings = ModuleSettings(
        temporal=TemporalSettings(taskQueue="secret-by-name"),
        health=HealthSettings(intervalSeconds=3600),
        # No read budget: with a period of 0, every probe reads again.
        observer=ObserverSettings(debounceSeconds=0.01, secretReadsPerSecond=0),
    )
    obs = Observer(kube_admin, temporal_client, settings, resources=[], fingerprint="fp", read_secret=counted)
    obs.secret_check_seconds = 0  # every probe reads again (the period is 30 s in production)
    obs.handle(Listed(inf.ORDER, [_order(namespace, uid)]))
    ((ref, _),) = list(obs.probe_candidates())
    assert (await obs.probe_spec(ref)).token == "one"
    seen = obs.secrets[f"{namespace}/chat-auth"]
    assert seen.metadata is not None
    assert "data" not in seen.metadata
    assert observed(obs, uid) == []
    # The tenant rewrites the token: the probes send the new one, the workflow hears who wrote it.
    with local_cluster.api_client("ns-user") as tenant:
        CoreV1Api(tenant).patch_namespaced_secret(
            "chat-auth", namespace, {"data": {"token": base64.b64encode(b"two").decode()}}, field_manager="tenant"
        )
    assert (await obs.probe_spec(ref)).token == "two"
    assert observed(obs, uid) == [f"Secret {namespace}/chat-auth changed by tenant"]
    # Deleted: the GET's 404 is the owned Secret deleted, told once; no token is sent.
    core.delete_namespaced_secret("chat-auth", namespace)
    assert (await obs.probe_spec(ref)).token is None
    assert observed(obs, uid) == [f"Secret {namespace}/chat-auth deleted"]
    assert (await obs.probe_spec(ref)).token is None
    assert observed(obs, uid) == []
    # Only the order's own Secret was ever read, and only by name.
    assert set(reads) == {f"{namespace}/chat-auth"}
