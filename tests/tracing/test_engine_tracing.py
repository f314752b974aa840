"""The engine's own traces: workload.engineOtlpTracesEndpoint becomes vLLM's --otlp-traces-endpoint."""

from __future__ import annotations

from typing import Any

from activities.builders import build_statefulset
from activities.builders.statefulset import ENGINE_SERVICE_NAME
from activities.release import release_fingerprint
from inference_api.settings import ModuleSettings
from tests import factories as f

COLLECTOR = "http://otel-collector.d8-monitoring:4317"


def _runtime(settings: ModuleSettings) -> dict[str, Any]:
    return f.runtime_container(build_statefulset(f.inputs(settings=settings)))


def test_off_by_default() -> None:
    runtime = _runtime(ModuleSettings())
    assert not any("otlp" in str(arg) for arg in runtime["command"])
    assert "OTEL_SERVICE_NAME" not in {e["name"] for e in runtime["env"]}


def test_the_endpoint_reaches_the_engine_and_rolls_the_orders() -> None:
    settings = ModuleSettings(workload={"engineOtlpTracesEndpoint": COLLECTOR})
    runtime = _runtime(settings)
    command = runtime["command"]
    assert isinstance(command, list)
    assert command[command.index("--otlp-traces-endpoint") + 1] == COLLECTOR
    env = {e["name"]: e.get("value") for e in runtime["env"]}
    assert env["OTEL_SERVICE_NAME"] == ENGINE_SERVICE_NAME
    # It shapes the pod template: part of the release fingerprint. The module's own tracing is not.
    assert release_fingerprint(settings) != release_fingerprint(ModuleSettings())
    traced_module = ModuleSettings(tracing={"otlpEndpoint": "http://c:4318"}, logLevel="DEBUG")
    assert release_fingerprint(traced_module) == release_fingerprint(ModuleSettings())
