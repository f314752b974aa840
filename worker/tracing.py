"""OpenTelemetry traces of the module's processes, and the ids every log line carries.

``setup_tracing(settings.tracing, process)`` (each process, at start): with ``tracing.otlpEndpoint``
set, the OpenTelemetry SDK's tracer provider exports every span over OTLP/HTTP to
``<otlpEndpoint>/v1/traces`` (batched, in a thread of its own); unset, nothing is set up, the
OpenTelemetry API stays the no-op it is by default and nothing is sent.

What makes the spans (docs/tracing.md has the picture):

* Temporal: ``temporalio.contrib.opentelemetry.TracingInterceptor`` on the client of the worker and
  of the observer (:func:`temporal_interceptors`, used by ``worker.temporal_client.connect``). The
  observer's start of an order's workflow carries its span in the workflow's headers, so the
  workflow's spans and every activity's span join the observer's trace. The interceptor makes the
  workflow's spans outside the workflow's code and never on replay: the workflows stay deterministic.
* The observer: a span around each delivery to an order's workflow (``worker/observer/outbox.py``).
* Kubernetes: a span around each API request made within a traced operation
  (``activities/kube.py``: ``bounded``): an activity's reads and server-side applies.
* The planner: a client span around ``POST /api/v1/launch-plan`` (``activities/planner_client.py``)
  whose context travels in the ``traceparent`` header, and the service's own server span.

No span carries a secret: names, namespaces, paths, methods, status codes, never a body or a header.

:func:`add_log_context` is a structlog processor (``worker/logs.py``) putting the order
(``namespace/name``), the workflow id and the trace id on every log line that has them: from the
line itself, from the structlog context the observer binds, from the Temporal activity or workflow
the line is logged in, and from the current span.
"""

from __future__ import annotations

import atexit
from collections.abc import MutableMapping
from typing import Any

from opentelemetry import trace

from inference_api import package_version
from inference_api.settings import TracingSettings

TRACER_NAME = "ai-inference"
# What a process names its spans' service when tracing.serviceName is empty: ai-inference-<process>.
SERVICE_PREFIX = "ai-inference-"
ORDER_WORKFLOW_PREFIX = "order/"

_enabled = False


def setup_tracing(settings: TracingSettings, process: str) -> bool:
    """The SDK's tracer provider with the OTLP exporter, when ``settings.otlpEndpoint`` is set (once
    per process; later calls change nothing). False: tracing is off."""
    global _enabled
    if _enabled:
        return True
    if not settings.otlpEndpoint:
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    resource = Resource.create(
        {
            "service.name": settings.serviceName or f"{SERVICE_PREFIX}{process}",
            "service.namespace": "ai-inference",
            "service.version": package_version(),
        }
    )
    provider = TracerProvider(resource=resource, sampler=ParentBased(TraceIdRatioBased(settings.sampleRatio)))
    exporter = OTLPSpanExporter(endpoint=f"{settings.otlpEndpoint}/v1/traces", timeout=10)
    # A short delay: an order's spans reach the backend about a second after they end.
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=1000))
    trace.set_tracer_provider(provider)
    # What is still queued goes out when the process ends (SIGTERM ends it through asyncio.run).
    atexit.register(provider.shutdown)
    _enabled = True
    return True


def tracing_enabled() -> bool:
    return _enabled


def temporal_interceptors() -> list[Any]:
    """The Temporal client's interceptors: the tracing interceptor when tracing is on (a worker made
    from the client gets it too), none otherwise."""
    if not _enabled:
        return []
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return [TracingInterceptor(trace.get_tracer(TRACER_NAME))]


def order_of_workflow(workflow_id: str) -> str | None:
    """``namespace/name`` of an order workflow's id (``order/<namespace>/<name>/<uid>``)."""
    if not workflow_id.startswith(ORDER_WORKFLOW_PREFIX):
        return None
    parts = workflow_id.split("/")
    return f"{parts[1]}/{parts[2]}" if len(parts) == 4 else None


def _temporal_workflow_id() -> str | None:
    """The workflow id of the activity or workflow this line is logged in, if any."""
    from temporalio import activity, workflow

    if activity.in_activity():
        return activity.info().workflow_id
    if workflow.in_workflow():
        return workflow.info().workflow_id
    return None


def current_trace_id() -> str | None:
    """The current span's trace id (32 hex digits), None outside a recorded span."""
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None


def add_log_context(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: ``order``, ``workflow_id`` and ``trace_id`` where they are known."""
    workflow_id = event.get("workflow_id")
    if workflow_id is None:
        workflow_id = _temporal_workflow_id()
        if workflow_id is not None:
            event["workflow_id"] = workflow_id
    if "order" not in event and isinstance(workflow_id, str):
        order = order_of_workflow(workflow_id)
        if order is not None:
            event["order"] = order
    if "trace_id" not in event:
        trace_id = current_trace_id()
        if trace_id is not None:
            event["trace_id"] = trace_id
    return event
