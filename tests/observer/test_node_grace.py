"""A node that is not Ready gets a grace before its pods' orders move (issue 23): NodeNotReady (the
placement kept) until ``observer.nodeNotReadyGraceSeconds`` after its Ready condition's
lastTransitionTime, NodeLost (a replan) after. A deleted node is lost at once. Pure decisions, the
observer's clock passed in; and the observer's look again when a grace ends with no event."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.client import Client

from inference_api.reasons import Reason
from inference_api.settings import ModuleSettings, ObserverSettings
from tests.observer.test_troubles import NODE, pod, running, unschedulable
from worker.observer import decisions as d
from workflows.order_state import TroubleAction
from workflows.status import TROUBLE_REASONS, TROUBLE_SEVERITY, trouble_advice

SINCE = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
GRACE = 300.0


def not_ready(
    status: str = "Unknown",
    since: str | None = "2026-12-01T10:00:00Z",
    message: str = "Kubelet stopped posting node status.",
    name: str = NODE,
) -> dict[str, Any]:
    condition: dict[str, Any] = {"type": "Ready", "status": status, "reason": "NodeStatusUnknown", "message": message}
    if since is not None:
        condition["lastTransitionTime"] = since
    return {"metadata": {"name": name}, "status": {"conditions": [condition]}}


def at(seconds: float, grace: float = GRACE) -> d.NodeGrace:
    return d.NodeGrace(now=SINCE + timedelta(seconds=seconds), seconds=grace)


SERVING = pod(containers=[running()])


@pytest.mark.parametrize("status", ["Unknown", "False"])
@pytest.mark.parametrize("elapsed", [0.0, 1.0, 45.0, GRACE - 0.001])
def test_within_the_grace_the_node_is_named_and_the_placement_kept(status: str, elapsed: float) -> None:
    found = d.pod_trouble(SERVING, {NODE: not_ready(status)}, at(elapsed))
    assert found is not None
    assert found.reason == Reason.NODE_NOT_READY
    assert found.action == TroubleAction.WAIT_FOR_EDIT  # no replan, no retry timer
    assert found.subject == NODE
    assert f"the node {NODE} that pod support/chat-0 is on is not Ready since 2026-12-01T10:00:00Z" in found.message
    assert "Kubelet stopped posting node status." in found.message
    assert "until 2026-12-01T10:05:00Z (300 s grace" in found.message


@pytest.mark.parametrize("elapsed", [GRACE, GRACE + 1, 86400.0])
def test_after_the_grace_the_node_is_lost_and_the_order_moves(elapsed: float) -> None:
    found = d.pod_trouble(SERVING, {NODE: not_ready()}, at(elapsed))
    assert found is not None
    assert found.reason == Reason.NODE_LOST
    assert found.action == TroubleAction.REPLAN
    assert "past its 300 s grace" in found.message
    assert "Kubelet stopped posting node status." in found.message


def test_the_message_is_the_same_at_every_look_within_the_grace() -> None:
    """The observer tells a trouble again only when it changes: a message with a running count would
    signal at every look."""
    looks = [d.pod_trouble(SERVING, {NODE: not_ready()}, at(s)) for s in (0, 10, 200)]
    assert looks[0] is not None
    assert looks == [looks[0]] * 3


def test_a_deleted_node_is_lost_at_once_whatever_the_grace() -> None:
    found = d.pod_trouble(SERVING, {}, at(0))
    assert found is not None
    assert found.reason == Reason.NODE_LOST
    assert "gone" in found.message


@pytest.mark.parametrize("grace", [None, at(0, grace=0)])
def test_no_grace_is_the_old_verdict_lost_at_once(grace: d.NodeGrace | None) -> None:
    found = d.pod_trouble(SERVING, {NODE: not_ready()}, grace)
    assert found is not None
    assert found.reason == Reason.NODE_LOST


@pytest.mark.parametrize("since", [None, "yesterday"])
def test_a_node_that_cannot_say_since_when_is_lost_at_once(since: str | None) -> None:
    found = d.pod_trouble(SERVING, {NODE: not_ready(since=since)}, at(0))
    assert found is not None
    assert found.reason == Reason.NODE_LOST


def test_a_clock_behind_the_nodes_is_within_the_grace() -> None:
    found = d.pod_trouble(SERVING, {NODE: not_ready()}, at(-30))
    assert found is not None
    assert found.reason == Reason.NODE_NOT_READY


def test_a_ready_node_is_no_trouble_with_a_grace() -> None:
    ready = {"metadata": {"name": NODE}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert d.pod_trouble(SERVING, {NODE: ready}, at(0)) is None


def test_a_pod_pinned_to_a_node_not_ready_gets_the_grace_too() -> None:
    pinned = pod(
        node_name=None,
        pinned=NODE,
        conditions=unschedulable(
            "0/2 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }."
        ),
    )
    within = d.pod_trouble(pinned, {NODE: not_ready()}, at(10))
    after = d.pod_trouble(pinned, {NODE: not_ready()}, at(GRACE))
    assert within is not None
    assert within.reason == Reason.NODE_NOT_READY
    assert "pinned to" in within.message
    assert after is not None
    assert after.reason == Reason.NODE_LOST


def test_a_pod_terminating_on_a_node_away_names_the_node() -> None:
    """The taint manager evicts the pods of a node NotReady for 300 s: on a node that does not answer
    the pod stays Terminating and the StatefulSet cannot make its replacement — the node is the news."""
    evicted = pod(containers=[running()], deleting=True)
    found = d.pod_trouble(evicted, {NODE: not_ready()}, at(GRACE + 5))
    assert found is not None
    assert found.reason == Reason.NODE_LOST
    ready = {"metadata": {"name": NODE}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert d.pod_trouble(evicted, {NODE: ready}, at(0)) is None


def test_a_trouble_that_needs_an_edit_outranks_a_node_that_may_come_back() -> None:
    other = "gpu-node-2"
    crashing = pod(
        name="chat-1",
        node_name=other,
        containers=[running(ready=False, restarts=3, last={"exitCode": 1, "reason": "Error"})],
    )
    ready_other = {"metadata": {"name": other}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    nodes = {NODE: not_ready(), other: ready_other}
    found = d.order_trouble([SERVING, crashing], None, [], nodes, at(10))
    assert found is not None
    assert found.reason == Reason.RUNTIME_CRASH_LOOPING
    found = d.order_trouble([SERVING, crashing], None, [], nodes, at(GRACE))
    assert found is not None
    assert found.reason == Reason.NODE_LOST


def test_grace_ends_is_the_earliest_running_grace_of_the_orders_nodes() -> None:
    later = not_ready(name="gpu-node-2", since="2026-12-01T10:01:00Z")
    nodes = {NODE: not_ready(), "gpu-node-2": later}
    pods = [SERVING, pod(name="chat-1", node_name="gpu-node-2", containers=[running()])]
    assert d.grace_ends(pods, nodes, at(10)) == SINCE + timedelta(seconds=GRACE)
    # The first grace is over: the next one is what to look again for.
    assert d.grace_ends(pods, nodes, at(GRACE)) == SINCE + timedelta(seconds=GRACE + 60)
    assert d.grace_ends(pods, nodes, at(GRACE + 60)) is None
    assert d.grace_ends(pods, nodes, at(10, grace=0)) is None
    assert d.grace_ends(pods, None, at(10)) is None
    assert d.grace_ends([pod(node_name=None, pinned=NODE)], nodes, at(10)) == SINCE + timedelta(seconds=GRACE)
    ready = {"metadata": {"name": NODE}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert d.grace_ends([SERVING], {NODE: ready}, at(10)) is None


def test_the_trouble_is_told_twice_not_ready_then_lost() -> None:
    memory = d.TroubleMemory()
    nodes = {NODE: not_ready()}
    first = d.trouble_signal(d.order_trouble([SERVING], None, [], nodes, at(5)), memory)
    assert first is not None
    assert first.reason == Reason.NODE_NOT_READY
    assert d.trouble_signal(d.order_trouble([SERVING], None, [], nodes, at(100)), memory) is None
    lost = d.trouble_signal(d.order_trouble([SERVING], None, [], nodes, at(GRACE)), memory)
    assert lost is not None
    assert lost.reason == Reason.NODE_LOST


def test_the_workflow_knows_the_reason_and_says_what_happens() -> None:
    assert Reason.NODE_NOT_READY in TROUBLE_SEVERITY
    assert Reason.NODE_NOT_READY.value in TROUBLE_REASONS  # so its end is cleared on the order
    assert "NodeLost" in trouble_advice(Reason.NODE_NOT_READY.value)


def test_the_default_grace_is_the_clusters_own_eviction_toleration() -> None:
    assert ObserverSettings().nodeNotReadyGraceSeconds == 300
    assert ModuleSettings().observer.nodeNotReadyGraceSeconds == 300
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        ObserverSettings(nodeNotReadyGraceSeconds=-1)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-12-01T10:00:00Z", SINCE),
        ("2026-12-01T10:00:00", SINCE),
        ("2026-12-01T11:00:00+01:00", SINCE),
        (SINCE, SINCE),
        ("", None),
        (None, None),
        ("not a time", None),
    ],
)
def test_api_server_times_are_read(value: object, expected: datetime | None) -> None:
    assert d.parse_time(value) == expected


async def test_the_observer_looks_again_when_a_grace_ends_without_an_event() -> None:
    """Level-triggered: the order's troubles are looked at again when the grace ends, the earliest kept."""
    from worker.observer.observer import Observer

    observer = Observer.__new__(Observer)
    observer._rechecks = {}
    marked: list[str] = []
    order = {"metadata": {"name": "chat", "namespace": "support", "uid": "u1"}}
    observer.uid_key = {"u1": "support/chat"}
    observer.order_by_uid = lambda uid: order if uid == "u1" else None  # type: ignore[method-assign]
    observer.mark_trouble = lambda o: marked.append(d.meta(o)["uid"])  # type: ignore[method-assign,assignment]
    now = datetime.now(UTC)
    observer._recheck_at("u1", now + timedelta(seconds=5), now)
    observer._recheck_at("u1", now + timedelta(seconds=0.1), now)  # sooner: replaces
    observer._recheck_at("u1", now + timedelta(seconds=3), now)  # later: the sooner one stands
    assert len(observer._rechecks) == 1
    await asyncio.sleep(0.8)
    assert marked == ["u1"]
    assert observer._rechecks == {}


@pytest.mark.temporal
async def test_the_observer_tells_not_ready_then_lost_with_no_event_between(temporal_client: Client) -> None:
    """Through the observer's event handling: a node turns NotReady under a serving order's pod; the
    order hears NodeNotReady at once and NodeLost when the grace ends, with no event in between."""
    from tests.observer.test_dispatch import SERVING as SERVING_ORDER
    from tests.observer.test_dispatch import observer, order, settle, statefulset
    from tests.observer.test_dispatch import pod as order_pod
    from tests.observer.test_trouble_dispatch import node as listed_node
    from tests.observer.test_trouble_dispatch import troubles
    from worker.observer import informer as inf
    from worker.observer.informer import Listed, Watched

    obs = observer(temporal_client)
    obs.config.nodeNotReadyGraceSeconds = 3.0
    obs.handle(Listed(inf.NODE, [listed_node("gpu-1")]))
    obs.handle(Listed(inf.STATEFULSET, [statefulset("u-chat", ready=1)]))
    obs.handle(Listed(inf.ORDER, [order("chat", "u-chat", **SERVING_ORDER)]))
    obs.handle(Listed(inf.POD, [order_pod("chat-0", ready=True)]))
    await settle()
    assert troubles(obs) == []
    away = listed_node("gpu-1", ready="Unknown", rv="2")
    away["status"]["conditions"][0]["lastTransitionTime"] = _stamp_now()
    obs.handle(Watched(inf.NODE, d.MODIFIED, away))
    await settle()
    [told] = troubles(obs)
    assert told.reason == Reason.NODE_NOT_READY
    assert told.action == TroubleAction.WAIT_FOR_EDIT
    await asyncio.sleep(3.5)  # the grace (3 s from a whole second) and the look again, no event
    [told] = troubles(obs)
    assert told.reason == Reason.NODE_LOST
    assert "past its 3 s grace" in told.message
    await obs.stop()


def _stamp_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
