"""The preemption workflow's state stays under Temporal's payload limits at thousands of members.

One ``PreemptionWorkflow`` carries a report of every autoscaled order of its device class through
continue-as-new, and its ``state`` query returns it. Temporal refuses a payload over 2 MiB (and warns
over 512 KiB, the dev server's and the server's defaults); a continue-as-new whose input is refused
fails the run. Written plainly a member is about 480 bytes of JSON (its report, and its counter in the
metrics as last set), so a class of about 4,300 members failed its run; the state now packs its
members past a few hundred (``PreemptionState``, ``inference_api.preemption.pack_members``).

The sizes, as the module's data converter encodes the state (the figures in the workflow's docstring):

    .venv/bin/pytest -p no:cacheprovider tests/workflows/test_preemption_state_bound.py -k sizes -s -q

The last test runs the workflow on the real dev server: thousands of members signalled, the run
continued as new with all of them, and the next run deciding as the one before.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic_core import to_json
from temporalio import activity, workflow
from temporalio.api.common.v1 import Payloads
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer, Worker

from activities.metrics import PreemptionMetricsCollector
from activities.preemption import PreemptionActivities
from inference_api.payloads import OrderEvent, OrderRef, order_workflow_id
from inference_api.preemption import (
    MemberReport,
    PreemptionMetrics,
    ReplicaCount,
    pack_members,
    preemption_workflow_id,
    unpack_members,
)
from planner.preemption import decide, member_from_report
from tests.polling import until
from worker.worker import WORKFLOWS, workflow_runner
from workflows import activity_names as act
from workflows.preemption import (
    PLAIN_MEMBERS_BYTES,
    SHOWN_ROLES,
    SHOWN_TOP,
    PreemptionState,
    PreemptionTimings,
    PreemptionWorkflow,
    details_markdown,
)

KIB = 1024
WARN_BYTES = 512 * KIB  # Temporal's limit.blobSize.warn
LIMIT_BYTES = 2 * KIB * KIB  # limit.blobSize.error: a continue-as-new over it fails the run
DEVICE_CLASS = "nvidia-hopper-s3-shared"
LOW, NORMAL, HIGH = 100, 500, 1000
CLASS_NAMES = {LOW: "inference-low", NORMAL: "inference-normal", HIGH: "inference-high"}


# ------------------------------------------------------------------------------------ members


def report(
    i: int, rng: random.Random, *, priority: int | None = None, prefix: str = "chat-llama", **fields: Any
) -> MemberReport:
    """A report as an order workflow sends it (workflows/order_membership.py): its workflow id is the
    order's, ``order/<namespace>/<name>/<uid>``, the uid a UUID as Kubernetes gives."""
    namespace, name = f"team-{i % 97:03d}", f"{prefix}-{i:05d}"
    uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    chosen = priority if priority is not None else rng.choice([LOW, NORMAL, HIGH])
    values: dict[str, Any] = {
        "ref": OrderRef(namespace=namespace, name=name, uid=uid),
        "workflowId": order_workflow_id(namespace, name, uid),
        "deviceClass": DEVICE_CLASS,
        "sequence": rng.randint(1, 400),
        "priority": chosen,
        "priorityClassName": CLASS_NAMES.get(chosen),
        "minReplicas": 1,
        "maxReplicas": rng.randint(1, 8),
        "unit": rng.choice([25, 50, 100, 200]),
        "desired": rng.randint(1, 4),
        "placed": rng.randint(1, 4),
        "limited": rng.random() < 0.05,
    }
    values.update(fields)
    return MemberReport.model_validate(values)


def metrics_of(state: PreemptionState) -> PreemptionMetrics:
    """The metrics the workflow would set for this state (its own ``_metrics``)."""
    return PreemptionWorkflow._metrics(SimpleNamespace(state=state))  # type: ignore[arg-type]


def state_of(members: int, seed: int = 7, recipients: int = 20) -> PreemptionState:
    """A device class of ``members`` orders after a decision: a few recipients short of replicas (holds,
    ceilings, blocks), a counter per member in the metrics as last set — what a run carries."""
    rng = random.Random(seed)
    reports = [report(i, rng) for i in range(members - recipients)]
    reports += [
        report(members + i, rng, priority=HIGH + 1, prefix="urgent", desired=6, placed=1, unschedulable=5)
        for i in range(recipients)
    ]
    state = PreemptionState(deviceClass=DEVICE_CLASS, reports={r.workflowId: r for r in reports})
    decision = decide({wid: member_from_report(r) for wid, r in state.reports.items()}, state.ledger)
    state.ledger = decision.ledger
    state.ceilings = dict(decision.ledger.ceilings)
    state.blocked = dict(decision.blocked)
    state.preemptions = dict.fromkeys(decision.preempted, 1)
    state.decisions = 1
    state.log = [f"10:00:00 #1: took 1 from member-{i} for urgent-{i}" for i in range(20)]
    state.metrics = metrics_of(state)
    return state


def encoded(state: PreemptionState) -> bytes:
    (payload,) = pydantic_data_converter.payload_converter.to_payloads([state])
    return payload.data


def payload_size(state: PreemptionState) -> int:
    """What Temporal checks against its blob limits: the input's ``Payloads``, as the module's data
    converter (``worker/temporal_client.py``: the pydantic one) encodes the state."""
    return Payloads(payloads=pydantic_data_converter.payload_converter.to_payloads([state])).ByteSize()


def plain_size(state: PreemptionState) -> int:
    """The state as the previous release wrote it at any size (``reports`` and ``metrics`` plain)."""
    return len(to_json(state.model_dump()))


def decoded(data: bytes) -> PreemptionState:
    payloads = pydantic_data_converter.payload_converter.to_payloads([json.loads(data)])
    (state,) = pydantic_data_converter.payload_converter.from_payloads(payloads, [PreemptionState])
    assert isinstance(state, PreemptionState)
    return state


# ------------------------------------------------------------------------------------ the bound


def test_sizes() -> None:
    """The table behind the workflow's docstring (``-s`` prints it): the state as the previous release
    wrote it and as it is written now, and the metrics activity's input (one series a member: not
    packed, it is the bound that comes first now)."""
    print(f"\n{'members':>8} {'previous release':>17} {'now':>10} {'bytes/member':>13} {'metrics input':>14}")
    for members in (500, 1_000, 3_000, 10_000, 20_000, 40_000):
        state = state_of(members)
        size = payload_size(state)
        assert state.metrics is not None
        metrics = Payloads(payloads=pydantic_data_converter.payload_converter.to_payloads([state.metrics])).ByteSize()
        print(f"{members:>8} {plain_size(state):>17,} {size:>10,} {size / members:>13.1f} {metrics:>14,}")
        if members == 10_000:
            assert size < WARN_BYTES


@pytest.mark.parametrize(
    ("members", "bound"),
    [(3_000, WARN_BYTES), (10_000, WARN_BYTES), (10_000, LIMIT_BYTES), (40_000, LIMIT_BYTES)],
    ids=["3000-under-512KiB", "10000-under-512KiB", "10000-under-2MiB", "40000-under-2MiB"],
)
def test_the_state_of_a_large_device_class_stays_under_temporals_payload_limits(members: int, bound: int) -> None:
    state = state_of(members)
    size = payload_size(state)
    assert size < bound, f"{members} members: the state is {size:,} bytes, over {bound:,}"


def test_a_small_state_is_written_as_the_previous_release_wrote_it() -> None:
    """Under PLAIN_MEMBERS_BYTES nothing is packed: a rollback reads the state whole."""
    state = state_of(200)
    assert plain_size(state) < PLAIN_MEMBERS_BYTES
    body = json.loads(encoded(state))
    assert "packed" not in body
    assert set(body["reports"]) == set(state.reports)
    assert body["metrics"]["preemptions"]
    assert body == json.loads(to_json(state.model_dump()))


def test_a_large_state_carries_its_members_packed() -> None:
    state = state_of(2_000)
    body = json.loads(encoded(state))
    assert "reports" not in body
    assert "metrics" not in body
    assert isinstance(body["packed"], str)
    # What a rollback keeps without the members: the ledger, what the orders were told.
    assert body["ceilings"] == state.ceilings
    assert body["blocked"] == state.blocked
    assert body["ledger"]["holds"]


# ------------------------------------------------------------------------------------ pack and unpack


@pytest.mark.parametrize("members", [0, 1, 200, 2_000])
def test_the_state_reads_back_as_it_was(members: int) -> None:
    state = state_of(members, recipients=min(members, 20))
    read = decoded(encoded(state))
    assert read == state
    assert read.reports == state.reports
    assert read.metrics == state.metrics


def test_packed_members_read_back_whatever_their_ids_and_classes() -> None:
    rng = random.Random(3)
    regular = report(1, rng)
    named = report(2, rng, workflowId="order-by-another-scheme")  # not order_workflow_id(...)
    other_class = report(3, rng, deviceClass="another-class")
    leaving = report(4, rng, leaving=True, priorityClassName=None, unschedulable=2)
    reports = {r.workflowId: r for r in (regular, named, other_class, leaving)}
    metrics = PreemptionMetrics(
        deviceClass=DEVICE_CLASS,
        preemptions=[ReplicaCount(namespace="team-001", name="chat-llama-00001", value=3)],
        held=[],
    )
    assert unpack_members(DEVICE_CLASS, pack_members(DEVICE_CLASS, reports, metrics)) == (reports, metrics)
    assert unpack_members(DEVICE_CLASS, pack_members(DEVICE_CLASS, {}, None)) == ({}, None)


def test_the_same_state_packs_to_the_same_bytes() -> None:
    state = state_of(3_000)
    again = state_of(3_000)
    assert again is not state
    assert encoded(again) == encoded(state)
    # The order the members reported in does not show.
    shuffled = state.model_copy(update={"reports": dict(reversed(list(state.reports.items())))})
    assert encoded(shuffled) == encoded(state)
    assert pack_members(DEVICE_CLASS, state.reports, state.metrics) == pack_members(
        DEVICE_CLASS, shuffled.reports, state.metrics
    )
    # And what is read back packs to the same bytes again.
    assert encoded(decoded(encoded(state))) == encoded(state)


def test_the_previous_release_state_is_read_at_any_size() -> None:
    """The previous release wrote ``reports`` and ``metrics`` plainly, also past the point where this
    one packs them (its runs of up to ~4,300 members): read as before."""
    state = state_of(2_000)
    previous = to_json(state.model_dump())
    assert len(previous) > PLAIN_MEMBERS_BYTES
    assert b'"packed"' not in previous
    assert decoded(previous) == state


def test_packed_rows_of_a_later_release_are_read() -> None:
    """A later release's pack with a column this one does not know (dropped) and without one it knows
    (its default), as ``extra="ignore"`` reads the plain form (docs/upgrade.md, rule 3)."""
    import base64
    import zlib

    rng = random.Random(5)
    member = report(1, rng, limited=True)
    body = json.loads(zlib.decompress(base64.b64decode(pack_members(DEVICE_CLASS, {member.workflowId: member}, None))))
    columns: list[str] = body["members"]["columns"]
    (row,) = body["members"]["rows"]
    limited = columns.index("limited")
    body["members"]["columns"] = [*columns[:limited], *columns[limited + 1 :], "aLaterField", "ref.aLaterRefField"]
    body["members"]["rows"] = [[*row[:limited], *row[limited + 1 :], {"any": 1}, "x"]]
    later = base64.b64encode(zlib.compress(json.dumps(body).encode())).decode()
    reports, _ = unpack_members(DEVICE_CLASS, later)
    assert reports == {member.workflowId: member.model_copy(update={"limited": False})}
    body["format"] = 2
    unknown = base64.b64encode(zlib.compress(json.dumps(body).encode())).decode()
    with pytest.raises(ValueError, match="format 2"):
        unpack_members(DEVICE_CLASS, unknown)


# What this release packs (format 1), frozen: every later release reads it (a run continued as new by
# this one). Two members of device class "gpu": one with an order's workflow id (left out of the pack),
# one with another; and the metrics as last set.
FROZEN_PACK = (
    "eNqtUU1TwyAU/C+ciQNpY22vnrx40GMnBwKPhpEvCbRWp/9dIBnNePZCdsPj7b63X0i6YFhEB4qRATNAmNDhC3Gnk7EZHlEAeWeZgckz"
    "Dgj/8AUmJTK6uPAmtbs8FSLgrDg8ajZNmU3wnsDWpxrYWdlTRj4oF1S8rmCtf54bG2VfwGvFWelg2MeKJatiFZlUgCLndTYm6s3ERxBJs0FX"
    "OWVUzDd9duouZZgjGljkY3GVjGFBfZY6Mux5M8/hgoDQDNeGWRfHDEvHYskmrfEGS6YnwJSQ+QfFW9yRfGwxwTEk6PExt/beheKRj6x87jmV"
    "RLTQ0GHHmi3vumbPOtq0ciN3w4PYA6GLQj12vzIEI2UlhLLAZlSnbH3R3GTQzoV9fyvhxaB4DW+9/wM6+VS3DGB8VM7+zXdO/TWCz2XroJeQ"
    "z0wnWO+QrqySPPCat9XLCFr8p0rpert9A6Vh4bI="
)


def test_a_pack_of_this_release_is_read() -> None:
    uid = "6c1f0d2e-1b7a-4c55-9a51-2f3f7b8d9e01"
    urgent = MemberReport(
        ref=OrderRef(namespace="support", name="chat", uid=uid),
        workflowId=order_workflow_id("support", "chat", uid),
        deviceClass="gpu",
        sequence=7,
        priority=1000,
        priorityClassName="inference-high",
        minReplicas=1,
        maxReplicas=4,
        unit=50,
        desired=3,
        placed=1,
        unschedulable=2,
    )
    donor = MemberReport(
        ref=OrderRef(namespace="batch", name="summarize", uid="0b9c-uid"),
        workflowId="order-by-another-scheme",
        deviceClass="gpu",
        sequence=3,
        priority=100,
        minReplicas=1,
        maxReplicas=4,
        unit=50,
        desired=4,
        placed=4,
        limited=True,
    )
    metrics = PreemptionMetrics(
        deviceClass="gpu",
        preemptions=[
            ReplicaCount(namespace="batch", name="summarize", value=0),
            ReplicaCount(namespace="support", name="chat", value=2),
        ],
        held=[ReplicaCount(namespace="batch", name="summarize", value=2)],
    )
    reports = {urgent.workflowId: urgent, donor.workflowId: donor}
    assert unpack_members("gpu", FROZEN_PACK) == (reports, metrics)
    state = decoded(
        json.dumps({"deviceClass": "gpu", "packed": FROZEN_PACK, "ceilings": {donor.workflowId: 2}}).encode()
    )
    assert state.reports == reports
    assert state.metrics == metrics
    assert state.ceilings == {donor.workflowId: 2}


# ------------------------------------------------------------------------------------ the details


def test_the_details_show_a_bounded_table() -> None:
    state = state_of(10_000, recipients=150)
    members = [wid for wid, r in state.reports.items() if not r.leaving]
    text = details_markdown(state, "Blocked")
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| order ")]
    assert SHOWN_TOP < len(rows) <= SHOWN_TOP + SHOWN_ROLES
    assert len(text) < 64 * KIB
    assert f"**Members:** {len(members)}" in text
    assert f"… and {len(members) - len(rows)} more member(s)" in text
    # The highest-priority members come first, recipients among them.
    first = sorted(state.reports.values(), key=lambda r: (-r.priority, r.ref.key))[0]
    assert rows[0].startswith(f"| {first.ref.key} |")
    assert "recipient" in rows[0]
    small = state_of(30, recipients=3)
    assert "more member(s)" not in details_markdown(small, "Holding")


# ------------------------------------------------------------------------------------ on the dev server

MEMBERS = 5_000  # the previous release's run failed its continue-as-new past ~4,300 members (2 MiB)
DONORS, RECIPIENTS = 5, 3
SERVER_RETRIED = (
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND,
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_FORCE_CLOSE_COMMAND,
)
BATCH = 250


@workflow.defn(name="PreemptionMemberStub", sandboxed=False)
class MemberStub:
    """Stands in for an order workflow the preemption workflow signals (a donor, a recipient)."""

    def __init__(self) -> None:
        self.told: dict[str, Any] = {}

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.signal(name="set_replica_ceiling")
    def set_replica_ceiling(self, ceiling: int | None) -> None:
        self.told["ceiling"] = ceiling

    @workflow.signal(name="scaling_blocked")
    def scaling_blocked(self, reason: str | None) -> None:
        self.told["blocked"] = reason

    @workflow.query(name="told")
    def query_told(self) -> dict[str, Any]:
        return self.told


@activity.defn(name=act.RECORD_EVENT)
async def record_event(event: OrderEvent) -> None:
    pass


def members_of(state: PreemptionState) -> dict[str, MemberReport]:
    return {wid: r for wid, r in state.reports.items() if not r.leaving}


@pytest.mark.temporal
@pytest.mark.timeout(300)
async def test_a_run_of_thousands_of_members_continues_as_new_with_every_one(temporal_client: Client) -> None:
    """5,000 members signalled (a run continues as new every ~100 events, so many times on the way):
    no workflow task fails, the run after the last continue-as-new started with every member, and it
    decides as the one before it did. Before the state was packed this run stuck at about 3,900
    members: the worker refused to upload the continue-as-new's input (``PayloadsTooLarge``, "[TMPRL1103]
    Attempted to upload payloads with size that exceeded the error limit"), the workflow task failed on
    every attempt, and the ``state`` query was refused ("Blob data size exceeds limit")."""
    client = temporal_client
    rng = random.Random(11)
    task_queue = f"preemption-bound-{uuid.uuid4().hex[:8]}"
    donors = [
        report(i, rng, priority=LOW, prefix="donor", unit=100, minReplicas=1, maxReplicas=4, desired=4, placed=4)
        for i in range(DONORS)
    ]
    recipients = [
        report(
            i,
            rng,
            priority=HIGH,
            prefix="urgent",
            unit=100,
            maxReplicas=40,
            desired=want,
            placed=1,
            unschedulable=want - 1,
        )
        for i, want in enumerate((3, 3, 20))
    ]
    bulk = [
        report(i, rng, priority=NORMAL, unit=100, minReplicas=1, maxReplicas=1, desired=1, placed=1, limited=False)
        for i in range(MEMBERS - DONORS - RECIPIENTS)
    ]
    everyone = [*donors, *recipients, *bulk]
    timings = PreemptionTimings(
        idleSeconds=600, metricsRefreshSeconds=600, activityTimeoutSeconds=10, maxHistoryEvents=100
    )
    workflow_id = preemption_workflow_id(task_queue, DEVICE_CLASS)
    handle = client.get_workflow_handle(workflow_id)
    stubs = [client.get_workflow_handle(r.workflowId) for r in [*donors, *recipients]]

    async def running() -> None:
        """The run goes on: not ended, and no workflow task of it failed (a payload over the limit
        fails the task that would carry it, on every attempt: the run is stuck, still Running)."""
        described = await handle.describe()
        if described.status != WorkflowExecutionStatus.RUNNING:
            events = [e async for e in handle.fetch_history_events()]
            raise AssertionError(f"the preemption workflow is {described.status}: {events[-1]}")
        attempt = described.raw_description.pending_workflow_task.attempt
        if attempt > 1:
            failed = [
                e.workflow_task_failed_event_attributes
                async for e in handle.fetch_history_events()
                if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
            ]
            # The server fails a task now and then while signals pour in (a close command with new
            # events, a forced close): it is retried at once and goes through. Anything else, or a
            # task that keeps failing, is the run stuck.
            if not failed or failed[-1].cause not in SERVER_RETRIED or attempt > 3:
                cause = WorkflowTaskFailedCause.Name(failed[-1].cause) if failed else "?"
                message = failed[-1].failure.message if failed else ""
                raise AssertionError(f"the preemption workflow's task fails (attempt {attempt}): {cause} {message}")

    async def quiet(expected: int) -> PreemptionState | None:
        """The state once every report heard was decided on to the end: the orders told, then the
        metrics set (the decision's last step) for what the state holds."""
        await running()
        state = await handle.query(PreemptionWorkflow.query_state)
        settled = not state.dirty and state.metrics == metrics_of(state)
        return state if settled and len(members_of(state)) == expected else None

    async def first_input() -> PreemptionState:
        """What the current run was started with: the previous run's continue-as-new."""
        started = await anext(aiter(handle.fetch_history_events()))
        assert started.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
        attributes = started.workflow_execution_started_event_attributes
        assert attributes.continued_execution_run_id, "the run continued as new"
        (state,) = await client.data_converter.decode(attributes.input.payloads, [PreemptionState])
        assert isinstance(state, PreemptionState)
        return state

    metrics = PreemptionMetricsCollector()
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[PreemptionWorkflow, MemberStub],
        activities=[PreemptionActivities(metrics=metrics).publish_preemption_metrics, record_event],
        workflow_runner=workflow_runner(isolate_workflow_modules=True),
        workflow_failure_exception_types=[workflow.NondeterminismError],
    )
    async with worker:
        try:
            for stub in stubs:
                await client.start_workflow(MemberStub.run, id=stub.id, task_queue=task_queue)
            await client.start_workflow(
                PreemptionWorkflow.run,
                PreemptionState(deviceClass=DEVICE_CLASS, timings=timings),
                id=workflow_id,
                task_queue=task_queue,
            )
            for start in range(0, len(everyone), BATCH):
                await asyncio.gather(*(handle.signal("observe", r) for r in everyone[start : start + BATCH]))
                await running()
            before = await until(lambda: quiet(MEMBERS), timeout=120, what=f"{MEMBERS} members decided on")
            assert before.ledger.holds, "recipients took from the donors"
            assert before.blocked, "one is short"

            # More reports of the same standing (events, no change) make the run continue as new.
            run = (await handle.describe()).run_id
            touched = [r.model_copy(update={"sequence": r.sequence + 1}) for r in bulk[:120]]
            await asyncio.gather(*(handle.signal("observe", r) for r in touched))

            async def continued() -> bool:
                await running()
                return (await handle.describe()).run_id != run

            await until(continued, timeout=60, what="the run continued as new")
            carried = await first_input()
            assert members_of(carried).keys() == members_of(before).keys()
            after = await until(lambda: quiet(MEMBERS), timeout=60, what="the new run settled")
            for name in ("ledger", "ceilings", "blocked", "preemptions"):
                assert getattr(carried, name) == getattr(before, name), name
                assert getattr(after, name) == getattr(before, name), name
            assert after.reports == {**before.reports, **{r.workflowId: r for r in touched}}
            # The donors were told their ceilings, the short recipient that it cannot grow.
            for member in [*donors, *recipients]:
                told = await client.get_workflow_handle(member.workflowId).query(MemberStub.query_told)
                assert told.get("ceiling") == after.ceilings.get(member.workflowId), member.ref.key
                assert told.get("blocked") == after.blocked.get(member.workflowId), member.ref.key

            # The new run decides as the pure decision over every member does: the short recipient
            # wants less, the surplus goes back to the donors.
            less = recipients[2].model_copy(
                update={"sequence": recipients[2].sequence + 1, "desired": 10, "unschedulable": 9}
            )
            members = {wid: member_from_report(r) for wid, r in members_of(after).items()}
            members[less.workflowId] = member_from_report(less)
            expected = decide(members, after.ledger, 0)
            assert expected.released
            assert expected.ledger != after.ledger
            await handle.signal("observe", less)

            async def decided_on_less() -> PreemptionState | None:
                state = await quiet(MEMBERS)
                heard = state is not None and state.reports[less.workflowId].sequence == less.sequence
                return state if heard and state is not None and state.decisions > after.decisions else None

            decided = await until(decided_on_less, timeout=60, what="the smaller demand decided")
            assert decided.ledger == expected.ledger
            assert decided.blocked == dict(expected.blocked)

            # The run that started from a packed state replays on this code, as the module's worker runs it.
            replayer = Replayer(
                workflows=WORKFLOWS, data_converter=pydantic_data_converter, workflow_runner=workflow_runner()
            )
            replayed = await replayer.replay_workflow(await handle.fetch_history(), raise_on_replay_failure=False)
            assert replayed.replay_failure is None, repr(replayed.replay_failure)
        finally:
            for stub in [*stubs, handle]:
                with contextlib.suppress(Exception):  # already ended
                    await stub.terminate("test over")
