"""One order's trace, from the observer to Ready, read back from the real tracing backend.

The module's three processes run as ``ai-inference`` subprocesses, as in a cluster: the observer
(``watch``), the worker and the planner service (plain http here, which its settings allow for
tests), each with ``tracing.otlpEndpoint`` pointed at Jaeger (built from its Go module:
``devstack.tracing_backend``; a missing binary is built, a build that fails fails the test). The
stand-in fleet plays the runtimes. One order is made and becomes Ready; then Jaeger's query API
(``GET /api/traces?service=ai-inference-watch``) must hold one trace with the observer's span, the
start of the order's workflow, the workflow's spans, its activities (a Kubernetes server-side apply
among them, and the planner call with the planner service's own span) and the status write of
phase Ready. The processes' log lines name the order, its workflow and that trace.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes.client import (
    ApiClient,
    AuthenticationV1TokenRequest,
    CoreV1Api,
    CustomObjectsApi,
    RbacAuthorizationV1Api,
    V1TokenRequestSpec,
)
from kubernetes.client.exceptions import ApiException
from temporalio.testing import WorkflowEnvironment

from devstack.cluster.launcher import LocalCluster
from devstack.standins.fleet import StandInFleet
from devstack.temporal_tls import TemporalCredentials
from devstack.tracing_backend import JaegerServer
from inference_api.settings import PLANNER_AUDIENCE
from inference_api.types import GROUP, VERSION
from tests.e2e.stand import DEFAULT_LLM, Processes, Stand, e2e_settings, free_port, process_env
from tests.polling import until, wait_until
from workflows import activity_names as act

pytestmark = [pytest.mark.cluster, pytest.mark.temporal, pytest.mark.tracing]

OBSERVER = "ai-inference-watch"
WORKER = "ai-inference-worker"
PLANNER = "ai-inference-planner"


def _planner_token(api: ApiClient, namespace: str, role: str) -> str:
    """A planner-audience token of a ServiceAccount allowed the planner subresource (as the chart
    allows the worker's)."""
    core = CoreV1Api(api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "worker"}})
    rbac = RbacAuthorizationV1Api(api)
    rules = [{"apiGroups": [GROUP], "resources": ["inferenceserviceclasses/planner"], "verbs": ["create"]}]
    rbac.create_cluster_role({"metadata": {"name": role}, "rules": rules})
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "worker", "namespace": namespace}],
        }
    )
    spec = V1TokenRequestSpec(audiences=[PLANNER_AUDIENCE], expiration_seconds=3600)
    issued = core.create_namespaced_service_account_token("worker", namespace, AuthenticationV1TokenRequest(spec=spec))
    return str(issued.status.token)


@pytest.fixture
def traced(
    local_cluster: LocalCluster,
    kube_admin: ApiClient,
    temporal_env: WorkflowEnvironment,
    temporal_credentials: TemporalCredentials,
    jaeger: JaegerServer,
    tmp_path: Path,
) -> Iterator[tuple[Stand, Processes]]:
    """A namespace, the stand-in fleet, and the observer, the worker and the planner as processes,
    every one exporting its spans to ``jaeger``."""
    task_queue = f"trace-{uuid.uuid4().hex[:6]}"
    namespace = local_cluster.create_namespace(f"trace-{uuid.uuid4().hex[:6]}", users=())
    role = f"trace-planner-{uuid.uuid4().hex[:6]}"
    token_file = tmp_path / "planner-token"
    token_file.write_text(_planner_token(kube_admin, namespace, role))
    planner_port = free_port()
    address = temporal_env.client.service_client.config.target_host
    env = {
        **process_env(address, task_queue, temporal_credentials.module_env()),
        "AI_INFERENCE_TRACING__OTLPENDPOINT": jaeger.otlp_http_endpoint,
        "AI_INFERENCE_LOGLEVEL": "INFO",
        "AI_INFERENCE_PLANNER__BASEURL": f"http://127.0.0.1:{planner_port}",
        "AI_INFERENCE_PLANNER__TOKENFILE": str(token_file),
        "AI_INFERENCE_PLANNER__ALLOWINSECUREHTTP": "true",
    }
    logs = tmp_path / "logs"
    logs.mkdir()
    processes = Processes(local_cluster.kubeconfig("admin"), env, logs)
    with contextlib.suppress(ApiException):
        CustomObjectsApi(kube_admin).create_cluster_custom_object(
            GROUP, VERSION, "inferenceserviceclasses", DEFAULT_LLM
        )
    fleet = StandInFleet(kube_admin).start()
    stand = Stand(kube_admin, temporal_env.client, fleet, namespace, e2e_settings(task_queue))
    try:
        planner = processes.start("planner", "--port", str(planner_port))

        def planner_ready() -> bool:
            assert planner.poll() is None, f"the planner exited:\n{processes.log_text()[-3000:]}"
            try:
                return httpx.get(f"http://127.0.0.1:{planner_port}/readyz", timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(planner_ready, timeout=120, what="the planner service ready", interval=0.5)
        processes.start("worker")
        processes.start("watch")
        yield stand, processes
        # Orders go while the worker runs: their workflows remove the finalizers.
        with contextlib.suppress(Exception):
            if stand.delete_orders():
                wait_until(lambda: not stand.order_names(), timeout=60, what="orders deleted", interval=0.3)
    finally:
        processes.stop_all()
        fleet.stop()
        rbac = RbacAuthorizationV1Api(kube_admin)
        with contextlib.suppress(ApiException):
            rbac.delete_cluster_role_binding(role)
        with contextlib.suppress(ApiException):
            rbac.delete_cluster_role(role)
        with contextlib.suppress(ApiException):
            CoreV1Api(kube_admin).delete_namespace(namespace)


def _parent(span: dict[str, Any]) -> str | None:
    """The span's parent (its CHILD_OF reference; a link is a FOLLOWS_FROM one)."""
    return next((ref["spanID"] for ref in span.get("references") or [] if ref["refType"] == "CHILD_OF"), None)


def _tags(span: dict[str, Any]) -> dict[str, Any]:
    return {tag["key"]: tag["value"] for tag in span.get("tags") or []}


def _service(trace: dict[str, Any], span: dict[str, Any]) -> str:
    return str(trace["processes"][span["processID"]]["serviceName"])


def _order_trace(jaeger: JaegerServer, order: str) -> dict[str, Any] | None:
    """The trace whose observer span started the order's workflow (the whole trace, read by id)."""
    for summary in jaeger.traces(OBSERVER, limit=200):
        for span in summary["spans"]:
            if span["operationName"].startswith("observer") and _tags(span).get("ai_inference.order") == order:
                starts = [s for s in summary["spans"] if "StartWorkflow" in s["operationName"]]
                if starts:
                    return jaeger.trace(summary["traceID"])
    return None


def _activity_of(trace: dict[str, Any], span: dict[str, Any]) -> dict[str, Any] | None:
    """The ``RunActivity`` span ``span`` ran in; None while a span on the way has not arrived (a span
    is exported when it ends: an activity's after its requests, a running one's not yet)."""
    by_id = {s["spanID"]: s for s in trace["spans"]}
    parent = by_id.get(_parent(span) or "")
    while parent is not None and not parent["operationName"].startswith("RunActivity:"):
        parent = by_id.get(_parent(parent) or "")
    return parent


def _applies(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """The server-side applies whose activity's span has arrived."""
    applies = [span for span in trace["spans"] if span["operationName"].startswith("kubernetes apply ")]
    return [span for span in applies if _activity_of(trace, span) is not None]


def _complete(trace: dict[str, Any] | None) -> bool:
    """Every process's spans arrived, an apply within its activity and the Ready write among them
    (they come batched, about a second after they end)."""
    if trace is None:
        return False
    services = {_service(trace, span) for span in trace["spans"]}
    ready = any(_tags(span).get("ai_inference.phase") == "Ready" for span in trace["spans"])
    return {OBSERVER, WORKER, PLANNER} <= services and ready and bool(_applies(trace))


async def test_one_orders_trace_runs_from_the_observer_to_ready(
    traced: tuple[Stand, Processes], jaeger: JaegerServer
) -> None:
    stand, processes = traced
    name = "traced"
    order = f"{stand.namespace}/{name}"
    started = time.monotonic()
    stand.create_order(name, {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}})
    await stand.until_phase(name, "Ready", timeout=240)
    ready_after = time.monotonic() - started

    trace: dict[str, Any] | None = await until(
        lambda: found if _complete(found := _order_trace(jaeger, order)) else None,
        timeout=60,
        interval=1,
        in_thread=True,
        what=lambda: f"the trace of {order} in Jaeger (services {jaeger.services()})",
    )
    assert trace is not None
    spans = trace["spans"]
    names = [span["operationName"] for span in spans]
    by_id = {span["spanID"]: span for span in spans}
    assert len({span["traceID"] for span in spans}) == 1

    tree = "\n".join(
        f"{_service(trace, s)} {s['operationName']} <- " + by_id.get(_parent(s) or "", {}).get("operationName", "-")
        for s in sorted(spans, key=lambda s: s["startTime"])
    )
    # The observer's span is the root, and the start of the workflow is its child.
    # A signal's handling is linked to the signal (FOLLOWS_FROM), not a child of anything.
    handled = [span for span in spans if span["operationName"].startswith("HandleSignal:")]
    assert all(span.get("references") for span in handled), tree
    roots = [span for span in spans if _parent(span) is None and span not in handled]
    assert [_service(trace, root) for root in roots] == [OBSERVER], tree
    assert roots[0]["operationName"].startswith("observer"), tree
    start = next(
        span for span in spans if _service(trace, span) == OBSERVER and "StartWorkflow:" in span["operationName"]
    )
    assert _parent(start) == roots[0]["spanID"], tree
    workflow_id = stand.workflow(name).id
    assert _tags(roots[0])["temporal.workflow_id"] == workflow_id

    # The workflow and its activities, in the worker.
    # (The order's activities may start the preemption workflow: its spans join the trace too.)
    workflow_type = start["operationName"].split(":", 1)[1]
    runs = [span for span in spans if span["operationName"] == f"RunWorkflow:{workflow_type}"]
    assert runs, tree
    for run in runs:
        assert _parent(run) == start["spanID"], tree
        assert _service(trace, run) == WORKER
    activities = {n.split(":", 1)[1] for n in names if n.startswith("RunActivity:")}
    assert {act.READ_ORDER, act.PLAN_LAUNCH, act.APPLY_WORKLOAD, act.PUBLISH_STATUS} <= activities, activities

    # Kubernetes calls inside activities, a server-side apply among them.
    applies = _applies(trace)
    assert applies, tree
    activities_of_applies = [_activity_of(trace, span) or {} for span in applies]
    assert f"RunActivity:{act.APPLY_WORKLOAD}" in {a["operationName"] for a in activities_of_applies}, tree
    assert {_service(trace, a) for a in activities_of_applies} == {WORKER}

    # The planner call, and the planner service's own span under it.
    calls = {span["spanID"] for span in spans if span["operationName"] == "planner POST /api/v1/launch-plan"}
    served = [span for span in spans if span["operationName"] == "POST /api/v1/launch-plan"]
    assert calls, tree
    assert served, tree
    assert any(_parent(span) in calls for span in served), tree
    for span in served:
        assert _service(trace, span) == PLANNER
        assert _parent(span) in calls or _parent(span) not in by_id  # its call's span may still be on its way
        assert _tags(span)["http.response.status_code"] == 200

    # It ends with the status write of Ready.
    ready = [span for span in spans if _tags(span).get("ai_inference.phase") == "Ready"]
    assert ready
    assert all(_tags(span)["ai_inference.order"] == order for span in ready)
    # The first Ready write follows the first apply (later reconciles may apply again, the same objects).
    assert min(span["startTime"] for span in ready) >= min(span["startTime"] for span in applies)

    # Every process's log lines of this order name it, its workflow and this trace.
    records = []
    for line in processes.log_text().splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and record.get("workflow_id") == workflow_id:
                records.append(record)
    assert records, processes.log_text()[-3000:]
    assert all(record.get("order") == order for record in records)
    assert any(record.get("trace_id") == trace["traceID"] for record in records), records[:5]
    link = f"{jaeger.query_url}/api/traces/{trace['traceID']}"
    print(f"order Ready after {ready_after:.1f}s; its trace: {len(spans)} spans, {link}")
