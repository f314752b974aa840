"""Several replicas: each gets a placement of its own, on the snapshot with the earlier ones held."""

from __future__ import annotations

from inference_api.plan import OrderFacts, ReplicaPlacement
from inference_api.types import InferenceServiceClass
from planner.bookings import Booking, needs
from planner.inventory import DeviceClass, InventorySnapshot, Node
from planner.nodes import ENDPOINT_FRONT_DEMAND
from planner.planning import PlanningRequest, plan_launch, plan_launch_traced
from planner.scaling import planned_replicas
from tests import factories as f
from tests.planner.helpers import SHARED, WHOLE, cel, device, policy

CLASS = "t4"
FACTS = OrderFacts(modelName="acme/llm-1B", parameterCount="1B")
SHARED_T4 = policy(classes=[CLASS], sharing=SHARED, placement=WHOLE)
WHOLE_T4 = policy(classes=[CLASS], placement=WHOLE)


def snapshot(cards: dict[str, int], *, cpu_milli: int = 64000) -> InventorySnapshot:
    """``cards``: node → number of 16 GiB T4s; each device publishes its uuid."""
    devices = []
    for node, count in cards.items():
        for i in range(count):
            d = device(f"gpu-{i}", node, "Tesla T4", "turing", 16, shareable=True)
            devices.append(d.model_copy(update={"attributes": {**d.attributes, "uuid": f"GPU-{node}-{i}"}}))
    return InventorySnapshot(
        devices=devices,
        deviceClasses=[DeviceClass(name=CLASS, selectors=[cel(productName="Tesla T4")])],
        nodes=[Node(name=n, cpuMilli=cpu_milli, memoryMiB=262144) for n in cards],
    )


def request(inventory: InventorySnapshot, replicas: int, accelerator_policy: object = WHOLE_T4) -> PlanningRequest:
    return PlanningRequest(
        facts=FACTS, acceleratorPolicy=accelerator_policy, inventory=inventory, replicas=replicas, holder="ns/llm"
    )


def test_whole_devices_each_replica_on_a_device_of_its_own() -> None:
    outcome, trace = plan_launch_traced(request(snapshot({"a": 2, "b": 2}), 3))
    plan = outcome.plan
    assert plan is not None
    places = [(p.nodeName, tuple(p.deviceNames)) for p in plan.replicaPlacements]
    assert len(places) == 3
    assert len(set(places)) == 3  # no device given twice
    assert (plan.nodeName, tuple(plan.deviceNames)) == places[0]
    # The selector selects exactly the planned devices, every replica's.
    for node, (name,) in places:
        assert f'"GPU-{node}-{name.removeprefix("gpu-")}"' in (plan.deviceSelector or "")
    assert plan.deviceSelector is not None
    assert plan.deviceSelector.count("GPU-") == 3
    assert trace.choice is not None
    assert "3 of 3 replicas placed" in trace.choice
    # Deterministic.
    assert plan_launch(request(snapshot({"a": 2, "b": 2}), 3)) == outcome


def test_shares_of_one_card_stack_as_the_planner_packs() -> None:
    plan = plan_launch(request(snapshot({"a": 1, "b": 1}), 2, SHARED_T4)).plan
    assert plan is not None
    assert plan.sharePercent < 50
    # Best fit: the second replica goes where the first left the least room that still holds it.
    assert [p.nodeName for p in plan.replicaPlacements] == [plan.nodeName, plan.nodeName]
    assert plan.deviceSelector is not None
    assert plan.deviceSelector.count("GPU-") == 1


def test_fewer_placements_than_replicas_when_room_runs_out_and_the_trace_says_so() -> None:
    outcome, trace = plan_launch_traced(request(snapshot({"a": 2}), 3))
    assert outcome.plan is not None
    assert len(outcome.plan.replicaPlacements) == 2
    assert trace.choice is not None
    assert "2 of 3 replicas placed" in trace.choice
    assert "not pinned" in trace.choice


def test_a_replica_is_placed_where_its_pod_fits_too() -> None:
    """The earlier replicas' pods hold their node's CPU: a node with room for one pod takes one."""
    cpu = plan_launch(request(snapshot({"a": 1}), 1)).plan
    assert cpu is not None
    per_pod = int(float(cpu.cpu) * 1000) + ENDPOINT_FRONT_DEMAND.cpuMilli  # the engine and the endpoint front
    plan = plan_launch(request(snapshot({"a": 2, "b": 2}, cpu_milli=per_pod), 2)).plan
    assert plan is not None
    assert sorted(p.nodeName for p in plan.replicaPlacements) == ["a", "b"]


def test_one_replica_plans_as_before() -> None:
    plan = plan_launch(request(snapshot({"a": 2}), 1)).plan
    assert plan is not None
    assert plan.replicaPlacements == []
    assert plan.placements() == [ReplicaPlacement(nodeName=plan.nodeName or "", deviceNames=plan.deviceNames)]


def test_a_booking_holds_each_replica_where_the_plan_put_it() -> None:
    plan = plan_launch(request(snapshot({"a": 2, "b": 2}), 3)).plan
    assert plan is not None
    booking = Booking.of_plan("ns/llm", plan, 0.0)
    assert booking.replicas == 3
    wanted = needs([booking], [])
    assert [(n.node, n.devices) for n in wanted] == [(p.nodeName, tuple(p.deviceNames)) for p in plan.replicaPlacements]


def _class(low: int | None, high: int | None) -> InferenceServiceClass:
    if low is None or high is None:
        return f.cluster_local_none()
    return f.service_class(scalingPolicy={"minReplicas": low, "maxReplicas": high})


def test_a_fixed_replica_count_is_planned_whole_an_autoscaled_one_replica_at_a_time() -> None:
    assert planned_replicas(_class(None, None)) == 1
    assert planned_replicas(_class(3, 3)) == 3
    assert planned_replicas(_class(1, 3)) == 1
