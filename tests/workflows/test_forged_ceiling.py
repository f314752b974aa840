"""A ``set_replica_ceiling`` signal can be sent by hand (``reapply-follows-applied-ceiling``): the apply
honours only the ceiling the preemption ledger holds (activities/trusted_apply.py, tested end to end in
tests/e2e/test_forged_state.py), and the re-apply that follows the signal now says only what the apply
applied — no CapacityPreempted event for a ceiling the apply did not apply — and a refused re-apply is
a condition (WorkloadRefused), not a failed run. A real preemption's events: tests/preemption.
"""

from __future__ import annotations

import asyncio

from temporalio.client import WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError

from inference_api.payloads import ApplyInput, ApplyResult
from inference_api.reasons import Reason
from inference_api.types import ConditionStatus, ConstraintsStatus, EndpointStatus, ExposureType, Phase
from tests.factories import make_class, make_order
from tests.workflows.world import Harness
from workflows.order import OrderWorkflow


def autoscaled_class(harness: Harness) -> None:
    harness.world.classes["scaling"] = make_class(
        "scaling", scalingPolicy={"minReplicas": 1, "maxReplicas": 2, "allowedPriorityClassNames": ["inference-low"]}
    )


async def test_a_forged_ceiling_on_a_non_donor_writes_no_event(harness: Harness) -> None:
    autoscaled_class(harness)

    async def ledger_checked(request: ApplyInput) -> ApplyResult:
        # The real apply: no ledger entry for this order, so the class's bounds whatever the request says.
        harness.world.applies.append(request)
        return ApplyResult(
            endpoint=EndpointStatus(url=f"https://{request.ref.name}.example", type=ExposureType.EXTERNAL),
            constraints=ConstraintsStatus(minReplicas=1, maxReplicas=2),
            readyReplicas=1,
        )

    harness.world.apply_override = ledger_checked
    handle = await harness.start(make_order("not-a-donor", class_name="scaling"))
    await harness.until(harness.phase_is(Phase.READY))
    applies = len(harness.world.applies)

    await handle.signal(OrderWorkflow.set_replica_ceiling, 1)
    await harness.until(lambda: len(harness.world.applies) > applies, what="re-applied")

    async def done() -> bool:
        state = await handle.query(OrderWorkflow.query_state)
        return not state.reapplyPending and not (await handle.describe()).raw_description.pending_activities

    await harness.until(done, what="the re-apply's steps done")
    await asyncio.sleep(0.5)  # an event the re-apply would write after its apply
    assert [e.reason for e in harness.world.events] == []
    assert harness.world.phase("not-a-donor")[0] == Phase.READY
    last = harness.world.last("not-a-donor")
    assert last is not None
    assert last.constraints is not None
    assert last.constraints.maxReplicas == 2


async def test_a_refused_reapply_is_a_condition_not_a_failed_run(harness: Harness) -> None:
    handle = await harness.start(make_order("refused-again"))
    await harness.until(harness.phase_is(Phase.READY))

    async def refusing_apply(_: ApplyInput) -> ApplyResult:
        raise ApplicationError(
            "the launch plan is not one the class allows", type=str(Reason.WORKLOAD_REFUSED), non_retryable=True
        )

    harness.world.apply_override = refusing_apply
    await handle.signal(OrderWorkflow.set_replica_ceiling, 1)
    await harness.until(
        lambda: (
            harness.world.condition("refused-again", "WorkloadReady")
            == (ConditionStatus.FALSE, Reason.WORKLOAD_REFUSED)
        ),
        what="WorkloadReady=False/WorkloadRefused",
    )
    assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
    assert [e.reason for e in harness.world.events] == []
