"""The periodic resync: the listing of orders against Temporal's running order workflows.

Level-triggered repair of whatever events could not say: an order whose workflow is missing (a lost
Temporal database comes back from the listing) is started; a workflow of a legacy type is moved onto
the current one; a workflow whose order is gone hears ``delete`` and, still running at the next
resync, is terminated; a workflow whose ``OrderRelease`` is not the release in force (or unset)
hears ``settings_changed``. One visibility listing per resync; the comparison is
``decisions.plan_resync`` (pure); the deliveries go through the outbox (retried, never dropped).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from datetime import timedelta

import structlog
from temporalio.client import Client

from inference_api.observation import OrderSignal
from inference_api.payloads import order_workflow_id
from worker.observer.decisions import (
    ListedOrder,
    ResyncPlan,
    RunningWorkflow,
    plan_resync,
    running_order_query,
)
from worker.observer.metrics import RESYNC_ACTIONS, RESYNC_SECONDS
from worker.observer.outbox import ORPHAN_REASON, TERMINATE, Delivery, Outbox, signal_to
from workflows.search_attributes import ORDER_RELEASE

log = structlog.get_logger(__name__)


class Resync:
    def __init__(
        self,
        client: Client,
        task_queue: str,
        outbox: Outbox,
        fingerprint: str,
        shards: int = 1,
        shard: int = 0,
        rpc_timeout_seconds: float = 30,
        visibility_lag_seconds: float = 60,
    ) -> None:
        self.client = client
        self.task_queue = task_queue
        self.outbox = outbox
        self.fingerprint = fingerprint
        self.shards = shards
        self.shard = shard
        self.rpc_timeout = timedelta(seconds=rpc_timeout_seconds)
        # Visibility is eventually consistent: a workflow started this long ago may not be listed yet.
        self.visibility_lag_seconds = visibility_lag_seconds
        # The orphans the last resync signalled delete, (workflow id, run id): terminated if still running.
        self.previous_orphans: set[tuple[str, str]] = set()
        # workflow id → the fingerprint already signalled to it.
        self.told_release: dict[str, str] = {}

    async def running(self) -> list[RunningWorkflow]:
        out = []
        async for execution in self.client.list_workflows(
            running_order_query(self.task_queue), rpc_timeout=self.rpc_timeout
        ):
            out.append(
                RunningWorkflow(
                    workflow_id=execution.id,
                    run_id=execution.run_id,
                    workflow_type=execution.workflow_type,
                    release=execution.typed_search_attributes.get(ORDER_RELEASE),
                )
            )
        return out

    async def run_once(self, orders: Callable[[], Iterable[ListedOrder]]) -> ResyncPlan:
        """One resync. ``orders`` is read after Temporal's listing: a workflow listed was started for an
        order the cache already held (an orphan is only ever one whose order went away)."""
        started = time.monotonic()
        running = await self.running()
        listing = list(orders())
        plan = plan_resync(
            listing,
            running,
            self.fingerprint,
            previous_orphans=self.previous_orphans,
            told_release=self.told_release,
            shards=self.shards,
            shard=self.shard,
            recently_started=self.outbox.recently_started(self.visibility_lag_seconds),
        )
        listed_ids = {wf.workflow_id for wf in running}
        self.told_release = {wid: fp for wid, fp in self.told_release.items() if wid in listed_ids}
        self.apply(plan)
        self.previous_orphans = plan.orphans
        elapsed = time.monotonic() - started
        RESYNC_SECONDS.observe(elapsed)
        for action, count in plan.counts().items():
            if count:
                RESYNC_ACTIONS.labels(action).inc(count)
        log.info("resync done", orders=len(listing), workflows=len(running), seconds=round(elapsed, 3), **plan.counts())
        return plan

    def apply(self, plan: ResyncPlan) -> None:
        # A workflow started here reads the settings in force at its first reconcile: it is not told
        # settings_changed while its OrderRelease is still unset.
        for ref, intent in plan.start:
            delivery = signal_to(ref, intent.signal, intent.args, start=True)
            self.outbox.put(delivery)
            self.told_release[delivery.workflow_id] = self.fingerprint
        for ref, run_id, intent in plan.move:
            delivery = signal_to(ref, intent.signal, intent.args, start=True)
            delivery.terminate_run = run_id
            self.outbox.put(delivery)
            self.told_release[delivery.workflow_id] = self.fingerprint
        for ref in [*plan.delete, *plan.redelete]:
            self.outbox.put(signal_to(ref, OrderSignal.DELETE))
        for workflow_id, run_id in plan.terminate:
            ref_key = "/".join(workflow_id.split("/")[1:3])
            self.outbox.put(
                Delivery(
                    workflow_id=workflow_id,
                    signal=TERMINATE,
                    order=ref_key,
                    terminate_run=run_id,
                    terminate_reason=ORPHAN_REASON,
                )
            )
        for ref in plan.settings:
            self.outbox.put(signal_to(ref, OrderSignal.SETTINGS_CHANGED, [self.fingerprint]))
            self.told_release[order_workflow_id(ref.namespace, ref.name, ref.uid)] = self.fingerprint
