"""The preemption workflow: one per device class, moving capacity between its orders by priority.

Why one per device class: capacity is only interchangeable inside one device class (a donor on
another class frees nothing a recipient can use), so each class is an independent problem. One
workflow per class serializes every decision about one pool of devices — two decisions can
never hand out the same donor replica — while classes proceed in parallel, and each workflow's
state and signal rate stay bounded by the orders of one class. A workflow per cluster would
serialize unrelated pools and carry every order in one history; one per order would race.

Members are the autoscaled orders of the class. Each order workflow signals ``observe`` with a
:class:`MemberReport` whenever its autoscaler's state changes (signal-with-start, from an
activity: a workflow cannot signal-with-start). A decision (``planner.preemption.decide``, pure)
runs after every batch of reports; its outcome goes out as signals to the order workflows:
``set_replica_ceiling(ceiling | None)`` to donors and ``scaling_blocked(reason | None)`` to orders
that cannot grow. Everything the decisions remember — holds, recipients' bases, ceilings and
blocks as signalled, preemption totals — is in :class:`PreemptionState`, carried by
continue-as-new, so a worker that dies mid-decision loses nothing and a replay counts nothing
twice. Metrics are set from that state by an activity, as absolute values.

The state is bounded. It holds a report per member and the member's series in the metrics as last
set: about 550 bytes of JSON a member, so written plainly a run's continue-as-new input passed
Temporal's 512 KiB warning at about 960 members of one device class and its 2 MiB limit at about
3,800, where the worker refuses to upload it (``PayloadsTooLarge``) and the run is stuck on a failing
workflow task (the ``state`` query is refused likewise). Past ``PLAIN_MEMBERS_BYTES`` (a few hundred
members) the reports and metrics travel packed (:class:`PreemptionState`,
``inference_api.preemption.pack_members``): about 46 bytes a member, so the state stays under 512 KiB
up to about 10,900 members per device class and under 2 MiB up to about 45,000 (measured by
``tests/workflows/test_preemption_state_bound.py -k sizes -s``: 10,000 members 480 KB, 40,000 members
1.8 MB). What then grows past the limits first is the metrics activity's input (one series a member,
not packed): 512 KiB (a warning) at about 8,500 members, 2 MiB at about 34,000. Encoding and decoding
the packed state costs about 30 µs a member in the workflow task that continues as new and the one
that starts the next run. The details (Markdown) show a bounded table: the ``SHOWN_TOP``
highest-priority members and up to ``SHOWN_ROLES`` recipients, donors and blocked ones.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, FailureError

with workflow.unsafe.imports_passed_through():
    from pydantic import (
        BaseModel,
        ConfigDict,
        Field,
        SerializationInfo,
        SerializerFunctionWrapHandler,
        model_serializer,
        model_validator,
    )
    from pydantic_core import to_json

    from inference_api.payloads import OrderEvent, OrderRef
    from inference_api.preemption import (
        MemberReport,
        PreemptionMetrics,
        ReplicaCount,
        pack_members,
        unpack_members,
    )
    from inference_api.reasons import EventReason
    from planner.preemption import Decision, Ledger, decide, freed_units, held_replicas, member_from_report
    from workflows import activity_names as act
    from workflows.retry_policies import UNTIL_IT_ANSWERS
    from workflows.search_attributes import preemption_search_attributes

SET_REPLICA_CEILING = "set_replica_ceiling"
SCALING_BLOCKED = "scaling_blocked"
LOG_LENGTH = 20
# What one line of the decision log names at most (a decision that moves many replicas is summed up).
LOG_ITEMS = 10
# The Markdown details: the highest-priority members, and members with a role (recipient, donor,
# blocked), highest priority first; the rest is counted.
SHOWN_TOP = 50
SHOWN_ROLES = 100
# The state's members and metrics are written as the previous release wrote them (``reports``,
# ``metrics``) while their JSON is at most this long, packed (``packed``) beyond: see PreemptionState.
PLAIN_MEMBERS_BYTES = 256 * 1024


class PreemptionTimings(BaseModel):
    # Fields of a later release are dropped, not refused: a rollback reads what that release wrote
    # (docs/upgrade.md).
    model_config = ConfigDict(extra="ignore")
    # With no member and no hold, the run ends after this long (a new report starts it again).
    idleSeconds: float = 3600
    # While replicas are held, the metrics are set again this often (a restarted worker exports them).
    metricsRefreshSeconds: float = 300
    activityTimeoutSeconds: float = 30
    maxHistoryEvents: int = 2000


class PreemptionState(BaseModel):
    model_config = ConfigDict(extra="ignore")
    deviceClass: str
    timings: PreemptionTimings = Field(default_factory=PreemptionTimings)
    # Last report of each order workflow (by workflow id); a leaving one stays as a tombstone until
    # the next continue-as-new, so a late report of a gone order is recognised as old.
    reports: dict[str, MemberReport] = Field(default_factory=dict)
    ledger: Ledger = Field(default_factory=Ledger)
    freedUnits: int = 0
    # What the order workflows were told (the ledger is what they should be told).
    ceilings: dict[str, int] = Field(default_factory=dict)
    blocked: dict[str, str] = Field(default_factory=dict)
    preemptions: dict[str, int] = Field(default_factory=dict)
    decisions: int = 0
    log: list[str] = Field(default_factory=list)
    dirty: bool = False
    # The metrics as last set (they are set again only when they change, or on a timer).
    metrics: PreemptionMetrics | None = None

    # How the state travels (continue-as-new input, the ``state`` query). ``reports`` and ``metrics``
    # grow with the members (about 550 bytes of JSON a member); Temporal refuses a payload over 2 MiB
    # (and warns over 512 KiB), and a continue-as-new refused leaves the run stuck. Small, they are
    # written exactly as the previous release wrote them (a rollback reads them); past
    # PLAIN_MEMBERS_BYTES as one ``packed`` string instead (inference_api.preemption.pack_members:
    # columnar JSON, zlib, base64; about 46 bytes a member). Both forms are read. The choice depends on
    # the state alone, so a replay writes the same. docs/upgrade.md.

    @model_validator(mode="before")
    @classmethod
    def _unpack(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("packed") is None:
            return data
        data = dict(data)
        reports, metrics = unpack_members(str(data.get("deviceClass", "")), data.pop("packed"))
        # Only the packed form is written; plain entries beside it (none) would be the newer.
        data["reports"] = {**reports, **(data.get("reports") or {})}
        if data.get("metrics") is None:
            data["metrics"] = metrics
        return data

    @model_serializer(mode="wrap")
    def _pack(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        if not info.mode_is_json():
            return handler(self)
        if len(self.reports) * _SHORTEST_REPORT_BYTES <= PLAIN_MEMBERS_BYTES:
            plain = handler(self)
            if not isinstance(plain, dict) or not {"reports", "metrics"} <= plain.keys():
                return plain  # some of it excluded by the caller
            if len(to_json(plain["reports"])) + len(to_json(plain["metrics"])) <= PLAIN_MEMBERS_BYTES:
                return plain
        rest = handler(self.model_copy(update={"reports": {}, "metrics": None}))
        packed = {key: value for key, value in rest.items() if key not in ("reports", "metrics")}
        packed["packed"] = pack_members(self.deviceClass, self.reports, self.metrics)
        return packed


# No report's JSON is shorter (its field names alone): past PLAIN_MEMBERS_BYTES / this many reports the
# state is packed without measuring its plain form first.
_SHORTEST_REPORT_BYTES = len(
    MemberReport(
        ref=OrderRef(namespace="", name="", uid=""), workflowId="", deviceClass="", sequence=0, priorityClassName=""
    ).model_dump_json()
)


@workflow.defn(name="PreemptionWorkflow")
class PreemptionWorkflow:
    @workflow.init
    def __init__(self, state: PreemptionState) -> None:
        # Set before any handler runs: signal-with-start delivers the signal before run() starts.
        self.state = state

    @workflow.signal(name="observe")
    def observe(self, report: MemberReport) -> None:
        state = self.state
        if report.deviceClass != state.deviceClass:
            return
        previous = state.reports.get(report.workflowId)
        if previous is not None and report.sequence <= previous.sequence:
            return  # late or repeated
        before = member_from_report(previous) if previous is not None and not previous.leaving else None
        after = None if report.leaving else member_from_report(report)
        state.freedUnits += freed_units(before, after, state.ledger)
        state.reports[report.workflowId] = report
        state.dirty = True

    @workflow.query(name="state")
    def query_state(self) -> PreemptionState:
        """The whole state; beyond a few hundred members its reports and metrics travel packed (decoded
        as a PreemptionState, they are whole again)."""
        return self.state

    @workflow.run
    async def run(self, state: PreemptionState) -> str:
        state = self.state
        self._show()
        if state.metrics is not None:
            # A new run may be served by a new worker process: set the series again.
            await self._publish_metrics(force=True)
        while True:
            if state.dirty:
                state.dirty = False
                await self._decide()
                continue
            if self._should_continue_as_new():
                await workflow.wait_condition(workflow.all_handlers_finished)
                self._prune()
                workflow.continue_as_new(state)
            idle = not self._members() and not state.ledger.holds
            timings = state.timings
            timeout = timings.idleSeconds if idle else (timings.metricsRefreshSeconds if state.ledger.holds else None)
            try:
                await workflow.wait_condition(
                    lambda: state.dirty,
                    timeout=timedelta(seconds=timeout) if timeout is not None else None,
                    timeout_summary="idle" if idle else "refresh metrics",
                )
            except TimeoutError:
                if idle:
                    await workflow.wait_condition(workflow.all_handlers_finished)
                    if not state.dirty:
                        self._prune()
                        await self._publish_metrics()
                        return "idle"
                else:
                    await self._publish_metrics(force=True)

    # ------------------------------------------------------------------ decisions

    def _members(self) -> dict[str, MemberReport]:
        return {wid: r for wid, r in self.state.reports.items() if not r.leaving}

    def _name(self, workflow_id: str) -> str:
        report = self.state.reports.get(workflow_id)
        return report.ref.key if report is not None else workflow_id

    async def _decide(self) -> None:
        state = self.state
        members = {wid: member_from_report(r) for wid, r in self._members().items()}
        decision = decide(members, state.ledger, state.freedUnits)
        state.freedUnits = 0
        state.ledger = decision.ledger
        state.decisions += 1
        for recipient in decision.preempted:
            state.preemptions[recipient] = state.preemptions.get(recipient, 0) + 1
        self._record(decision)
        self._show()
        # Donors first (lower before anyone is told it may grow), then who is blocked.
        for wid in sorted(set(state.ceilings) | set(state.ledger.ceilings)):
            want = state.ledger.ceilings.get(wid)
            if state.ceilings.get(wid) != want:
                await self._signal(wid, SET_REPLICA_CEILING, want)
                if want is None:
                    state.ceilings.pop(wid, None)
                else:
                    state.ceilings[wid] = want
        for wid in sorted(set(state.blocked) | set(decision.blocked)):
            reason = decision.blocked.get(wid)
            if state.blocked.get(wid) != reason:
                await self._signal(wid, SCALING_BLOCKED, reason)
                if reason is None:
                    state.blocked.pop(wid, None)
                else:
                    state.blocked[wid] = reason
        for recipient in decision.preempted:
            await self._event_on_recipient(recipient, decision)
        await self._publish_metrics()
        self._show()

    def _record(self, decision: Decision) -> None:
        state = self.state
        words: list[str] = []
        for hold in decision.taken:
            words.append(f"took {hold.replicas} from {self._name(hold.donor)} for {self._name(hold.recipient)}")
        for hold in decision.released:
            words.append(f"gave {hold.replicas} back to {self._name(hold.donor)} from {self._name(hold.recipient)}")
        for wid in decision.blocked:
            if wid not in state.blocked:
                words.append(f"{self._name(wid)} cannot grow")
        for wid in state.blocked:
            if wid not in decision.blocked:
                words.append(f"{self._name(wid)} can grow again")
        if not words:
            return
        workflow.logger.info("preemption on %s: %s", state.deviceClass, "; ".join(words))
        if len(words) > LOG_ITEMS:  # the log travels in the state: bounded
            words = [*words[:LOG_ITEMS], f"and {len(words) - LOG_ITEMS} more"]
        stamp = workflow.now().strftime("%H:%M:%S")
        state.log = [*state.log, f"{stamp} #{state.decisions}: " + "; ".join(words)][-LOG_LENGTH:]

    async def _signal(self, workflow_id: str, signal: str, arg: int | str | None) -> None:
        handle = workflow.get_external_workflow_handle(workflow_id)
        try:
            await handle.signal(signal, arg)
        except (ApplicationError, FailureError) as err:
            # The order workflow is gone (deleted order): forget it; the next decision drops its holds.
            workflow.logger.info("order workflow %s not signalled (%s): dropped", workflow_id, err)
            report = self.state.reports.get(workflow_id)
            if report is not None and not report.leaving:
                self.state.reports[workflow_id] = report.model_copy(update={"leaving": True})
                self.state.dirty = True

    async def _event_on_recipient(self, recipient: str, decision: Decision) -> None:
        report = self.state.reports.get(recipient)
        if report is None:
            return
        donors = ", ".join(
            f"{self._name(h.donor)} (-{h.replicas}, maxReplicas {decision.ledger.ceilings.get(h.donor)})"
            for h in decision.taken
            if h.recipient == recipient
        )
        event = OrderEvent(
            ref=report.ref,
            reason=EventReason.CAPACITY_PREEMPTED,
            message=f"capacity on device class {self.state.deviceClass} preempted for this order from "
            f"lower-priority orders: {donors}",
        )
        # Tried until the API server takes it; one refused for good is dropped: the decision stands
        # either way. Before, five attempts over about 15 s and the exhausted retry failed the whole
        # run — an API server away for a quarter of a minute ended preemption on the device class, its
        # holds with it. Not patched: the command is the same activity (a retry policy is not part of
        # what a replay compares), and a patch marker would make this release impossible to roll back
        # over (docs/upgrade.md); only a run that already failed took the old path to its end.
        try:
            await workflow.execute_activity(
                act.RECORD_EVENT,
                event,
                start_to_close_timeout=timedelta(seconds=self.state.timings.activityTimeoutSeconds),
                retry_policy=UNTIL_IT_ANSWERS,
                summary=f"event on {report.ref.key}",
            )
        except ActivityError as err:
            workflow.logger.warning("CapacityPreempted event on %s dropped: %s", report.ref.key, err.cause or err)

    def _metrics(self) -> PreemptionMetrics:
        """The series of this device class. Every member has a preemption counter, at 0 until its first
        preemption: ``increase()`` needs a sample before the step, or the first preemption of an order
        would never show (a series that is born at 1 has not increased)."""
        state = self.state
        preemptions = [
            ReplicaCount(namespace=r.ref.namespace, name=r.ref.name, value=state.preemptions.get(wid, 0))
            for wid, r in sorted(state.reports.items())
            if not r.leaving or wid in state.preemptions
        ]
        held = [
            ReplicaCount(namespace=r.ref.namespace, name=r.ref.name, value=count)
            for wid, count in held_replicas(state.ledger).items()
            if (r := state.reports.get(wid)) is not None
        ]
        return PreemptionMetrics(deviceClass=state.deviceClass, preemptions=preemptions, held=held)

    async def _publish_metrics(self, force: bool = False) -> None:
        state = self.state
        metrics = self._metrics()
        if metrics == state.metrics and not force:
            return
        state.metrics = metrics
        await workflow.execute_activity(
            act.PUBLISH_PREEMPTION_METRICS,
            metrics,
            start_to_close_timeout=timedelta(seconds=state.timings.activityTimeoutSeconds),
            retry_policy=UNTIL_IT_ANSWERS,
            summary="metrics",
        )

    # --------------------------------------------------------------- housekeeping

    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        return info.is_continue_as_new_suggested() or (
            info.get_current_history_length() > self.state.timings.maxHistoryEvents
        )

    def _prune(self) -> None:
        """Tombstones and totals of orders that left go with the run (bounded state)."""
        state = self.state
        state.reports = {wid: r for wid, r in state.reports.items() if not r.leaving}
        state.preemptions = {wid: n for wid, n in state.preemptions.items() if wid in state.reports}
        state.blocked = {wid: b for wid, b in state.blocked.items() if wid in state.reports}

    def _show(self) -> None:
        """The Temporal UI is the view of what preemption decided: search attributes and Markdown."""
        state = self.state
        status = "Blocked" if state.blocked else "Holding" if state.ledger.holds else "Idle"
        workflow.upsert_search_attributes(preemption_search_attributes(state.deviceClass, status))
        workflow.set_current_details(details_markdown(state, status))


def details_markdown(state: PreemptionState, status: str) -> str:
    """The workflow's details: a bounded table (SHOWN_TOP highest-priority members and up to SHOWN_ROLES
    recipients, donors and blocked ones; the rest counted) and the recent decisions."""
    held = held_replicas(state.ledger)
    recipients = {r.key for r in state.ledger.recipients}
    members = sorted(
        ((wid, r) for wid, r in state.reports.items() if not r.leaving), key=lambda kv: (-kv[1].priority, kv[1].ref.key)
    )
    with_role = [wid for wid, _ in members if wid in recipients or wid in held or wid in state.blocked]
    shown = {wid for wid, _ in members[:SHOWN_TOP]} | set(with_role[:SHOWN_ROLES])
    rows = []
    for wid, report in members:
        if wid not in shown:
            continue
        role = []
        if wid in recipients:
            role.append(f"recipient ({state.ledger.held_for(wid)} held for it)")
        if wid in held:
            role.append(f"donor (-{held[wid]})")
        if wid in state.blocked:
            role.append("**blocked**")
        ceiling = state.ledger.ceilings.get(wid)
        rows.append(
            f"| {report.ref.key} | {report.priorityClassName or '—'} ({report.priority}) | "
            f"{report.minReplicas}..{report.maxReplicas} | {ceiling if ceiling is not None else '—'} | "
            f"{report.placed}/{report.desired}"
            + (f" (+{report.unschedulable} unschedulable)" if report.unschedulable else "")
            + f" | {', '.join(role) or '—'} | {state.preemptions.get(wid, 0)} |"
        )
    more = ""
    if len(shown) < len(members):
        hidden_roles = len(with_role) - len(shown.intersection(with_role))
        more = (
            f"\n\n*… and {len(members) - len(shown)} more member(s)"
            + (f", {hidden_roles} of them recipient, donor or blocked" if hidden_roles else "")
            + " (the `state` query has every one).*"
        )
    log = "\n".join(f"- {line}" for line in reversed(state.log)) or "- none yet"
    return (
        f"## Preemption on {state.deviceClass}\n\n"
        f"**Status:** {status} · **Members:** {len(members)} · **Decisions:** {state.decisions} · "
        f"**Held replicas:** {sum(held.values())}\n\n"
        "| order | priority | class bounds | ceiling | placed/desired | role | preemptions |\n"
        "|---|---|---|---|---|---|---|\n" + "\n".join(rows) + more + "\n\n### Recent decisions\n" + log
    )
