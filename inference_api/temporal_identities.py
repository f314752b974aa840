"""Who may call what on Temporal: the module's Temporal identities and the gRPC methods each needs.

One table, the only one: the embedded Temporal's TLS terminator enforces it by client-certificate
subject (:func:`nginx_maps` renders it into ``deploy/charts/ai-inference/files/temporal-identities.conf``,
which the chart and the local stack both include), the admin guide lists it for an external
Temporal's own authorizer, and ``tests/security/test_temporal_identities.py`` checks that every
client call of the code is in its identity's list. Pure data and text: no I/O.

- ``worker``: the SDK worker (polls, task answers, heartbeats), its activities' own calls (the
  preemption workflow's signal-with-start, the ceiling read from its history) and the registration
  of the module's search attributes (operator service) at start.
- ``watcher``: the observer: signal-with-start and signals of order workflows, the resync's
  listings, orphans terminated, stuck runs reset (history read first).
- ``cli``: an operator's ``temporal workflow list/describe/show/query`` and ``ai-inference replan``
  (the ``replan`` update, or the ``replan`` signal). No polls, no task answers, no terminate or
  reset, no operator service.
- ``ui``: a Temporal Web UI server with a certificate of its own (an external Temporal's): reads.
- ``admin``: break-glass, every method; the chart issues no certificate for it (an administrator
  makes a short-lived one from the CA when a workflow must be terminated or reset by hand).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

WORKFLOW_SERVICE = "temporal.api.workflowservice.v1.WorkflowService"
OPERATOR_SERVICE = "temporal.api.operatorservice.v1.OperatorService"

# The subject (RFC 2253, as nginx's $ssl_client_s_dn shows it) of each identity's client certificate:
# the chart's (templates/temporal/tls.yaml) and the local stack's (devstack.temporal_tls) alike.
SUBJECTS: Mapping[str, str] = {
    "worker": "CN=ai-inference-worker",
    "watcher": "CN=ai-inference-watcher",
    "cli": "CN=ai-inference-cli",
    "ui": "CN=ai-inference-ui",
    "admin": "CN=ai-inference-admin",
}
# Identities allowed every method (break-glass).
UNRESTRICTED = frozenset({"admin"})

# Every client's first call (Client.connect) and the namespace check of workers and tools.
_CONNECT = ("GetSystemInfo", "DescribeNamespace")

_WORKER = (
    *_CONNECT,
    # The SDK worker (sdk-core): polls, answers, heartbeats, sticky queues, history on a cache miss.
    "PollWorkflowTaskQueue",
    "PollActivityTaskQueue",
    "RespondWorkflowTaskCompleted",
    "RespondWorkflowTaskFailed",
    "RespondQueryTaskCompleted",
    "RespondActivityTaskCompleted",
    "RespondActivityTaskFailed",
    "RespondActivityTaskCanceled",
    "RecordActivityTaskHeartbeat",
    "GetWorkflowExecutionHistory",
    "ResetStickyTaskQueue",
    "ShutdownWorker",
    "RecordWorkerHeartbeat",
    # Activities: activities/preemption.py (signal-with-start), activities/preemption_ledger.py.
    "SignalWithStartWorkflowExecution",
    "DescribeWorkflowExecution",
    "GetWorkflowExecutionHistoryReverse",
    # At start: the running order workflows too old for a patch this release retires
    # (worker/patch_retirement.py); a count, no listing.
    "CountWorkflowExecutions",
)
_WATCHER = (
    *_CONNECT,
    # worker/observer/outbox.py: signal-with-start, signals, orphans terminated.
    "SignalWithStartWorkflowExecution",
    "SignalWorkflowExecution",
    "TerminateWorkflowExecution",
    # worker/observer/resync.py, repair.py: listings, a stuck run's history and its reset.
    "ListWorkflowExecutions",
    "CountWorkflowExecutions",
    "DescribeWorkflowExecution",
    "GetWorkflowExecutionHistory",
    "ResetWorkflowExecution",
)
_READ = (
    *_CONNECT,
    "ListWorkflowExecutions",
    "CountWorkflowExecutions",
    "DescribeWorkflowExecution",
    "GetWorkflowExecutionHistory",
    "GetWorkflowExecutionHistoryReverse",
    "QueryWorkflow",
    "GetSearchAttributes",
)
_CLI = (
    *_READ,
    # ai-inference replan (worker/cli.py) and `temporal workflow update execute --name replan`.
    "UpdateWorkflowExecution",
    "PollWorkflowExecutionUpdate",
    # `temporal workflow signal --name replan` (the admin guide's other form).
    "SignalWorkflowExecution",
)
_UI = (
    *_READ,
    "GetClusterInfo",
    "ListNamespaces",
    "DescribeTaskQueue",
    "ListSchedules",
    "DescribeSchedule",
    "ListBatchOperations",
    "DescribeBatchOperation",
)


# The gRPC health check (``Client.service_client.check_health``): the worker's and the watcher's
# readiness (worker/processes.py ``temporal_reachable``) asks it; it reveals nothing but "serving".
HEALTH_CHECK = "/grpc.health.v1.Health/Check"


def _paths(workflow: Iterable[str], operator: Iterable[str] = ()) -> frozenset[str]:
    return frozenset(
        [f"/{WORKFLOW_SERVICE}/{m}" for m in workflow] + [f"/{OPERATOR_SERVICE}/{m}" for m in operator] + [HEALTH_CHECK]
    )


# Identity -> the gRPC paths (``/<package>.<Service>/<Method>``) it may call. ``admin``: every one.
METHODS: Mapping[str, frozenset[str]] = {
    # The worker registers the module's search attributes at start (worker/search_attribute_registration.py).
    "worker": _paths(_WORKER, ("ListSearchAttributes", "AddSearchAttributes")),
    "watcher": _paths(_WATCHER),
    "cli": _paths(_CLI),
    "ui": _paths(_UI, ("ListSearchAttributes",)),
    "admin": frozenset(),
}
IDENTITIES = tuple(SUBJECTS)


def method_path(method: str, service: str = WORKFLOW_SERVICE) -> str:
    """``PollWorkflowTaskQueue`` -> ``/temporal.api.workflowservice.v1.WorkflowService/PollWorkflowTaskQueue``."""
    return f"/{service}/{method}"


def allowed(identity: str, path: str) -> bool:
    """Whether ``identity`` may call the gRPC method ``path`` (an unknown identity: nothing)."""
    if identity in UNRESTRICTED:
        return True
    return path in METHODS.get(identity, frozenset())


def nginx_maps() -> str:
    """The terminator's two ``map`` blocks: ``$temporal_identity`` from the client certificate's
    subject (an unknown subject: none), and ``$temporal_allowed`` (``1`` or ``0``) from the identity
    and the exact request URI (no normalization: the path the upstream gets)."""
    lines = [
        "# Generated from inference_api/temporal_identities.py (the one table of who may call what);",
        "# tests/security/test_temporal_identities.py fails when this file and the table differ.",
        "map $ssl_client_s_dn $temporal_identity {",
        '    default "";',
    ]
    lines += [f'    "{subject}" {identity};' for identity, subject in SUBJECTS.items()]
    lines += ["}", "", 'map "$temporal_identity:$request_uri" $temporal_allowed {', "    default 0;"]
    for identity in IDENTITIES:
        if identity in UNRESTRICTED:
            lines.append(f'    "~^{identity}:/" 1;')
            continue
        lines += [f'    "{identity}:{path}" 1;' for path in sorted(METHODS[identity])]
    lines.append("}")
    return "\n".join(lines) + "\n"
