"""An order's own pods on a lost node are force-deleted by the observer (issue 23: a node NotReady for
good): pure decisions (which pods, what an answer means, the message) and the observer's acting on
them, bounded and once per pod. The end-to-end case on the local control plane:
tests/e2e/test_kubelet_failures.py::test_a_node_that_stays_not_ready_loses_its_pods_and_the_order_recovers_by_itself.
"""

from __future__ import annotations

import asyncio
import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.client import Client

from inference_api.reasons import Reason
from inference_api.settings import ModuleSettings, ObserverSettings
from worker.observer import decisions as d
from workflows.order_state import ReplicaTrouble, TroubleAction

SINCE = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
GRACE = 300.0
NODE = "gpu-1"
ORDER_UID = "u-chat"
STS_UID = "u-sts"


def at(seconds: float, grace: float = GRACE) -> d.NodeGrace:
    return d.NodeGrace(now=SINCE + timedelta(seconds=seconds), seconds=grace)


def the_order(uid: str = ORDER_UID, namespace: str = "team", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "chat", "namespace": namespace, "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T10:00:00Z"
    return {"metadata": meta}


def statefulset(owner_uid: str = ORDER_UID, uid: str = STS_UID, namespace: str = "team") -> dict[str, Any]:
    return {
        "metadata": {
            "name": "chat",
            "namespace": namespace,
            "uid": uid,
            "ownerReferences": [{"kind": "InferenceService", "uid": owner_uid, "controller": True}],
        }
    }


def replica(
    name: str = "chat-0",
    node: str | None = NODE,
    sts_uid: str = STS_UID,
    namespace: str = "team",
    uid: str = "p-1",
    terminating: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid,
        "ownerReferences": [{"kind": "StatefulSet", "uid": sts_uid, "controller": True}],
    }
    if terminating:
        meta["deletionTimestamp"] = "2026-12-01T10:05:00Z"
    return {"metadata": meta, "spec": {"nodeName": node} if node else {}}


def node(ready: str = "False", since: str | None = "2026-12-01T10:00:00Z", name: str = NODE) -> dict[str, Any]:
    condition: dict[str, Any] = {"type": "Ready", "status": ready, "message": "PLEG is not healthy"}
    if since is not None:
        condition["lastTransitionTime"] = since
    return {"metadata": {"name": name}, "status": {"conditions": [condition]}}


def lost(
    pods: list[dict[str, Any]] | None = None,
    nodes: dict[str, Any] | None = None,
    grace: d.NodeGrace | None = None,
    order: dict[str, Any] | None = None,
    sts: dict[str, Any] | None = None,
) -> list[d.LostPod]:
    return d.pods_on_lost_nodes(
        order if order is not None else the_order(),
        sts if sts is not None else statefulset(),
        pods if pods is not None else [replica()],
        nodes if nodes is not None else {NODE: node()},
        grace or at(GRACE + 1),
    )


# ------------------------------------------------------------------------ which pods


def test_a_pod_on_a_node_not_ready_past_its_grace_is_force_deleted() -> None:
    [found] = lost()
    assert (found.namespace, found.name, found.uid, found.node) == ("team", "chat-0", "p-1", NODE)
    assert found.note() == (
        f"pod team/chat-0 force-deleted from node {NODE}, not Ready since 2026-12-01T10:00:00Z, past its 300 s grace"
    )


@pytest.mark.parametrize("elapsed", [0.0, 1.0, GRACE - 0.001])
def test_within_the_grace_nothing_is_deleted(elapsed: float) -> None:
    assert lost(grace=at(elapsed)) == []


def test_the_grace_ends_exactly_when_the_order_hears_node_lost() -> None:
    """Deleted from the same moment the trouble becomes NodeLost (the same rule), never before."""
    for elapsed in (GRACE - 1, GRACE, GRACE + 1):
        trouble = d.pod_trouble(replica(), {NODE: node()}, at(elapsed))
        assert trouble is not None
        assert (trouble.reason == Reason.NODE_LOST) == bool(lost(grace=at(elapsed)))


def test_a_ready_node_keeps_its_pods() -> None:
    assert lost(nodes={NODE: node(ready="True")}) == []


def test_a_deleted_node_loses_its_pods_at_once() -> None:
    [found] = lost(nodes={"other": node(name="other", ready="True")}, grace=at(0))
    assert "gone (deleted from the cluster)" in found.note()


@pytest.mark.parametrize("grace", [0.0, GRACE])
def test_a_node_that_cannot_say_since_when_or_no_grace_is_lost_at_once(grace: float) -> None:
    since = None if grace else "2026-12-01T10:00:00Z"
    [found] = lost(nodes={NODE: node(since=since)}, grace=at(0, grace))
    assert found.why.startswith("not Ready")


def test_a_pod_stuck_terminating_is_force_deleted_too() -> None:
    """The case that strands the replica: its graceful delete waits for a kubelet that is gone."""
    assert [p.name for p in lost(pods=[replica(terminating=True)])] == ["chat-0"]


def test_only_the_orders_own_pods_bound_to_the_lost_node() -> None:
    pods = [
        replica("chat-0", uid="p-0"),
        replica("chat-1", node="gpu-2", uid="p-1"),  # on a Ready node
        replica("chat-2", node=None, uid="p-2"),  # not bound (pinned to the node, Pending): nothing to free
        replica("chat-3", sts_uid="someone-elses", uid="p-3"),  # another StatefulSet's (a decoy with our labels)
        replica("chat-4", namespace="elsewhere", uid="p-4"),  # another namespace
    ]
    nodes = {NODE: node(), "gpu-2": node(name="gpu-2", ready="True")}
    assert [p.name for p in lost(pods=pods, nodes=nodes)] == ["chat-0"]


@pytest.mark.parametrize(
    "case",
    [
        {"sts": statefulset(owner_uid="not-the-order")},  # a StatefulSet the order does not own
        {"sts": statefulset(namespace="elsewhere")},
        {"order": the_order(deleting=True)},  # its delete step removes everything
    ],
)
def test_nothing_without_the_orders_own_statefulset_or_while_it_is_deleted(case: dict[str, Any]) -> None:
    assert lost(**case) == []


def test_nothing_before_the_nodes_are_listed() -> None:
    """A node missing from a cache not synced yet is not a deleted node."""
    assert d.pods_on_lost_nodes(the_order(), statefulset(), [replica()], None, at(GRACE + 1)) == []
    assert d.pods_on_lost_nodes(the_order(), None, [replica()], {NODE: node()}, at(GRACE + 1)) == []


# ------------------------------------------------------------------- what an answer means


def _lost_pod(uid: str = "p-1") -> d.LostPod:
    return d.LostPod(namespace="team", name="chat-0", uid=uid, node=NODE, why="not Ready")


def test_a_delete_done_is_never_asked_again_and_the_message_says_it() -> None:
    memory = d.ReleaseMemory()
    assert memory.may_try("p-1")
    assert memory.outcome(_lost_pod(), 200) == d.ReleaseOutcome.DELETED
    assert not memory.may_try("p-1")
    assert memory.notes == {NODE: f"pod team/chat-0 force-deleted from node {NODE}, not Ready"}


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (404, d.ReleaseOutcome.GONE),  # gone already (the kubelet came back, someone else)
        (409, d.ReleaseOutcome.GONE),  # preconditions.uid: another pod has the name now
        (403, d.ReleaseOutcome.REFUSED),  # RBAC: the same answer next time
        (422, d.ReleaseOutcome.REFUSED),
    ],
)
def test_an_answer_that_cannot_change_is_not_asked_again(status: int, outcome: d.ReleaseOutcome) -> None:
    memory = d.ReleaseMemory()
    assert memory.outcome(_lost_pod(), status) == outcome
    assert not memory.may_try("p-1")
    assert memory.notes == {}


@pytest.mark.parametrize("status", [None, 429, 500, 503])
def test_an_outage_is_tried_again_a_bounded_number_of_times_with_a_growing_delay(status: int | None) -> None:
    memory = d.ReleaseMemory()
    delays = []
    for _ in range(d.RELEASE_ATTEMPTS - 1):
        assert memory.outcome(_lost_pod(), status) == d.ReleaseOutcome.RETRY
        assert memory.may_try("p-1")
        delays.append(d.release_retry_delay(memory, "p-1"))
    assert memory.outcome(_lost_pod(), status) == d.ReleaseOutcome.GIVEN_UP
    assert not memory.may_try("p-1")
    assert delays == [d.RELEASE_RETRY_BASE_SECONDS * 2**i for i in range(d.RELEASE_ATTEMPTS - 1)]


def test_a_delete_in_flight_is_not_asked_twice() -> None:
    memory = d.ReleaseMemory()
    memory.in_flight.add("p-1")
    assert not memory.may_try("p-1")
    assert memory.may_try("p-2")


# ------------------------------------------------------------------------- the message


def _node_lost(subject: str = NODE, reason: Reason = Reason.NODE_LOST) -> ReplicaTrouble:
    return d.trouble(reason, f"the node {subject} that pod team/chat-0 is pinned to is not Ready", subject)


def test_a_node_lost_message_says_what_was_done() -> None:
    notes = {NODE: f"pod team/chat-0 force-deleted from node {NODE}, not Ready since 2026-12-01T10:00:00Z"}
    told = d.with_release_notes(_node_lost(), notes)
    assert told is not None
    assert told.message.endswith(
        f"; pod team/chat-0 force-deleted from node {NODE}, not Ready since 2026-12-01T10:00:00Z"
    )
    assert told.action == TroubleAction.REPLAN
    assert len(told.message) <= d.TROUBLE_MESSAGE_LIMIT


def test_other_troubles_and_other_nodes_are_told_as_they_are() -> None:
    notes = {NODE: "pod team/chat-0 force-deleted"}
    assert d.with_release_notes(None, notes) is None
    other = _node_lost("gpu-9")
    assert d.with_release_notes(other, notes) == other
    loading = d.trouble(Reason.MODEL_LOADING, "loads", "team/chat-0")
    assert d.with_release_notes(loading, notes) == loading


def test_the_setting_is_on_by_default_and_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ObserverSettings().forceDeletePodsOnLostNodes is True
    monkeypatch.setenv("AI_INFERENCE_OBSERVER__FORCEDELETEPODSONLOSTNODES", "false")
    assert ModuleSettings().observer.forceDeletePodsOnLostNodes is False


# ---------------------------------------------------------------- the observer acting on it


def _owned_by_sts(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["uid"] = "p-chat-0"
    out["metadata"]["ownerReferences"] = [{"kind": "StatefulSet", "name": "chat", "uid": STS_UID, "controller": True}]
    return out


def _order_sts() -> dict[str, Any]:
    from tests.observer.test_dispatch import owner

    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": "chat",
            "namespace": "team",
            "uid": STS_UID,
            "resourceVersion": "1",
            "ownerReferences": owner(ORDER_UID),
        },
        "spec": {"replicas": 1},
        "status": {"replicas": 1, "readyReplicas": 1},
    }


@pytest.mark.temporal
@pytest.mark.parametrize("answer", [None, 403])
async def test_the_observer_force_deletes_once_past_the_grace(temporal_client: Client, answer: int | None) -> None:
    """A node NotReady with a 3 s grace under a serving order's pod: nothing is deleted within it; after
    it, the pod is force-deleted once (by uid), the order's NodeLost message says so and an Event is
    recorded. A 403 is asked once and never again (it is logged), whatever the looks after it."""
    from kubernetes.client.exceptions import ApiException

    from tests.observer.test_dispatch import SERVING, observer, order, settle
    from tests.observer.test_dispatch import pod as order_pod
    from tests.observer.test_trouble_dispatch import node as listed_node
    from tests.observer.test_trouble_dispatch import troubles
    from worker.observer import informer as inf
    from worker.observer.informer import Listed, Watched

    obs = observer(temporal_client)
    obs.config.nodeNotReadyGraceSeconds = 3.0
    deletes: list[tuple[str, str]] = []
    events: list[str] = []

    def delete(lost: d.LostPod) -> None:
        deletes.append((lost.key, lost.uid))
        if answer is not None:
            raise ApiException(status=answer)

    obs._delete_pod = delete  # type: ignore[method-assign]
    obs._record_release = lambda order, lost: events.append(lost.note())  # type: ignore[method-assign]
    obs.handle(Listed(inf.NODE, [listed_node(NODE)]))
    obs.handle(Listed(inf.ORDER, [order("chat", ORDER_UID, **SERVING)]))
    obs.handle(Listed(inf.STATEFULSET, [_order_sts()]))
    obs.handle(Listed(inf.POD, [_owned_by_sts(order_pod("chat-0", ready=True))]))
    await settle()
    away = listed_node(NODE, ready="False", rv="2")
    away["status"]["conditions"][0]["lastTransitionTime"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    obs.handle(Watched(inf.NODE, d.MODIFIED, away))
    await settle()
    assert deletes == []  # within the grace
    await asyncio.sleep(3.5)  # the grace (3 s from a whole second: at least 2 s left) and the look again
    assert deletes == [("team/chat-0", "p-chat-0")]
    for _ in range(3):  # more looks: nothing asked again
        obs.mark_trouble(obs.orders.get("team/chat"))  # type: ignore[arg-type]
        await settle()
    assert len(deletes) == 1
    told = troubles(obs)[-1]
    assert told.reason == Reason.NODE_LOST
    if answer is None:
        assert f"pod team/chat-0 force-deleted from node {NODE}, not Ready since" in told.message
        assert events == [next(iter(obs.releases[ORDER_UID].notes.values()))]
    else:
        assert "force-deleted" not in told.message
        assert events == []
    await obs.stop()


@pytest.mark.temporal
async def test_with_the_setting_off_nothing_is_deleted(temporal_client: Client) -> None:
    from tests.observer.test_dispatch import SERVING, observer, order, settle
    from tests.observer.test_dispatch import pod as order_pod
    from tests.observer.test_trouble_dispatch import node as listed_node
    from tests.observer.test_trouble_dispatch import troubles
    from worker.observer import informer as inf
    from worker.observer.informer import Listed

    obs = observer(temporal_client)
    obs.config.nodeNotReadyGraceSeconds = 0
    obs.config.forceDeletePodsOnLostNodes = False
    deletes: list[str] = []
    obs._delete_pod = lambda lost: deletes.append(lost.key)  # type: ignore[method-assign]
    obs.handle(Listed(inf.NODE, [listed_node(NODE, ready="False")]))
    obs.handle(Listed(inf.ORDER, [order("chat", ORDER_UID, **SERVING)]))
    obs.handle(Listed(inf.STATEFULSET, [_order_sts()]))
    obs.handle(Listed(inf.POD, [_owned_by_sts(order_pod("chat-0", ready=True))]))
    await settle()
    await settle()
    assert troubles(obs)[-1].reason == Reason.NODE_LOST  # still named and replanned
    assert deletes == []
    await obs.stop()
