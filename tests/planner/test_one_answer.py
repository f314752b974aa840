"""Issue 37, item 1: economy first, one answer.

* A small model under a class that allows shared whole devices with a 25 % floor, on a cluster with a
  25 % share of a T4 free and whole H100s free (one kind MPS-shared, one that cannot be shared): the
  plan takes the T4 share, whatever the kinds of order the fragmentation-aware choice weighs, and the
  dry run's call (``worker/dry_run.py``: ``plan_launch`` on the inventory it read) and the planner
  service answer the same.
* The planner service restarted (a new app, a new ledger: what a second replica also is) between two
  plans answers the same as before, and as the dry run's call on the same cluster: no plan depends on
  what one process planned before (the service once weighed the kinds of its own last plans).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from starlette.testclient import TestClient

from inference_api.plan import LaunchPlanRequest, OrderFacts, PlanOutcome, RuntimeFallbackFlag
from inference_api.types import AcceleratorPolicy
from planner.bookings import OrderClaim
from planner.fragmentation import RecentDemand, held_demands
from planner.inventory import DeviceAllocation, DeviceClass, InventorySnapshot
from planner.planning import PlanningRequest, plan_launch, plan_launch_traced, stranded_devices
from planner.recipes import load_recipe_book
from planner.service import BookingLedger, create_app
from tests.planner.helpers import H100, SHARED, T4, WHOLE, cel, device, planned, policy, sim_snapshot
from tests.planner_service.fakes import ALLOWED, FakeReviewer

SMALL = "Qwen/Qwen2.5-0.5B-Instruct"
QUARTER_FLOOR = policy(sharing=SHARED, placement=WHOLE, min_share=25)
T4_CLASS = "nvidia-t4-mps-physical"
H100_DEDICATED = "nvidia-h100-dedicated"
H100_SHARED = "nvidia-h100-mps-mig"


def body(
    holder: str | None, accelerator_policy: AcceleratorPolicy = QUARTER_FLOOR, model: str = SMALL
) -> LaunchPlanRequest:
    return LaunchPlanRequest(
        facts=OrderFacts(modelName=model),
        acceleratorPolicy=accelerator_policy,
        runtimeFallback=RuntimeFallbackFlag(enabled=True),
        holder=holder,
        className="shared-quarter",
    )


def dry_run_plan(request: LaunchPlanRequest, inventory: InventorySnapshot) -> PlanOutcome:
    """What ``ai-inference plan`` (worker/dry_run.py) and the in-process planner
    (activities/planner_client.py) call: the planning library on the inventory read, nothing else."""
    return plan_launch(PlanningRequest(**dict(request), inventory=inventory))


# Kinds of order that would pull the order onto an H100 if fragmentation came first: orders bound to
# the T4 class (every H100 is a fragment for them, so taking a whole H100 "removes" fragmentation).
T4_KINDS = [
    RecentDemand(weight=9, deviceCount=1, sharePercent=25, cpuMilli=2000, memoryMiB=4096, deviceClasses=(T4_CLASS,)),
    RecentDemand(
        weight=3, deviceCount=1, sharePercent=100, cpuMilli=2000, memoryMiB=4096, deviceClasses=(H100_DEDICATED,)
    ),
]


@pytest.mark.parametrize("kinds", [None, [], T4_KINDS], ids=["no-kinds", "empty", "t4-bound-kinds"])
def test_a_small_model_takes_the_free_t4_share_not_a_whole_h100(kinds: list[RecentDemand] | None) -> None:
    snapshot = sim_snapshot()
    request = PlanningRequest(**dict(body("ns/small")), inventory=snapshot, recentDemands=kinds)
    outcome, trace = plan_launch_traced(request)
    plan = planned(outcome)
    assert (plan.deviceClass, plan.sharePercent, plan.nodeName) == (T4_CLASS, 25, "gpu-t4-0")
    assert plan.memoryRequestMiB is not None
    assert plan.memoryRequestMiB < 4096
    # The trace says what the place takes, and that the dearer places were not weighed.
    assert trace.choice is not None
    assert "takes a 25 % share, 4.0 GiB" in trace.choice
    assert "that take more were not weighed: a 25 % share, 20.0 GiB" in trace.choice
    # The dry run's call on the same cluster (it names no kinds) answers the same.
    assert dry_run_plan(body("ns/small"), snapshot).plan == plan


def test_a_whole_device_that_cannot_be_shared_loses_to_any_share() -> None:
    """Only a non-shareable H100 and the T4s: the T4 share, even when the T4s are nearly full; with
    every T4 full, the whole H100 (the only place left), never refused for economy."""
    classes = [
        DeviceClass(name=H100_DEDICATED, selectors=[cel(productName=H100, shareable=False)]),
        DeviceClass(name=T4_CLASS, selectors=[cel(productName=T4)]),
    ]
    allowed = policy(classes=[H100_DEDICATED, T4_CLASS], sharing=SHARED, placement=WHOLE, min_share=25)
    three_quarters = {f"gpu-t4-0/gpu-{i}": [DeviceAllocation(holder="ns/x", sharePercent=75)] for i in range(4)}
    plan = planned(dry_run_plan(body("ns/small", allowed), sim_snapshot(three_quarters, classes)))
    assert (plan.deviceClass, plan.sharePercent) == (T4_CLASS, 25)
    full = {f"gpu-t4-0/gpu-{i}": [DeviceAllocation(holder="ns/x", sharePercent=100)] for i in range(4)}
    plan = planned(dry_run_plan(body("ns/small", allowed), sim_snapshot(full, classes)))
    assert (plan.deviceClass, plan.sharePercent) == (H100_DEDICATED, 100)


def test_the_planner_service_answers_what_the_dry_run_answers() -> None:
    snapshot = sim_snapshot()
    ledger = BookingLedger()
    outcome = ledger.plan(lambda: (snapshot, []), body("ns/small"), load_recipe_book())
    assert outcome.plan == dry_run_plan(body("ns/small"), snapshot).plan
    assert outcome.plan is not None
    assert outcome.plan.deviceClass == T4_CLASS


# --------------------------------------------------------------------- a restarted planner


class Cluster:
    """Four MPS-shared T4 on one node, as the informers show them: allocations and order claims."""

    def __init__(self) -> None:
        self.allocations: dict[str, list[DeviceAllocation]] = {}
        self.claims: list[OrderClaim] = []

    def snapshot(self) -> InventorySnapshot:
        return InventorySnapshot(
            devices=[
                device(
                    f"gpu-{i}",
                    "t4-node",
                    T4,
                    "turing",
                    16,
                    shareable=True,
                    allocations=self.allocations.get(f"t4-node/gpu-{i}", ()),
                )
                for i in range(4)
            ],
            deviceClasses=[DeviceClass(name=T4_CLASS, selectors=[cel(productName=T4)])],
        )

    def view(self) -> tuple[InventorySnapshot, Sequence[OrderClaim]]:
        return self.snapshot(), list(self.claims)

    def __call__(self) -> InventorySnapshot:
        return self.snapshot()

    def allocate(self, holder: str, outcome: PlanOutcome) -> None:
        """The order's claim allocated where the plan said (the scheduler's choice, here)."""
        p = outcome.plan
        assert p is not None
        self.claims.append(
            OrderClaim(holder, f"{holder}-0", p.deviceClass, p.deviceCount, p.memoryRequestMiB, allocated=True)
        )
        for name in p.deviceNames:
            self.allocations.setdefault(f"{p.nodeName}/{name}", []).append(
                DeviceAllocation(holder=holder, sharePercent=p.sharePercent, memoryMiB=p.memoryRequestMiB)
            )


def post(client: TestClient, request: LaunchPlanRequest) -> PlanOutcome:
    response = client.post(
        "/api/v1/launch-plan", content=request.model_dump_json(), headers={"Authorization": f"Bearer {ALLOWED}"}
    )
    assert response.status_code == 200, response.text
    return PlanOutcome.model_validate_json(response.content)


HALF = policy(classes=[T4_CLASS], sharing=SHARED, placement=WHOLE, min_share=50)
QUARTER = policy(classes=[T4_CLASS], sharing=SHARED, placement=WHOLE, min_share=25)


def test_a_restarted_planner_plans_what_it_planned_before() -> None:
    """Three half-card orders planned and allocated, then a quarter-card order, planned by the running
    service, by a restarted one (a new app and ledger; a second replica is the same) and by the dry
    run's call: one answer. (Weighing the kinds of its own last plans, the running service put the
    quarter on an empty card, to keep the half-card holes the half-card orders it had seen; a fresh
    one, having seen none, put it beside a half: two answers from one cluster.)"""
    cluster = Cluster()
    with TestClient(create_app(cluster, FakeReviewer())) as running:
        for i in range(3):
            outcome = post(running, body(f"ns/half-{i}", HALF))
            assert planned(outcome).sharePercent == 50
            cluster.allocate(f"ns/half-{i}", outcome)
        before = planned(post(running, body("ns/quarter", QUARTER)))
        again = planned(post(running, body("ns/quarter", QUARTER)))  # a replan: its own booking is not counted
    with TestClient(create_app(cluster, FakeReviewer())) as restarted:
        after = planned(post(restarted, body("ns/quarter", QUARTER)))
    dry = planned(dry_run_plan(body("ns/quarter", QUARTER), cluster.snapshot()))
    assert before == again == after == dry
    # Best fit among the places that take the same: the half-used card with room, not an empty one.
    held = {key.split("/")[1] for key, allocations in cluster.allocations.items() if allocations}
    assert before.deviceNames[0] in held


def test_the_stranded_metric_weighs_what_the_cluster_holds_in_every_replica() -> None:
    """The kinds the stranded-capacity metric weighs come from the cluster (``held_demands``): each
    share held one order of that share, the whole devices one holder holds on a node one order of
    that many. Two ledgers (two replicas) that planned different things publish the same figure."""
    cluster = Cluster()
    cluster.allocations = {
        "t4-node/gpu-0": [DeviceAllocation(holder="ns/a", sharePercent=60)],
        "t4-node/gpu-1": [DeviceAllocation(holder="ns/b", sharePercent=60)],
        "t4-node/gpu-2": [DeviceAllocation(holder="ns/c")],
        "t4-node/gpu-3": [DeviceAllocation(holder="ns/c")],
    }
    snapshot = cluster.snapshot()
    assert held_demands(snapshot) == [
        RecentDemand(weight=2.0, deviceCount=1, sharePercent=60),
        RecentDemand(weight=1.0, deviceCount=2, sharePercent=100),
    ]
    # 40 % free on two cards: a fragment for the 60 % orders (2/3 of the weight) and for the
    # two-card order (no two free cards): 0.8 of a device stranded.
    assert stranded_devices(snapshot, held_demands(snapshot)) == pytest.approx(0.8)
    one, other = BookingLedger(), BookingLedger()
    one.plan(cluster.view, body("ns/x", QUARTER), load_recipe_book())
    other.plan(cluster.view, body("ns/y", QUARTER), load_recipe_book())
    assert one.stranded() == other.stranded()
