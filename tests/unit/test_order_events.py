"""Which Events a status write makes (``activities.order_events.step_events``, pure), and how the
recorder counts and limits them (its API writes are a fake here: the real API server's answers are
in tests/e2e/test_order_events.py)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from activities.order_events import BURST, REFILL_SECONDS, EventRecorder, StepEvent, step_events
from inference_api.payloads import OrderEvent, OrderRef


def cond(type_: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message}


def test_a_first_status_tells_each_step_it_names_in_step_order() -> None:
    after = [
        cond("Ready", "False", "WaitingForPreviousStep", "waits"),
        cond("ModelResolved", "True", "ModelResolved", "Qwen/Qwen2.5-7B-Instruct"),
        cond("ClassResolved", "True", "ClassResolved", "class default-llm"),
        cond("Planned", "False", "WaitingForPreviousStep"),
    ]
    assert step_events(None, after) == [
        StepEvent("Normal", "ClassResolved", "ClassResolved True: class default-llm"),
        StepEvent("Normal", "ModelResolved", "ModelResolved True: Qwen/Qwen2.5-7B-Instruct"),
    ]


def test_only_a_change_of_status_or_reason_is_an_event() -> None:
    before = [cond("WorkloadReady", "False", "WorkloadProgressing", "0 of 1 replicas ready")]
    same = [cond("WorkloadReady", "False", "WorkloadProgressing", "still 0 of 1 replicas ready")]
    assert step_events(before, same) == []
    loading = [cond("WorkloadReady", "False", "ModelLoading", "the engine loads")]
    told = StepEvent("Normal", "ModelLoading", "WorkloadReady False: the engine loads")
    assert step_events(before, loading) == [told]
    ready = [cond("WorkloadReady", "True", "ModelLoading", "1 of 1")]
    assert [e.type for e in step_events(loading, ready)] == ["Normal"]


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        ("NoCapacity", "Warning"),
        ("ImagePullFailed", "Warning"),
        ("AuthTokenInvalid", "Warning"),
        ("ClassNotFound", "Warning"),
        ("WorkloadProgressing", "Normal"),
        ("ModelLoading", "Normal"),
        ("Deleting", "Normal"),
        ("ReplicasHeldOnPreviousRuntime", "Normal"),
    ],
)
def test_a_trouble_is_a_warning_and_progress_is_normal(reason: str, kind: str) -> None:
    [event] = step_events([], [cond("WorkloadReady", "False", reason, "why")])
    assert (event.type, event.reason) == (kind, reason)


def test_ready_repeating_a_step_above_it_is_not_told_twice() -> None:
    after = [
        cond("Planned", "False", "NoCapacity", "no device of the class has room"),
        cond("Ready", "False", "NoCapacity", "no device of the class has room"),
    ]
    assert [e.message for e in step_events(None, after)] == ["Planned False: no device of the class has room"]
    own = [cond("Ready", "False", "HealthCheckFailed", "GET /v1/models: HTTP 500")]
    assert [e.reason for e in step_events(None, own)] == ["HealthCheckFailed"]


def test_a_long_message_is_cut_to_the_events_limit() -> None:
    [event] = step_events(None, [cond("Planned", "False", "NoCapacity", "x" * 5000)])
    assert len(event.message) == 1024
    assert event.message.endswith("…")


class FakeCore:
    """What the recorder calls of CoreV1Api, counting calls (no API server: the e2e test has one)."""

    def __init__(self) -> None:
        self.created: list[Any] = []
        self.patched: list[tuple[str, dict[str, Any]]] = []
        self.gone: set[str] = set()

    def create_namespaced_event(self, namespace: str, body: Any) -> Any:
        name = f"e{len(self.created)}"
        self.created.append(body)
        return type("Created", (), {"metadata": type("Meta", (), {"name": name})()})()

    def patch_namespaced_event(self, name: str, namespace: str, body: dict[str, Any]) -> None:
        if name in self.gone:
            raise ApiException(status=404)
        self.patched.append((name, body))


REF = OrderRef(namespace="team", name="chat", uid="u-1")


def test_a_repeated_event_is_counted_and_one_gone_is_made_again() -> None:
    core = FakeCore()
    recorder = EventRecorder(core, lambda e: e.message)
    event = OrderEvent(ref=REF, reason="NoCapacity", message="m", type="Warning")
    assert recorder.record(event)
    assert recorder.record(event)
    assert len(core.created) == 1
    assert [(n, b["count"]) for n, b in core.patched] == [("e0", 2)]
    core.gone.add("e0")
    assert recorder.record(event)
    assert len(core.created) == 2


def test_an_orders_events_are_rate_limited_and_its_tokens_come_back() -> None:
    core = FakeCore()
    now = [0.0]
    recorder = EventRecorder(core, lambda e: e.message, clock=lambda: now[0])
    told = [recorder.record(OrderEvent(ref=REF, reason="NoCapacity", message=str(i))) for i in range(BURST + 5)]
    assert told.count(True) == BURST
    other = OrderRef(namespace="team", name="other", uid="u-2")
    assert recorder.record(OrderEvent(ref=other, reason="NoCapacity", message="m"))  # its own bucket
    now[0] += REFILL_SECONDS
    assert recorder.record(OrderEvent(ref=REF, reason="NoCapacity", message="later"))
    assert not recorder.record(OrderEvent(ref=REF, reason="NoCapacity", message="later still"))


def test_a_refused_write_is_not_an_error() -> None:
    class Refusing(FakeCore):
        def create_namespaced_event(self, namespace: str, body: Any) -> Any:
            raise ApiException(status=403)

    recorder = EventRecorder(Refusing(), lambda e: e.message)
    assert not recorder.record(OrderEvent(ref=REF, reason="NoCapacity", message="m"))
