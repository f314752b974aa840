"""The observer's event handling, end to end inside the process: informer items in, deliveries queued
in the outbox out (the outbox is not run: what it holds is what would be sent).

A real Observer, a real Temporal client (never called here) and an ApiClient that is never reached;
the items are what the informer threads deliver (dicts as the API server returns them).
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from kubernetes.client import ApiClient
from temporalio.client import Client

from activities.builders.common import ANNOTATION_RUNTIME_IMAGE, LABEL_MANAGED_BY, LABEL_ORDER, MANAGED_BY
from inference_api.observation import HealthReport, ObservedChange, OrderSignal
from inference_api.payloads import order_workflow_id
from inference_api.preemption import ScalingObservation
from inference_api.settings import HealthSettings, ModuleSettings, ObserverSettings, TemporalSettings
from worker.observer import Observer
from worker.observer import decisions as d
from worker.observer import informer as inf
from worker.observer.informer import Listed, Watched

pytestmark = pytest.mark.temporal

DEBOUNCE = 0.05
SERVING: dict[str, Any] = {
    "phase": "Ready",
    "constraints": {"priorityClassName": "high"},
    "conditions": [{"type": "Ready", "status": "True", "reason": "ProbeSucceeded", "lastTransitionTime": "t"}],
}


def owner(uid: str, name: str = "chat") -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "ai.deckhouse.io/v1alpha1",
            "kind": "InferenceService",
            "name": name,
            "uid": uid,
            "controller": True,
        }
    ]


def sts_owner(uid: str = "sts-u-chat", name: str = "chat") -> list[dict[str, Any]]:
    """A pod's controller reference to its StatefulSet (the StatefulSet controller writes it)."""
    return [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name, "uid": uid, "controller": True}]


def order(name: str, uid: str, generation: int = 1, rv: str = "1", **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ai.deckhouse.io/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": "team", "uid": uid, "generation": generation, "resourceVersion": rv},
        "spec": {"inferenceServiceClassName": "default-llm", "model": {"src": "HuggingFace", "ref": {"name": "a/b"}}},
        "status": status,
    }


def hpa(uid: str, desired: int = 1, rv: str = "1", message: str = "ok") -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {
            "name": "chat",
            "namespace": "team",
            "resourceVersion": rv,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_ORDER: "chat"},
            "ownerReferences": owner(uid),
        },
        "spec": {"minReplicas": 1, "maxReplicas": 3},
        "status": {
            "desiredReplicas": desired,
            "currentReplicas": 1,
            "conditions": [
                {"type": "ScalingLimited", "status": "False", "reason": "DesiredWithinRange", "message": message}
            ],
        },
    }


def pod(name: str, ready: bool, rv: str = "1", owners: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A pod of the order ``chat``'s StatefulSet (``owners``: its ownerReferences, the StatefulSet's by
    default)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "team",
            "uid": f"pod-{name}",
            "resourceVersion": rv,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_ORDER: "chat"},
            "annotations": {ANNOTATION_RUNTIME_IMAGE: "vllm:0.33.0"},
            "ownerReferences": sts_owner() if owners is None else owners,
        },
        "spec": {"nodeName": "gpu-1", "priorityClassName": "high"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def observer(
    client: Client,
    shards: int = 1,
    shard: int = 0,
    probe_annotation: str | None = None,
    secrets: dict[str, dict[str, Any]] | None = None,
    reads: list[str] | None = None,
) -> Observer:
    """An observer with no API server: ``secrets`` (namespace/name -> Secret) stands in for the one
    GET of a Secret it makes, and each read is recorded in ``reads``."""
    settings = ModuleSettings(
        temporal=TemporalSettings(taskQueue="dispatch"),
        health=HealthSettings(intervalSeconds=3600, probeTargetAnnotation=probe_annotation),
        observer=ObserverSettings(debounceSeconds=DEBOUNCE, shards=shards, shard=shard),
    )

    def read_secret(namespace: str, name: str) -> dict[str, Any] | None:
        if reads is not None:
            reads.append(f"{namespace}/{name}")
        return (secrets or {}).get(f"{namespace}/{name}")

    return Observer(ApiClient(), client, settings, resources=[], fingerprint="fp", read_secret=read_secret)


def sent(obs: Observer) -> dict[tuple[str, str], list[Any]]:
    """What the outbox holds, by (order name, signal); taken out (as if sent)."""
    out = {(key[0].split("/")[2], key[1]): delivery.args for key, delivery in obs.outbox.pending.items()}
    obs.outbox.pending.clear()
    return out


async def settle() -> None:
    await asyncio.sleep(DEBOUNCE * 4)


async def test_orders_classes_owned_objects_and_scaling(temporal_client: Client) -> None:
    obs = observer(temporal_client)
    chat = order("chat", "u-chat", constraints={"priorityClassName": "high"})
    obs.handle(Listed(inf.PRIORITY_CLASS, [{"metadata": {"name": "high"}, "value": 1000}]))
    obs.handle(Listed(inf.HPA, [hpa("u-chat")]))
    obs.handle(Listed(inf.STATEFULSET, [statefulset("u-chat", ready=1)]))
    obs.handle(Listed(inf.POD, [pod("chat-0", ready=True)]))
    obs.handle(Listed(inf.CLASS, [{"metadata": {"name": "default-llm", "generation": 1, "resourceVersion": "1"}}]))
    obs.handle(Listed(inf.ORDER, [chat, order("other", "u-other")]))
    assert obs.orders_synced.is_set()
    await settle()
    queued = obs.outbox.pending[(order_workflow_id("team", "chat", "u-chat"), OrderSignal.SPEC_CHANGED)]
    assert queued.start is not None
    assert queued.args == [1]
    first = sent(obs)
    assert first[("chat", OrderSignal.SPEC_CHANGED)] == [1]
    assert first[("other", OrderSignal.SPEC_CHANGED)] == [1]
    # Neither is told of its scaling yet: chat is brought up (its workflow reads the observation only
    # after the load step), other does not autoscale.
    assert ("chat", OrderSignal.SCALING_CHANGED) not in first
    assert ("other", OrderSignal.SCALING_CHANGED) not in first

    # A status write of the order: nothing. A spec edit: its generation.
    obs.handle(
        Watched(
            inf.ORDER,
            d.MODIFIED,
            order("chat", "u-chat", rv="2", phase="Pending", constraints={"priorityClassName": "high"}),
        )
    )
    await settle()
    assert sent(obs) == {}
    obs.handle(
        Watched(
            inf.ORDER,
            d.MODIFIED,
            order("chat", "u-chat", generation=2, rv="3", constraints={"priorityClassName": "high"}),
        )
    )
    await settle()
    assert sent(obs) == {("chat", OrderSignal.SPEC_CHANGED): [2]}

    # The HPA rewrites its message only, or decides something new while the order loads: nothing yet.
    obs.handle(Watched(inf.HPA, d.MODIFIED, hpa("u-chat", rv="2", message="recomputed at 10:01")))
    await settle()
    assert sent(obs) == {}
    obs.handle(Watched(inf.HPA, d.MODIFIED, hpa("u-chat", desired=2, rv="3")))
    await settle()
    assert sent(obs) == {}

    # While the order is brought up (its status does not say it serves), the workflow waits for its
    # replicas itself: a replica turning ready says nothing (the HPA's view still counts it).
    obs.handle(Watched(inf.POD, d.ADDED, pod("chat-2", ready=True)))
    await settle()
    assert sent(obs) == {}
    obs.handle(Watched(inf.POD, d.DELETED, pod("chat-2", ready=True)))
    await settle()
    assert sent(obs) == {}

    # Serving: the newest observation held through the load is told now, once.
    obs.handle(Watched(inf.ORDER, d.MODIFIED, order("chat", "u-chat", generation=2, rv="4", **SERVING)))
    await settle()
    (observation,) = sent(obs)[("chat", OrderSignal.SCALING_CHANGED)]
    assert isinstance(observation, ScalingObservation)
    assert (observation.priority, observation.placedReplicas, observation.maxReplicas) == (1000, 1, 3)
    assert observation.desiredReplicas == 2
    obs.handle(Watched(inf.ORDER, d.MODIFIED, order("chat", "u-chat", generation=2, rv="5", **SERVING)))
    await settle()
    assert sent(obs) == {}

    # A replica turns not ready and another appears ready within one window: one observed signal.
    obs.handle(Watched(inf.POD, d.MODIFIED, pod("chat-0", ready=False, rv="2")))
    obs.handle(Watched(inf.POD, d.ADDED, pod("chat-1", ready=True)))
    await settle()
    out = sent(obs)
    assert out[("chat", OrderSignal.OBSERVED)] == [
        ObservedChange(what="Pod team/chat-0 not ready; Pod team/chat-1 ready", kind="Pod")
    ]
    (observation,) = out[("chat", OrderSignal.SCALING_CHANGED)]
    assert observation.placedReplicas == 2

    # The class: a status write is nothing; a spec edit tells its orders (both).
    obs.handle(
        Watched(
            inf.CLASS,
            d.MODIFIED,
            {
                "metadata": {"name": "default-llm", "generation": 1, "resourceVersion": "2"},
                "status": {"phase": "Ready"},
            },
        )
    )
    await settle()
    assert sent(obs) == {}
    obs.handle(
        Watched(inf.CLASS, d.MODIFIED, {"metadata": {"name": "default-llm", "generation": 2, "resourceVersion": "3"}})
    )
    assert sent(obs) == {("chat", OrderSignal.CLASS_CHANGED): [2], ("other", OrderSignal.CLASS_CHANGED): [2]}

    # The HPA deleted (the order no longer autoscaled, or someone deleted it): observed, and told once
    # that the autoscaler is gone.
    obs.handle(Watched(inf.HPA, d.DELETED, hpa("u-chat", desired=2, rv="4")))
    await settle()
    out = sent(obs)
    assert out[("chat", OrderSignal.OBSERVED)] == [
        ObservedChange(what="HorizontalPodAutoscaler team/chat deleted", kind="HorizontalPodAutoscaler")
    ]
    (observation,) = out[("chat", OrderSignal.SCALING_CHANGED)]
    assert not observation.autoscalerFound
    obs.handle(Watched(inf.POD, d.MODIFIED, pod("chat-0", ready=True, rv="3")))
    await settle()
    assert set(sent(obs)) == {("chat", OrderSignal.OBSERVED)}

    # Deletion: delete with start, once; objects of a deleting order say nothing.
    deleting = order("chat", "u-chat", generation=2, rv="9")
    deleting["metadata"]["deletionTimestamp"] = "2026-11-30T10:00:00Z"
    obs.handle(Watched(inf.ORDER, d.MODIFIED, deleting))
    obs.handle(Watched(inf.POD, d.DELETED, pod("chat-1", ready=True, rv="2")))
    await settle()
    assert sent(obs) == {("chat", OrderSignal.DELETE): []}
    obs.handle(Watched(inf.ORDER, d.DELETED, deleting))
    await settle()
    assert sent(obs) == {}
    assert "u-chat" not in obs.memory
    assert "u-chat" not in obs.uid_key


async def test_pods_labelled_as_the_orders_count_only_along_its_controller_chain(temporal_client: Client) -> None:
    """Pods carrying the order's labels (made by whoever got past the marks guard: a cluster admin, a
    policy not yet bound) are no replicas of it: not placed, not unschedulable, so neither the scaling
    condition nor preemption (which reads these counts) believes them. Only pods whose controller is the
    order's StatefulSet, itself controlled by the order, count."""
    obs = observer(temporal_client)
    chat = order("chat", "u-chat", constraints={"priorityClassName": "high"})
    pending = pod("chat-0", ready=False)
    pending["spec"] = {"priorityClassName": "high"}
    pending["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    }
    forged = {
        # No owner at all; a StatefulSet of the tenant's own, not the order's; a controller reference that
        # names the order's StatefulSet by name with another uid; one naming the order directly.
        "forged-orphan": pod("forged-orphan", ready=True, owners=[]),
        "forged-own-sts": pod("forged-own-sts", ready=True, owners=sts_owner("sts-tenant", "mine")),
        "forged-uid": pod("forged-uid", ready=True, owners=sts_owner("sts-other-uid")),
        "forged-direct": pod("forged-direct", ready=True, owners=owner("u-chat")),
    }
    unschedulable_forgeries = []
    for name in ("forged-pending-orphan", "forged-pending-sts"):
        fake = copy.deepcopy(pending)
        fake["metadata"]["name"] = name
        fake["metadata"]["ownerReferences"] = [] if name.endswith("orphan") else sts_owner("sts-tenant", "mine")
        unschedulable_forgeries.append(fake)
    tenant_sts = statefulset("u-tenant", ready=1, name="mine")
    tenant_sts["metadata"]["uid"] = "sts-tenant"
    obs.handle(Listed(inf.PRIORITY_CLASS, [{"metadata": {"name": "high"}, "value": 1000}]))
    obs.handle(Listed(inf.HPA, [hpa("u-chat")]))
    obs.handle(Listed(inf.STATEFULSET, [statefulset("u-chat", ready=1), tenant_sts]))
    obs.handle(Listed(inf.POD, [pod("chat-1", ready=True), pending, *forged.values(), *unschedulable_forgeries]))
    obs.handle(Listed(inf.ORDER, [chat]))
    await settle()
    (observation,) = sent(obs)[("chat", OrderSignal.SCALING_CHANGED)]
    assert (observation.placedReplicas, observation.unschedulableReplicas) == (1, 1)

    # A forged pod added later changes nothing the order is told.
    obs.handle(Watched(inf.POD, d.ADDED, pod("forged-late", ready=True, owners=sts_owner("sts-tenant", "mine"))))
    await settle()
    assert ("chat", OrderSignal.SCALING_CHANGED) not in sent(obs)

    # Without the order's StatefulSet (deleted, or never made), no pod is the order's (told of a serving
    # order: one brought up would be told once it serves).
    obs.handle(Watched(inf.ORDER, d.MODIFIED, order("chat", "u-chat", rv="2", **SERVING)))
    await settle()
    assert ("chat", OrderSignal.SCALING_CHANGED) not in sent(obs)  # the same as told already
    obs.handle(Watched(inf.STATEFULSET, d.DELETED, statefulset("u-chat", ready=1)))
    await settle()
    (observation,) = sent(obs)[("chat", OrderSignal.SCALING_CHANGED)]
    assert (observation.placedReplicas, observation.unschedulableReplicas) == (0, 0)


async def test_health_flip_is_queued_for_the_order(temporal_client: Client) -> None:
    # The informer holds the Secret's metadata only (slim_metadata); the token is read by name.
    full = {
        "metadata": {"name": "chat-auth", "namespace": "team", "resourceVersion": "1"},
        "data": {"token": "czNjcjN0LXZhbHVl"},
    }
    reads: list[str] = []
    obs = observer(temporal_client, probe_annotation="probe", secrets={"team/chat-auth": full}, reads=reads)
    serving = order(
        "chat",
        "u-chat",
        phase="Ready",
        authSecretName="chat-auth",
        conditions=[{"type": "Ready", "status": "True", "reason": "ServiceReady", "lastTransitionTime": "t"}],
    )
    secret = inf.slim_metadata(
        {
            "metadata": {
                "name": "chat-auth",
                "namespace": "team",
                "resourceVersion": "1",
                "ownerReferences": owner("u-chat"),
            }
        },
        inf.SECRET,
    )
    service = {
        "metadata": {
            "name": "chat",
            "namespace": "team",
            "resourceVersion": "1",
            "ownerReferences": owner("u-chat"),
            "annotations": {"probe": "http://127.0.0.1:1"},
        }
    }
    obs.handle(Listed(inf.SECRET, [secret]))
    obs.handle(Listed(inf.SERVICE, [service]))
    obs.handle(Listed(inf.ORDER, [serving]))
    (candidate,) = list(obs.probe_candidates())
    assert candidate[1] == d.Serving.HEALTHY
    spec = await obs.probe_spec(candidate[0])
    assert (spec.target, spec.token, spec.served_name) == ("http://127.0.0.1:1", "s3cr3t-value", None)
    assert "s3cr3t" not in repr(spec)
    # Read once per resourceVersion: the next probe costs no GET.
    assert (await obs.probe_spec(candidate[0])).token == "s3cr3t-value"
    assert reads == ["team/chat-auth"]
    sent(obs)
    obs.report_health(candidate[0], HealthReport(healthy=False, detail="GET /v1/models: HTTP 503", failures=3))
    assert sent(obs) == {
        ("chat", OrderSignal.HEALTH_CHANGED): [
            HealthReport(healthy=False, detail="GET /v1/models: HTTP 503", failures=3)
        ]
    }


async def test_an_observer_handles_only_its_shard(temporal_client: Client) -> None:
    orders = [order(f"o{i}", f"uid-{i}") for i in range(30)]
    seen: list[set[str]] = []
    for shard in range(3):
        obs = observer(temporal_client, shards=3, shard=shard)
        obs.handle(Listed(inf.ORDER, copy.deepcopy(orders)))
        seen.append({name for name, _ in sent(obs)})
        assert {r.ref.uid for r in obs.listed_orders()} == {
            f"uid-{i}" for i in range(30) if d.in_shard(f"uid-{i}", 3, shard)
        }
    assert set.union(*seen) == {f"o{i}" for i in range(30)}
    assert sum(len(s) for s in seen) == 30


def statefulset(uid: str, ready: int, rv: str = "1", name: str = "chat") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": name,
            "namespace": "team",
            "uid": f"sts-{uid}",
            "resourceVersion": rv,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_ORDER: name},
            "ownerReferences": owner(uid, name),
        },
        "spec": {"replicas": 1},
        "status": {"replicas": 1, "readyReplicas": ready},
    }


async def test_a_loading_orders_first_ready_replica_is_told_at_once(temporal_client: Client) -> None:
    """The workflow of a loading order waits for ``replica_ready`` (no activity does): the observer
    tells it when the StatefulSet's first replica gets ready — and after a restart, from the listings,
    whichever of the order and its StatefulSet is listed first."""
    obs = observer(temporal_client)
    loading: dict[str, Any] = {"phase": "Pending", "conditions": [{"type": "WorkloadReady", "status": "False"}]}
    obs.handle(Listed(inf.STATEFULSET, []))
    obs.handle(Listed(inf.ORDER, [order("chat", "u-chat", **loading)]))
    await settle()
    sent(obs)
    obs.handle(Watched(inf.STATEFULSET, d.ADDED, statefulset("u-chat", ready=0)))
    obs.handle(Watched(inf.STATEFULSET, d.MODIFIED, statefulset("u-chat", ready=0, rv="2")))
    await settle()
    assert sent(obs) == {}
    obs.handle(Watched(inf.STATEFULSET, d.MODIFIED, statefulset("u-chat", ready=1, rv="3")))
    # Not debounced: queued with the event.
    assert sent(obs) == {("chat", OrderSignal.REPLICA_READY): [1]}
    obs.handle(Watched(inf.STATEFULSET, d.MODIFIED, statefulset("u-chat", ready=2, rv="4")))
    await settle()
    assert sent(obs) == {}  # only the first ready replica is news to a loading order

    # Serving: replica counts are an observed change again, never replica_ready.
    obs.handle(Watched(inf.ORDER, d.MODIFIED, order("chat", "u-chat", rv="2", **SERVING)))
    obs.handle(Watched(inf.STATEFULSET, d.MODIFIED, statefulset("u-chat", ready=1, rv="5")))
    await settle()
    assert set(sent(obs)) == {("chat", OrderSignal.OBSERVED)}

    # A restart: the StatefulSet listed first (no order known yet), then the order.
    again = observer(temporal_client)
    again.handle(Listed(inf.STATEFULSET, [statefulset("u-chat", ready=1)]))
    again.handle(Listed(inf.ORDER, [order("chat", "u-chat", **loading)]))
    assert sent(again)[("chat", OrderSignal.REPLICA_READY)] == [1]
    # The order listed first, then the StatefulSet.
    third = observer(temporal_client)
    third.handle(Listed(inf.ORDER, [order("chat", "u-chat", **loading)]))
    third.handle(Listed(inf.STATEFULSET, [statefulset("u-chat", ready=1)]))
    assert sent(third)[("chat", OrderSignal.REPLICA_READY)] == [1]


async def test_a_deleted_network_policy_is_observed_like_the_other_owned_objects(temporal_client: Client) -> None:
    obs = observer(temporal_client)
    policy = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": "chat",
            "namespace": "team",
            "resourceVersion": "1",
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_ORDER: "chat"},
            "ownerReferences": owner("u-chat"),
        },
        "spec": {"podSelector": {}},
    }
    obs.handle(Listed(inf.ORDER, [order("chat", "u-chat", **SERVING)]))
    obs.handle(Listed(inf.NETWORK_POLICY, [policy]))
    await settle()
    sent(obs)
    obs.handle(Watched(inf.NETWORK_POLICY, d.DELETED, policy))
    await settle()
    assert sent(obs) == {
        ("chat", OrderSignal.OBSERVED): [ObservedChange(what="NetworkPolicy team/chat deleted", kind="NetworkPolicy")]
    }
    assert inf.NETWORK_POLICY in {r.kind for r in inf.resources(ApiClient(), catalog=False)}
