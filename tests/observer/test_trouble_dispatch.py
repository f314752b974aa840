"""Replica troubles through the observer's event handling: Pod, Node, StatefulSet and FailedCreate
Event deliveries in, one ``replica_trouble`` signal per change of what is wrong out (queued in the
outbox, not sent). The decisions themselves: tests/observer/test_troubles.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from temporalio.client import Client

from inference_api.reasons import Reason
from tests.observer.test_dispatch import SERVING, observer, order, pod, sent, settle, statefulset, sts_owner
from worker.observer import decisions as d
from worker.observer import informer as inf
from worker.observer.informer import Listed, Watched
from workflows.order_state import REPLICA_TROUBLE, ReplicaTrouble

pytestmark = pytest.mark.temporal


def node(name: str, ready: str = "True", rv: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "resourceVersion": rv},
        "status": {"conditions": [{"type": "Ready", "status": ready, "message": f"Ready={ready}"}]},
    }


def with_runtime(obj: dict[str, Any], state: dict[str, Any], rv: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["resourceVersion"] = rv
    out["status"]["containerStatuses"] = [{"name": "runtime", "ready": False, "restartCount": 0, "state": state}]
    return out


def troubles(obs: Any) -> list[ReplicaTrouble]:
    return [args[0] for (name, signal), args in sent(obs).items() if signal == REPLICA_TROUBLE]


async def test_an_image_pull_failure_is_told_once_and_its_end_once(temporal_client: Client) -> None:
    obs = observer(temporal_client)
    obs.handle(Listed(inf.NODE, [node("gpu-1")]))
    obs.handle(Listed(inf.STATEFULSET, [statefulset("u-chat", ready=1)]))
    obs.handle(Listed(inf.ORDER, [order("chat", "u-chat", **SERVING)]))
    obs.handle(Listed(inf.POD, [pod("chat-0", ready=True)]))
    await settle()
    assert troubles(obs) == []
    failing = with_runtime(
        pod("chat-0", ready=False), {"waiting": {"reason": "ImagePullBackOff", "message": "nope"}}, "2"
    )
    obs.handle(Watched(inf.POD, d.MODIFIED, failing))
    await settle()
    [told] = troubles(obs)
    assert told.reason == Reason.IMAGE_PULL_FAILED
    assert "nope" in told.message
    # The same again (another resourceVersion, nothing new): not told again.
    again = copy.deepcopy(failing)
    again["metadata"]["resourceVersion"] = "3"
    obs.handle(Watched(inf.POD, d.MODIFIED, again))
    await settle()
    assert troubles(obs) == []
    obs.handle(Watched(inf.POD, d.MODIFIED, pod("chat-0", ready=True, rv="4")))
    await settle()
    assert troubles(obs) == [ReplicaTrouble()]


async def test_a_node_lost_under_an_orders_pod_is_told(temporal_client: Client) -> None:
    obs = observer(temporal_client)
    obs.handle(Listed(inf.NODE, [node("gpu-1"), node("gpu-2")]))
    obs.handle(Listed(inf.STATEFULSET, [statefulset("u-chat", ready=1)]))
    obs.handle(Listed(inf.ORDER, [order("chat", "u-chat", **SERVING)]))
    obs.handle(Listed(inf.POD, [pod("chat-0", ready=True)]))
    await settle()
    sent(obs)
    # Another node's change is nobody's business here.
    obs.handle(Watched(inf.NODE, d.MODIFIED, node("gpu-2", ready="Unknown", rv="2")))
    await settle()
    assert troubles(obs) == []
    obs.handle(Watched(inf.NODE, d.MODIFIED, node("gpu-1", ready="Unknown", rv="2")))
    await settle()
    [told] = troubles(obs)
    assert told.reason == Reason.NODE_LOST
    assert told.subject == "gpu-1"
    assert told.action == "Replan"
    obs.handle(Watched(inf.NODE, d.DELETED, node("gpu-1", ready="Unknown", rv="3")))
    await settle()
    [told] = troubles(obs)
    assert told.reason == Reason.NODE_LOST
    assert "gone" in told.message


async def test_a_quota_refusing_the_pods_is_told_from_the_failed_create_event(temporal_client: Client) -> None:
    obs = observer(temporal_client)
    loading: dict[str, Any] = {"phase": "Pending", "conditions": [{"type": "WorkloadReady", "status": "False"}]}
    obs.handle(Listed(inf.ORDER, [order("chat", "u-chat", **loading)]))
    refused = statefulset("u-chat", ready=0)
    refused["status"]["replicas"] = 0
    obs.handle(Listed(inf.STATEFULSET, [refused]))
    obs.handle(Listed(inf.EVENT, []))
    await settle()
    assert troubles(obs) == []
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "chat.17", "namespace": "team", "resourceVersion": "1"},
        "involvedObject": {"kind": "StatefulSet", "namespace": "team", "name": "chat"},
        "reason": "FailedCreate",
        "message": 'create Pod chat-0 in StatefulSet chat failed error: pods "chat-0" is forbidden: exceeded quota: q',
        "lastTimestamp": "2026-12-01T10:00:00Z",
    }
    obs.handle(Watched(inf.EVENT, d.ADDED, event))
    await settle()
    [told] = troubles(obs)
    assert told.reason == Reason.QUOTA_EXCEEDED
    assert "exceeded quota: q" in told.message
    # The quota raised: the pod is made, the StatefulSet says so; the trouble is over.
    made = statefulset("u-chat", ready=0, rv="2")
    obs.handle(Watched(inf.STATEFULSET, d.MODIFIED, made))
    await settle()
    assert troubles(obs) == [ReplicaTrouble()]


def test_the_observer_informs_on_nodes_and_failed_create_events_only() -> None:
    from kubernetes.client import ApiClient

    kinds = {r.kind: r for r in inf.resources(ApiClient(), catalog=False)}
    assert inf.NODE in kinds
    assert kinds[inf.EVENT].field_selector == "involvedObject.kind=StatefulSet,reason=FailedCreate"


async def test_a_node_gone_before_the_nodes_are_listed_is_told_once_they_are(temporal_client: Client) -> None:
    """After a restart the pods may be listed before the nodes: a node deleted meanwhile is found
    missing from the nodes' first listing."""
    obs = observer(temporal_client)
    obs.handle(Listed(inf.STATEFULSET, [statefulset("u-chat", ready=1)]))
    obs.handle(Listed(inf.ORDER, [order("chat", "u-chat", **SERVING)]))
    obs.handle(Listed(inf.POD, [pod("chat-0", ready=True)]))
    await settle()
    assert troubles(obs) == []  # no nodes listed yet: no node verdict
    obs.handle(Listed(inf.NODE, [node("gpu-2")]))
    await settle()
    [told] = troubles(obs)
    assert told.reason == Reason.NODE_LOST
    assert told.subject == "gpu-1"


async def test_a_tenants_pod_with_the_orders_label_is_no_trouble_of_the_order(temporal_client: Client) -> None:
    """Before, a failing pod a tenant labelled as the order's (its own StatefulSet's, or none)
    was told to the order as its trouble: only pods along the order's controller chain count."""
    obs = observer(temporal_client)
    obs.handle(Listed(inf.NODE, [node("gpu-1")]))
    obs.handle(Listed(inf.STATEFULSET, [statefulset("u-chat", ready=1)]))
    obs.handle(Listed(inf.ORDER, [order("chat", "u-chat", **SERVING)]))
    crash = {"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}}
    forged = [
        with_runtime(pod("decoy-a", ready=False, owners=sts_owner("sts-tenant", "mine")), crash, "1"),
        with_runtime(pod("decoy-b", ready=False, owners=[]), crash, "1"),
        with_runtime(pod("decoy-c", ready=False, owners=sts_owner("sts-u-other", "chat")), crash, "1"),
    ]
    obs.handle(Listed(inf.POD, [pod("chat-0", ready=True), *forged]))
    await settle()
    assert troubles(obs) == []
    # The order's own pod in the same state is its trouble.
    obs.handle(Watched(inf.POD, d.MODIFIED, with_runtime(pod("chat-0", ready=False), crash, "2")))
    await settle()
    [told] = troubles(obs)
    assert told.subject == "team/chat-0"
