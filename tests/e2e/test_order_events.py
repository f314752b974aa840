"""The order tells its story: Kubernetes Events for every step and named trouble, read back from the
real API server and through the real ``kubectl describe`` (issue 38, item 2)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from activities.order import order_event_body
from activities.order_events import EventRecorder
from devstack.cluster.launcher import LocalCluster
from inference_api.payloads import OrderEvent, OrderRef
from inference_api.types import GROUP, VERSION
from tests.e2e.stand import DEFAULT_LLM, Stand

pytestmark = [pytest.mark.cluster, pytest.mark.temporal]

MODEL = {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}}


def events_of(stand: Stand, name: str) -> list[Any]:
    listed = stand.core.list_namespaced_event(stand.namespace, field_selector=f"involvedObject.name={name}")
    mine = [e for e in listed.items if e.source and e.source.component == "ai-inference"]
    return sorted(mine, key=lambda e: (e.first_timestamp, e.metadata.creation_timestamp, e.metadata.name))


async def test_an_order_tells_its_refusal_its_steps_and_ready_as_events(
    stand: Stand, local_cluster: LocalCluster
) -> None:
    later = f"e2e-events-{uuid.uuid4().hex[:6]}"
    stand.create_order("storied", MODEL, class_name=later)
    await stand.until_phase("storied", "Pending", "ClassNotFound")
    await stand.until(lambda: any(e.reason == "ClassNotFound" for e in events_of(stand, "storied")), what="the event")
    refused = next(e for e in events_of(stand, "storied") if e.reason == "ClassNotFound")
    assert refused.type == "Warning"
    assert later in refused.message
    # The fix: the class appears; the order goes through its steps to Ready.
    stand.custom.create_cluster_custom_object(
        GROUP, VERSION, "inferenceserviceclasses", {**DEFAULT_LLM, "metadata": {"name": later}}
    )
    await stand.until_phase("storied", "Ready")
    await stand.until(lambda: any(e.reason == "ProbeSucceeded" for e in events_of(stand, "storied")), what="Ready")
    told = [(e.type, e.reason) for e in events_of(stand, "storied")]
    for step in ("ClassResolved", "ModelResolved", "LaunchPlanCalculated", "ProbeSucceeded"):
        assert ("Normal", step) in told, told
    # Events carry whole seconds: the refusal came before Ready, steps within one second in any order.
    stamps = {e.reason: e.first_timestamp for e in events_of(stand, "storied")}
    assert stamps["ClassNotFound"] <= stamps["ClassResolved"] <= stamps["ProbeSucceeded"]
    # No secret in them: the order's token is nowhere in what the Events say.
    token = stand.core.read_namespaced_secret("storied-auth", stand.namespace).data["token"]
    assert all(token not in (e.message or "") for e in events_of(stand, "storied"))
    # kubectl describe reads them as the order's history.
    described = local_cluster.kubectl("describe", "inferenceservice", "storied", "-n", stand.namespace).stdout
    events = described[described.index("Events:") :]
    for step in ("ClassNotFound", "ClassResolved", "ModelResolved", "ProbeSucceeded"):
        assert step in events, described


async def test_a_repeated_event_is_counted_on_the_api_server_not_made_again(stand: Stand) -> None:
    created = stand.create_order("counted", MODEL)
    ref = OrderRef(namespace=stand.namespace, name="counted", uid=created["metadata"]["uid"])
    recorder = EventRecorder(stand.core, order_event_body)
    event = OrderEvent(ref=ref, reason="NoCapacity", message="Planned False: no device has room", type="Warning")
    assert recorder.record(event)
    assert recorder.record(event)
    assert recorder.record(event)
    same = [e for e in events_of(stand, "counted") if e.message == event.message]
    assert [e.count for e in same] == [3]
    # Deleted meanwhile (Events expire): made again, not lost.
    stand.core.delete_namespaced_event(same[0].metadata.name, stand.namespace)
    assert recorder.record(event)
    assert [e.count for e in events_of(stand, "counted") if e.message == event.message] == [1]
