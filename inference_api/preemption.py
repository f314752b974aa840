"""Payloads of capacity preemption: the order's autoscaler as observed, and what an order reports
to the preemption workflow of its device class.

Plain data, no I/O. The order workflow's scaling watch returns a :class:`ScalingObservation` when
the autoscaler's state changes; the order turns it into a :class:`MemberReport` for the
preemption workflow (``workflows/preemption.py``), whose pure decisions live in
``planner/preemption.py``.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from inference_api.payloads import OrderRef, order_workflow_id

# HPA condition types (autoscaling/v2) and the reasons this module reads.
ABLE_TO_SCALE = "AbleToScale"
SCALING_ACTIVE = "ScalingActive"
SCALING_LIMITED = "ScalingLimited"
TOO_MANY_REPLICAS = "TooManyReplicas"
TOO_FEW_REPLICAS = "TooFewReplicas"


def preemption_workflow_id(task_queue: str, device_class: str) -> str:
    """One preemption workflow per device class (and per task queue: one deployment of the module)."""
    return f"preemption/{task_queue}/{device_class}"


class _Payload(BaseModel):
    # A workflow payload (input, signal, update, activity argument or result, state): it drops fields it
    # does not know instead of refusing them, so a release rolled back to reads what a later release
    # wrote (docs/upgrade.md). Users' input is refused by the CRD schemas, not here.
    model_config = ConfigDict(extra="ignore")


class HpaCondition(_Payload):
    type: str
    status: str
    reason: str = ""
    message: str = ""


class ScalingObservation(_Payload):
    """The autoscaler of an order and its replicas, as read from the cluster."""

    autoscalerFound: bool = True
    # HPA status (desiredReplicas is clamped by the HPA to its own min/max).
    desiredReplicas: int = 0
    currentReplicas: int = 0
    # HPA spec: the effective bounds, a preemption ceiling included.
    minReplicas: int = 0
    maxReplicas: int = 0
    # Replicas bound to a node (they hold devices) and replicas the scheduler cannot place.
    placedReplicas: int = 0
    unschedulableReplicas: int = 0
    conditions: list[HpaCondition] = Field(default_factory=list)
    # Value of the PriorityClass the order's pods run with (0 without one, as in Kubernetes).
    priority: int = 0

    def condition(self, type_: str) -> HpaCondition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    def signature(self) -> tuple[object, ...]:
        """What counts as a change: numbers and condition (type, status, reason), not messages —
        an HPA rewrites its messages with live values, which would make every poll a change."""
        return (
            self.autoscalerFound,
            self.desiredReplicas,
            self.currentReplicas,
            self.minReplicas,
            self.maxReplicas,
            self.placedReplicas,
            self.unschedulableReplicas,
            tuple(sorted((c.type, c.status, c.reason) for c in self.conditions)),
            self.priority,
        )

    @property
    def wants_above_bound(self) -> bool:
        """The HPA would go higher than its maxReplicas (ScalingLimited=True, TooManyReplicas)."""
        limited = self.condition(SCALING_LIMITED)
        return limited is not None and limited.status == "True" and limited.reason == TOO_MANY_REPLICAS


class MemberReport(_Payload):
    """One order's standing on its device class, signalled to that class's preemption workflow.

    ``sequence`` grows with every report of one order workflow, so a late or repeated report is
    dropped. ``leaving``: the order was deleted, moved to another device class or stopped scaling.
    """

    ref: OrderRef
    workflowId: str
    deviceClass: str
    sequence: int
    leaving: bool = False
    priority: int = 0
    priorityClassName: str | None = None
    # The class's bounds (not the lowered ceiling).
    minReplicas: int = 1
    maxReplicas: int = 1
    # Capacity one replica holds: share percent x device count.
    unit: int = 100
    desired: int = 0
    placed: int = 0
    unschedulable: int = 0
    # The autoscaler wants more than its (possibly lowered) maxReplicas.
    limited: bool = False


class ReplicaCount(_Payload):
    namespace: str
    name: str
    value: int


class PreemptionMetrics(_Payload):
    """Absolute values of one device class's series: setting them twice changes nothing."""

    deviceClass: str
    preemptions: list[ReplicaCount] = Field(default_factory=list)
    held: list[ReplicaCount] = Field(default_factory=list)


# ------------------------------------------------------------------ the packed form of many members

# The layout of what :func:`pack_members` writes; a reader refuses a later layout it does not know.
PACKED_FORMAT = 1


def _flatten(row: Mapping[str, Any]) -> dict[str, Any]:
    """One level of nesting as dotted columns: ``{"ref": {"name": n}}`` is ``{"ref.name": n}``."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, dict):
            for inner, cell in value.items():
                out[f"{key}.{inner}"] = cell
        else:
            out[key] = value
    return out


def _unflatten(row: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        outer, dot, inner = key.partition(".")
        if dot:
            out.setdefault(outer, {})[inner] = value
        else:
            out[key] = value
    return out


def _table(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Rows of one model as columns and value lists: the field names are written once, not per row."""
    flat = [_flatten(row) for row in rows]
    columns: dict[str, None] = {}  # in the order first seen (every row of one model has the same keys)
    for row in flat:
        columns.update(dict.fromkeys(row))
    return {"columns": list(columns), "rows": [[row.get(column) for column in columns] for row in flat]}


def _untable(table: Mapping[str, Any]) -> list[dict[str, Any]]:
    # A column a later release added is dropped by the model (extra="ignore"); one it removed takes
    # the field's default.
    columns = list(table.get("columns", []))
    return [_unflatten(dict(zip(columns, row, strict=False))) for row in table.get("rows", [])]


def pack_members(device_class: str, reports: Mapping[str, MemberReport], metrics: PreemptionMetrics | None) -> str:
    """The members of one preemption workflow (and its metrics as last set), compact and deterministic.

    Canonical JSON (reports sorted by workflow id, one column list and a value list per report, the
    device class and a workflow id that :func:`~inference_api.payloads.order_workflow_id` derives from
    the ref left out), zlib-compressed and base64-encoded so it travels as a JSON string. The same
    arguments give the same string. Read back by :func:`unpack_members`; the reports are keyed by
    their ``workflowId``, as the workflow keys them.
    """
    rows: list[dict[str, Any]] = []
    # A metrics series names its order by namespace and name: the member's row instead, as the step from
    # the row the series named before (the series follow the members' order: mostly 1).
    index: dict[tuple[str, str], int] = {}
    for _, report in sorted(reports.items()):
        index.setdefault((report.ref.namespace, report.ref.name), len(rows))
        row = report.model_dump(mode="json")
        if row["deviceClass"] == device_class:
            row["deviceClass"] = None
        if row["workflowId"] == order_workflow_id(report.ref.namespace, report.ref.name, report.ref.uid):
            row["workflowId"] = None
        rows.append(row)
    packed_metrics: dict[str, Any] | None = None
    if metrics is not None:
        packed_metrics = metrics.model_dump(mode="json")
        for series in ("preemptions", "held"):
            counts, last = [], -1
            for count in packed_metrics[series]:
                member = index.get((count["namespace"], count["name"]))
                if member is not None:
                    count = {"memberStep": member - last, **count, "namespace": None, "name": None}
                    last = member
                counts.append(count)
            packed_metrics[series] = _table(counts)
    body = {"format": PACKED_FORMAT, "members": _table(rows), "metrics": packed_metrics}
    raw = json.dumps(body, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode("ascii")
    return base64.b64encode(zlib.compress(raw, 9)).decode("ascii")


def unpack_members(device_class: str, packed: str) -> tuple[dict[str, MemberReport], PreemptionMetrics | None]:
    """What :func:`pack_members` wrote: the reports by workflow id, and the metrics."""
    body = json.loads(zlib.decompress(base64.b64decode(packed, validate=True)))
    if body.get("format") != PACKED_FORMAT:
        raise ValueError(f"packed members of format {body.get('format')!r}: this release reads {PACKED_FORMAT}")
    reports: dict[str, MemberReport] = {}
    refs: list[OrderRef] = []
    for row in _untable(body["members"]):
        if row.get("deviceClass") is None:
            row["deviceClass"] = device_class
        if row.get("workflowId") is None:
            ref = row["ref"]
            row["workflowId"] = order_workflow_id(ref["namespace"], ref["name"], ref["uid"])
        report = MemberReport.model_validate(row)
        reports[report.workflowId] = report
        refs.append(report.ref)
    metrics: PreemptionMetrics | None = None
    if (packed_metrics := body.get("metrics")) is not None:
        series: dict[str, list[dict[str, Any]]] = {}
        for name in ("preemptions", "held"):
            series[name], last = [], -1
            for count in _untable(packed_metrics.get(name) or {}):
                if (step := count.pop("memberStep", None)) is not None:
                    last += step
                    count.update(namespace=refs[last].namespace, name=refs[last].name)
                series[name].append(count)
        metrics = PreemptionMetrics.model_validate({**packed_metrics, **series})
    return reports, metrics
