"""Every log line carries the order, the workflow id and the trace id where they are known
(``worker.tracing.add_log_context`` in ``worker.logs``), at the level the ``logLevel`` setting names."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
from collections.abc import Iterator

import pytest
import structlog
from opentelemetry.sdk.trace import TracerProvider
from pydantic import ValidationError
from temporalio import activity
from temporalio.testing import ActivityEnvironment

from inference_api.settings import ModuleSettings, TracingSettings
from worker.logs import configure_logging
from worker.tracing import add_log_context, order_of_workflow, setup_tracing

WORKFLOW_ID = "order/team-a/chat/0b6c4d2e-uid"


def _capture(out: io.StringIO, level: str = "INFO") -> None:
    configure_logging(level, json=True)
    handler = logging.getLogger().handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(out)


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    """The processes' log configuration (JSON lines), its output captured; the root logger as it was after."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    out = io.StringIO()
    _capture(out)
    yield out
    structlog.contextvars.clear_contextvars()
    root.handlers[:], root.level = handlers, level


def _records(out: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]


def test_a_line_in_an_activity_names_the_workflow_and_the_order(lines: io.StringIO) -> None:
    @activity.defn
    def step() -> None:
        structlog.get_logger("activities.test").info("applied")
        logging.getLogger("temporalio.test").warning("a library's line")

    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, workflow_id=WORKFLOW_ID)
    env.run(step)
    records = _records(lines)
    assert [r["event"] for r in records] == ["applied", "a library's line"]
    for record in records:
        assert record["workflow_id"] == WORKFLOW_ID
        assert record["order"] == "team-a/chat"


def test_a_line_within_a_span_carries_its_trace_id(lines: io.StringIO) -> None:
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("step") as span:
        structlog.get_logger("worker.test").info("inside")
    structlog.get_logger("worker.test").info("outside")
    inside, outside = _records(lines)
    assert inside["trace_id"] == format(span.get_span_context().trace_id, "032x")
    assert len(str(inside["trace_id"])) == 32
    assert "trace_id" not in outside


def test_the_observer_binds_the_order_and_the_workflow(lines: io.StringIO) -> None:
    with structlog.contextvars.bound_contextvars(order="team-a/chat", workflow_id=WORKFLOW_ID):
        structlog.get_logger("worker.observer.test").info("order signalled")
    (record,) = _records(lines)
    assert record["order"] == "team-a/chat"
    assert record["workflow_id"] == WORKFLOW_ID


def test_the_line_says_what_it_says_first() -> None:
    event = add_log_context(None, "info", {"event": "x", "order": "ns/other", "workflow_id": "order/ns/a/u"})
    assert event["order"] == "ns/other"
    assert order_of_workflow("order/ns/name/uid") == "ns/name"
    assert order_of_workflow("preemption/ns") is None


def test_the_log_level_is_a_setting(monkeypatch: pytest.MonkeyPatch, lines: io.StringIO) -> None:
    monkeypatch.setenv("AI_INFERENCE_LOGLEVEL", "warn")
    settings = ModuleSettings()
    assert settings.logLevel == "WARNING"
    _capture(lines, settings.logLevel)
    structlog.get_logger("worker.test").info("hidden")
    structlog.get_logger("worker.test").warning("shown")
    assert [r["event"] for r in _records(lines)] == ["shown"]
    monkeypatch.setenv("AI_INFERENCE_LOGLEVEL", "chatty")
    with pytest.raises(ValidationError):
        ModuleSettings()


def test_tracing_is_off_without_an_endpoint() -> None:
    assert setup_tracing(TracingSettings(), "worker") is False
    with pytest.raises(ValidationError):
        TracingSettings(otlpEndpoint="grpc://collector:4317")
    assert TracingSettings(otlpEndpoint="http://collector:4318/").otlpEndpoint == "http://collector:4318"
    # Not part of what shapes an order: out of the release fingerprint.
    assert "tracing" not in ModuleSettings(tracing={"otlpEndpoint": "http://c:4318"}).model_dump()
