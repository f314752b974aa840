"""When the order workflow lets a new plan take a new commit of the model (docs/workload.md, "Pinned
revisions"): for a new spec (an edit) or a replan asked by hand; never for a plan made again for the
same spec (a class edit, a trouble, a move), which keeps the commit every replica fetches. And a
repository the hub does not know is told on the order and looked for again on a backoff.

The plan activity stands in (tests/workflows/world.py) as the worker's: it pins a fresh commit unless
the workflow asks it to keep the current plan's (``keepRevision``); the real pin against a hub is
tests/fetcher/test_model_revision.py, the whole path tests/engine/test_pinned_revision.py.
"""

from __future__ import annotations

import itertools

from inference_api.payloads import PlanInput
from inference_api.plan import PlanOutcome, PlanRefusal
from inference_api.reasons import Reason
from inference_api.types import Phase
from tests.factories import make_order, make_plan
from tests.workflows.world import Harness
from workflows.order import OrderWorkflow, ReplanOutcome


class PinningPlanner:
    """The worker's plan activity as far as the commit goes: a new commit for each plan that may take one."""

    def __init__(self) -> None:
        self.commits = (f"{n:x}" * 40 for n in itertools.count(10))
        self.asked: list[bool] = []
        self.missing = False

    def __call__(self, request: PlanInput) -> PlanOutcome:
        self.asked.append(request.keepRevision)
        if self.missing:
            return PlanOutcome(
                refusal=PlanRefusal(
                    reason=Reason.MODEL_NOT_FOUND, message="spec.model.ref.name: the hub answered 401 RepoNotFound"
                )
            )
        plan = make_plan()
        if request.keepRevision:
            assert request.current is not None
            return PlanOutcome(plan=plan.model_copy(update={"modelCommit": request.current.modelCommit}))
        return PlanOutcome(plan=plan.model_copy(update={"modelCommit": next(self.commits)}))


def commit_of(harness: Harness) -> str | None:
    resolved = harness.world.last().resolved
    return resolved.modelCommit if resolved else None


async def test_the_commit_is_kept_for_the_same_spec_and_taken_anew_on_an_edit_or_a_replan_asked_by_hand(
    harness: Harness,
) -> None:
    planner = PinningPlanner()
    harness.world.plan = planner
    harness.world.classes["default-llm"].metadata.generation = 1
    order = make_order("pinned")
    handle = await harness.start(order)
    await harness.until(harness.phase_is(Phase.READY))
    first = commit_of(harness)
    assert first == "a" * 40
    assert planner.asked == [False]
    applied = harness.world.applies_of("pinned")[-1]
    assert applied.plan.modelCommit == first  # what the apply writes into the fetcher's MODEL_REVISION

    # The class edited: the plan is made again for the same spec, and keeps the commit.
    harness.world.classes["default-llm"].metadata.generation = 2
    await handle.signal(OrderWorkflow.class_changed, 2)
    await harness.until(lambda: len(planner.asked) == 2)
    await harness.until(harness.phase_is(Phase.READY))
    assert planner.asked[-1] is True
    assert commit_of(harness) == first

    # A replan asked by hand takes what the repository points at now.
    outcome = await handle.execute_update("replan", result_type=ReplanOutcome)
    assert outcome.planned
    assert planner.asked[-1] is False
    assert commit_of(harness) == "b" * 40

    # An edit of the order: a new spec, a new commit.
    order.metadata.generation = 2
    await handle.signal(OrderWorkflow.spec_changed, 2)
    await harness.until(lambda: commit_of(harness) == "c" * 40)
    assert planner.asked[-1] is False


async def test_a_repository_the_hub_does_not_know_is_told_and_looked_for_again(harness: Harness) -> None:
    planner = PinningPlanner()
    planner.missing = True
    harness.world.plan = planner
    await harness.start(make_order("unknown"))
    await harness.until(harness.phase_is(Phase.PENDING, Reason.MODEL_NOT_FOUND))
    assert harness.world.applies_of("unknown") == []  # nothing is made for a model no one can fetch
    asked = len(planner.asked)
    # The repository appears (or is made public): the next look, on the backoff, plans and serves.
    planner.missing = False
    await harness.until(harness.phase_is(Phase.READY))
    assert len(planner.asked) > asked
    assert commit_of(harness) == "a" * 40
