"""Replica troubles on the order workflow (TROUBLE_PATCH): what the observer's ``replica_trouble``
says is named at once on WorkloadReady (and Ready before the order ever served), with what happens
next; a node lost or a claim not allocatable re-plans on a backoff; a quota, an image, a download or
an engine that fails waits for an edit with no timer; a loading engine says it loads.

The fake activity world of tests/workflows/world.py on the real dev server; the workflow replayed
from the start at every task (nondeterminism fails the test)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.client import WorkflowHandle

from inference_api.payloads import ApplyInput, ApplyResult, PlanInput
from inference_api.plan import PlanOutcome
from inference_api.reasons import Reason
from inference_api.types import ConditionStatus, ConstraintsStatus, EndpointStatus, ExposureType, Phase
from tests.factories import make_order, make_plan
from tests.workflows.world import FAST, Harness
from workflows.order import OrderWorkflow
from workflows.order_state import REPLICA_TROUBLE, ReplicaTrouble, TroubleAction

pytestmark = pytest.mark.temporal

PULL = ReplicaTrouble(
    reason=Reason.IMAGE_PULL_FAILED,
    message='pod support/pull-0, container runtime: ImagePullBackOff: Back-off pulling image "reg/vllm:nope"',
    action=TroubleAction.WAIT_FOR_EDIT,
    subject="support/pull-0",
)


def message_of(harness: Harness, name: str, type_: str) -> str:
    last = harness.world.last(name)
    assert last is not None
    found = next(c for c in last.conditions if c.type == type_)
    return found.message


def recording_plans(harness: Harness) -> list[PlanInput]:
    asked: list[PlanInput] = []

    def plan(request: PlanInput) -> PlanOutcome:
        asked.append(request)
        return PlanOutcome(plan=make_plan(device_class=harness.world.device_class, share=harness.world.share))

    harness.world.plan = plan
    return asked


async def ends_deleted(harness: Harness, handle: WorkflowHandle[Any, Any], name: str) -> None:
    """The order deleted as kubectl would: the workflow ends "deleted"."""
    harness.world.delete_order(name)
    await handle.signal(OrderWorkflow.delete)
    assert await handle.result() == "deleted"


async def test_a_loading_order_names_an_image_pull_failure_at_once_and_waits_for_an_edit(harness: Harness) -> None:
    """Not HealthCheckFailed after the serve wait: the kubelet's own message, at once; then no retry
    (no apply) while it stands; its end and the replica's load make the order Ready."""
    harness.world.loading.add("support/pull")
    handle = await harness.start(make_order("pull"))
    await harness.until(lambda: harness.world.applies_of("pull"), what="applied")
    await handle.signal(REPLICA_TROUBLE, PULL)
    await harness.until(harness.phase_is(Phase.PENDING, Reason.IMAGE_PULL_FAILED))
    assert harness.world.condition("pull", "Ready") == (ConditionStatus.FALSE, Reason.IMAGE_PULL_FAILED)
    said = message_of(harness, "pull", "WorkloadReady")
    assert 'Back-off pulling image "reg/vllm:nope"' in said
    assert "workload image settings" in said
    applies = len(harness.world.applies_of("pull"))
    await asyncio.sleep(3)  # FAST: retryBaseSeconds 0.5 — a backoff would have applied several times
    assert len(harness.world.applies_of("pull")) == applies
    await handle.signal(REPLICA_TROUBLE, ReplicaTrouble())
    await harness.world.let_load("pull")
    await harness.until(harness.phase_is(Phase.READY))
    assert harness.world.condition("pull", "WorkloadReady") == (ConditionStatus.TRUE, Reason.WORKLOAD_APPLIED)
    await ends_deleted(harness, handle, "pull")


async def test_a_replica_said_ready_whose_image_cannot_be_pulled_says_the_pull_failure_on_ready(
    harness: Harness,
) -> None:
    """The node agent says the replica is ready, then the kubelet says its image cannot be pulled while
    the order probes an API that does not answer (CI's e2e: kwok marks a pod Ready before the stand-in
    kubelet says the pull failed). No status names HealthCheckFailed beside the trouble: the order
    says ImagePullFailed on Ready and WorkloadReady in the same write, and waits for an edit."""
    world = harness.world
    world.loading.add("support/pulled")
    world.healthy = False
    world.probe_gate = asyncio.Event()
    handle = await harness.start(make_order("pulled"))
    await harness.until(lambda: world.applies_of("pulled"), what="applied")
    await world.let_load("pulled")
    await asyncio.wait_for(world.probe_held.wait(), 20)  # the probe after replica_ready
    await handle.signal(REPLICA_TROUBLE, PULL)
    await asyncio.sleep(0.5)  # the signal lands while the probe runs
    world.probe_gate.set()
    await harness.until(harness.phase_is(Phase.PENDING, Reason.IMAGE_PULL_FAILED))
    await asyncio.sleep(1)  # whatever the order writes next
    said = [
        (ready.reason, workload.reason)
        for update in world.statuses
        if update.ref.key == "support/pulled"
        for ready in update.conditions
        if ready.type == "Ready"
        for workload in update.conditions
        if workload.type == "WorkloadReady"
    ]
    assert (Reason.HEALTH_CHECK_FAILED, Reason.IMAGE_PULL_FAILED) not in said
    assert Reason.HEALTH_CHECK_FAILED not in [ready for ready, _ in said]
    assert harness.world.condition("pulled", "Ready") == (ConditionStatus.FALSE, Reason.IMAGE_PULL_FAILED)
    applies = len(world.applies_of("pulled"))
    await asyncio.sleep(2)  # FAST: retryBaseSeconds 0.5 — a backoff would have applied again
    assert len(world.applies_of("pulled")) == applies
    await ends_deleted(harness, handle, "pulled")


async def test_a_trouble_over_before_the_order_showed_it_still_wakes_the_loading_order(harness: Harness) -> None:
    """A quota refuses the first pod and goes again before the order's loop shows it (found at 100
    orders in the fault suite): the refusal ends the first-load wait, and its end and the replica's
    load arrive while the status is written. The order looks again and serves; before, it slept on the
    day-long resync saying WorkloadProgressing while its replica served."""
    world = harness.world
    world.loading.add("support/quota")
    world.publish_gate = asyncio.Event()
    handle = await harness.start(make_order("quota"))
    await asyncio.wait_for(world.publish_held.wait(), 20)  # the status write after the apply
    quota = ReplicaTrouble(
        reason=Reason.QUOTA_EXCEEDED,
        message='pods "quota-0" is forbidden: exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1',
        action=TroubleAction.WAIT_FOR_EDIT,
        subject="support/quota",
    )
    await handle.signal(REPLICA_TROUBLE, quota)
    held, world.publish_gate = world.publish_gate, asyncio.Event()
    world.publish_held.clear()
    held.set()
    await asyncio.wait_for(world.publish_held.wait(), 20)  # the status write that ends the reconcile
    await handle.signal(REPLICA_TROUBLE, ReplicaTrouble())
    await world.let_load("quota")
    gate, world.publish_gate = world.publish_gate, None
    gate.set()
    await harness.until(harness.phase_is(Phase.READY))
    await ends_deleted(harness, handle, "quota")


async def test_a_serving_orders_lost_node_replans_at_once_then_backs_off_while_it_stands(harness: Harness) -> None:
    asked = recording_plans(harness)
    timings = FAST.model_copy(update={"retryBaseSeconds": 1.0, "replanBackoffMaxSeconds": 2.0})
    handle = await harness.start(make_order("moved"), timings)
    await harness.until(harness.phase_is(Phase.READY))
    assert len(asked) == 1
    lost = ReplicaTrouble(
        reason=Reason.NODE_LOST,
        message="the node gpu-1 that pod support/moved-0 is on is gone (deleted from the cluster)",
        action=TroubleAction.REPLAN,
        subject="gpu-1",
    )
    await handle.signal(REPLICA_TROUBLE, lost)
    await harness.until(lambda: len(asked) >= 2, what="planned again")
    assert asked[1].current is not None  # the planner gets the plan it replaces
    status = harness.world.condition("moved", "WorkloadReady")
    assert status is not None
    assert status[1] == Reason.NODE_LOST
    # It stands: planned again after 1 s, then 2 s, 2 s (capped) — a few, never a hot loop.
    await asyncio.sleep(4.5)
    assert 3 <= len(asked) <= 5
    assert harness.world.condition("moved", "WorkloadReady") == (ConditionStatus.FALSE, Reason.NODE_LOST)
    assert "plans its placement again" in message_of(harness, "moved", "WorkloadReady")
    assert harness.world.phase("moved")[0] == Phase.READY  # its endpoint still answers
    await handle.signal(REPLICA_TROUBLE, ReplicaTrouble())
    await harness.until(
        lambda: harness.world.condition("moved", "WorkloadReady") == (ConditionStatus.TRUE, Reason.WORKLOAD_APPLIED),
        what="the trouble is over",
    )
    settled = len(asked)
    await asyncio.sleep(2.5)
    assert len(asked) == settled  # over: no more replans
    assert harness.world.phase("moved")[0] == Phase.READY
    await ends_deleted(harness, handle, "moved")


async def test_a_loading_engine_says_it_loads_then_serves(harness: Harness) -> None:
    harness.world.loading.add("support/slow")
    handle = await harness.start(make_order("slow"))
    await harness.until(lambda: harness.world.applies_of("slow"), what="applied")
    loading = ReplicaTrouble(
        reason=Reason.MODEL_LOADING,
        message="pod support/slow-0: the engine runs since 2026-12-01T10:00:00Z and loads the model",
        action=TroubleAction.WAIT,
        subject="support/slow-0",
    )
    await handle.signal(REPLICA_TROUBLE, loading)
    await harness.until(harness.phase_is(Phase.PENDING, Reason.MODEL_LOADING))
    await handle.signal(REPLICA_TROUBLE, ReplicaTrouble())
    await harness.world.let_load("slow")
    await harness.until(harness.phase_is(Phase.READY))
    # It never said HealthCheckFailed on the way.
    assert all(s.reason != Reason.HEALTH_CHECK_FAILED for s in harness.world.statuses if s.ref.name == "slow")
    await ends_deleted(harness, handle, "slow")


async def test_a_crash_loop_on_a_serving_order_is_named_beside_ready_and_an_edit_reconciles(harness: Harness) -> None:
    handle = await harness.start(make_order("crashy"))
    await harness.until(harness.phase_is(Phase.READY))
    crash = ReplicaTrouble(
        reason=Reason.RUNTIME_CRASH_LOOPING,
        message="pod support/crashy-1, container runtime exited with code 2 (Error): error: unrecognized arguments",
        action=TroubleAction.WAIT_FOR_EDIT,
        subject="support/crashy-1",
    )
    await handle.signal(REPLICA_TROUBLE, crash)
    await harness.until(
        lambda: (
            harness.world.condition("crashy", "WorkloadReady") == (ConditionStatus.FALSE, Reason.RUNTIME_CRASH_LOOPING)
        ),
        what="named",
    )
    # The endpoint still answers: Ready stays.
    assert harness.world.phase("crashy")[0] == Phase.READY
    assert "unrecognized arguments" in message_of(harness, "crashy", "WorkloadReady")
    applies = len(harness.world.applies_of("crashy"))
    edited = harness.world.orders["support/crashy"].model_copy(deep=True)
    edited.metadata.generation = 2
    harness.world.orders["support/crashy"] = edited
    await handle.signal(OrderWorkflow.spec_changed, 2)
    await harness.until(lambda: len(harness.world.applies_of("crashy")) > applies, what="the edit applied")
    await ends_deleted(harness, handle, "crashy")


async def test_a_first_probe_that_fails_while_the_engine_loads_says_loading_not_health_check_failed(
    harness: Harness,
) -> None:
    """A replica reported ready before its engine answers (kwok, or a readiness probe that lies): the
    first probe fails, but the observer says the engine loads: ModelLoading, and the order looks
    again on its backoff until the API answers."""
    harness.world.healthy = False
    handle = await harness.start(make_order("early"), FAST.model_copy(update={"probeTimeoutSeconds": 1.0}))
    await harness.until(lambda: harness.world.applies_of("early"), what="applied")
    loading = ReplicaTrouble(
        reason=Reason.MODEL_LOADING,
        message="pod support/early-0: the engine runs and loads the model",
        action=TroubleAction.WAIT,
        subject="support/early-0",
    )
    await handle.signal(REPLICA_TROUBLE, loading)
    await harness.until(harness.phase_is(Phase.PENDING, Reason.MODEL_LOADING))
    await asyncio.sleep(2)  # probes fail meanwhile: the status keeps saying it loads
    assert harness.world.phase("early") == (Phase.PENDING, Reason.MODEL_LOADING)
    harness.world.healthy = True
    await handle.signal(REPLICA_TROUBLE, ReplicaTrouble())
    await harness.until(harness.phase_is(Phase.READY))
    await ends_deleted(harness, handle, "early")


async def test_a_serving_orders_class_deleted_keeps_it_serving_and_says_so(harness: Harness) -> None:
    """Day 2: the class deleted (or edited so that it would not admit the order): the workload keeps
    serving, the phase is Degraded with the class's refusal as its reason and the published Ready says
    False (`kubectl wait --for=condition=Ready` does not take it for healthy); the class back, Ready."""
    harness.world.classes["default-llm"].metadata.generation = 3  # a real class's (a deleted one: 0)
    handle = await harness.start(make_order("orphaned"))
    await harness.until(harness.phase_is(Phase.READY))
    cls = harness.world.classes.pop("default-llm")
    applies = len(harness.world.applies_of("orphaned"))
    await handle.signal(OrderWorkflow.class_changed, 0)
    await harness.until(harness.phase_is(Phase.DEGRADED, Reason.CLASS_NOT_FOUND))
    assert "keeps serving on the workload it runs" in message_of(harness, "orphaned", "ClassResolved")
    assert "still serves" in message_of(harness, "orphaned", "Ready")
    assert len(harness.world.applies_of("orphaned")) == applies  # nothing applied, nothing torn down
    harness.world.classes["default-llm"] = cls
    await handle.signal(OrderWorkflow.class_changed, 5)
    await harness.until(harness.phase_is(Phase.READY, None))
    await ends_deleted(harness, handle, "orphaned")


async def test_a_rebuild_says_so_while_it_loads_and_stops_saying_so_once_it_serves(harness: Harness) -> None:
    """Day 2: an edit that rebuilds the workload (a larger model volume, a new placement) says
    WorkloadRebuilding while the new replica loads, and RuntimeUpToDate once it serves — the
    rebuild's reason no longer lingers on a Ready order until the next apply."""
    world = harness.world
    handle = await harness.start(make_order("rebuilt"))
    await harness.until(harness.phase_is(Phase.READY))
    rebuilding = True

    async def apply(request: ApplyInput) -> ApplyResult:
        world.applies.append(request)
        return ApplyResult(
            endpoint=EndpointStatus(url="https://rebuilt.example", type=ExposureType.EXTERNAL),
            authSecretName="rebuilt-auth",
            constraints=ConstraintsStatus(minReplicas=1, maxReplicas=2),
            readyReplicas=0,
            runtimeCurrent=not rebuilding,
            runtimeReason=Reason.WORKLOAD_REBUILDING if rebuilding else Reason.RUNTIME_UP_TO_DATE,
            runtimeMessage="the model needs a 80 GiB volume",
        )

    world.apply_override = apply
    world.loading.add("support/rebuilt")
    edited = world.orders["support/rebuilt"].model_copy(deep=True)
    edited.metadata.generation = 2
    world.orders["support/rebuilt"] = edited
    await handle.signal(OrderWorkflow.spec_changed, 2)
    await harness.until(harness.phase_is(Phase.PENDING, Reason.WORKLOAD_REBUILDING))
    assert world.condition("rebuilt", "RuntimeCurrent") == (ConditionStatus.FALSE, Reason.WORKLOAD_REBUILDING)
    await world.let_load("rebuilt")
    await harness.until(harness.phase_is(Phase.READY, None))
    assert world.condition("rebuilt", "RuntimeCurrent") == (ConditionStatus.TRUE, Reason.RUNTIME_UP_TO_DATE)
    world.apply_override = None
    await ends_deleted(harness, handle, "rebuilt")
