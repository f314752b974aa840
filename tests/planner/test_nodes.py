"""The planner judges what the scheduler judges of a node: CPU, memory, pods, taints, cordons, selector."""

from __future__ import annotations

import copy
from typing import Any

from activities.inventory import build_nodes, pod_requests
from inference_api.plan import OrderFacts, Toleration
from inference_api.reasons import Reason
from planner.inventory import InventorySnapshot, Node, Taint
from planner.nodes import ENDPOINT_FRONT_DEMAND, NodeProblem, PodDemand, node_problem, tolerates
from planner.planning import PlanningRequest, plan_launch
from tests.planner.helpers import SHARED, WHOLE, cel, device, policy

CLASS = "t4"
POLICY = policy(classes=[CLASS], sharing=SHARED, placement=WHOLE)
FACTS = OrderFacts(modelName="acme/llm-1B", parameterCount="1B")


def snapshot(*nodes: Node) -> InventorySnapshot:
    from planner.inventory import DeviceClass

    devices = [device("gpu-0", n.name, "Tesla T4", "turing", 16, shareable=True) for n in nodes]
    return InventorySnapshot(
        devices=devices,
        deviceClasses=[DeviceClass(name=CLASS, selectors=[cel(productName="Tesla T4")])],
        nodes=list(nodes),
    )


def plan(inventory: InventorySnapshot, **extra: object) -> object:
    return plan_launch(PlanningRequest(facts=FACTS, acceleratorPolicy=POLICY, inventory=inventory, **extra))


def test_tolerations_follow_the_kubernetes_rules() -> None:
    taint = Taint(key="gpu", value="a100", effect="NoSchedule")
    assert tolerates(Toleration(key="gpu", operator="Exists"), taint)
    assert tolerates(Toleration(key="gpu", value="a100", effect="NoSchedule"), taint)
    assert not tolerates(Toleration(key="gpu", value="t4"), taint)
    assert not tolerates(Toleration(key="gpu", operator="Exists", effect="NoExecute"), taint)
    assert tolerates(Toleration(operator="Exists"), taint)
    # PreferNoSchedule never keeps a pod off.
    soft = Node(name="n", taints=[Taint(key="x", effect="PreferNoSchedule")])
    assert node_problem(soft, PodDemand(0, 0), []) is None


def test_a_node_without_cpu_room_is_not_chosen() -> None:
    full = Node(name="a-full", cpuMilli=8000, memoryMiB=65536, requestedCpuMilli=6000)
    roomy = Node(name="b-roomy", cpuMilli=8000, memoryMiB=65536)
    outcome = plan(snapshot(full, roomy))
    assert outcome.plan is not None  # type: ignore[attr-defined]
    assert outcome.plan.nodeName == "b-roomy"  # type: ignore[attr-defined]


def test_the_endpoint_fronts_requests_count_with_the_engines() -> None:
    # One device: the engine is estimated at 4 cores; the pod also runs the endpoint front (100m), so a node
    # with exactly the engine's 4 cores free would leave the pod Pending at the scheduler.
    engine_only = Node(name="a-engine-only", cpuMilli=4000, memoryMiB=65536)
    outcome = plan(snapshot(engine_only))
    refusal = outcome.refusal  # type: ignore[attr-defined]
    assert refusal is not None
    assert refusal.reason is Reason.NO_SCHEDULABLE_NODE
    assert "not enough allocatable CPU" in refusal.message
    room = Node(name="b-room", cpuMilli=4000 + ENDPOINT_FRONT_DEMAND.cpuMilli, memoryMiB=65536)
    assert plan(snapshot(room)).plan.nodeName == "b-room"  # type: ignore[attr-defined]


def test_an_order_that_fits_a_gpu_but_no_node_is_refused_with_the_nodes_reasons() -> None:
    nodes = (
        Node(name="cpu-poor", cpuMilli=2000, memoryMiB=65536),
        Node(name="mem-poor", cpuMilli=64000, memoryMiB=1024),
        Node(name="tainted", cpuMilli=64000, memoryMiB=65536, taints=[Taint(key="gpu", effect="NoSchedule")]),
        Node(name="cordoned", cpuMilli=64000, memoryMiB=65536, unschedulable=True),
        Node(name="crowded", cpuMilli=64000, memoryMiB=65536, pods=3, podCount=3),
    )
    outcome = plan(snapshot(*nodes))
    refusal = outcome.refusal  # type: ignore[attr-defined]
    assert refusal is not None
    assert refusal.reason is Reason.NO_SCHEDULABLE_NODE
    for name in ("cpu-poor", "mem-poor", "tainted", "cordoned", "crowded"):
        assert name in refusal.message
    assert "not enough allocatable CPU" in refusal.message
    assert "workload.tolerations" in refusal.message
    # Tolerated, the tainted node takes it.
    tolerated = plan(snapshot(*nodes), tolerations=[Toleration(key="gpu", operator="Exists")])
    assert tolerated.plan.nodeName == "tainted"  # type: ignore[attr-defined]


def test_the_node_selector_of_the_settings_is_judged() -> None:
    a = Node(name="a", cpuMilli=64000, memoryMiB=65536, labels={"pool": "x"})
    b = Node(name="b", cpuMilli=64000, memoryMiB=65536, labels={"pool": "gpu"})
    assert plan(snapshot(a, b), nodeSelector={"pool": "gpu"}).plan.nodeName == "b"  # type: ignore[attr-defined]


def test_busy_devices_still_give_a_capacity_refusal_not_a_node_one() -> None:
    from planner.inventory import DeviceAllocation

    inventory = snapshot(Node(name="a", cpuMilli=64000, memoryMiB=65536))
    inventory.devices[0].allocations.append(DeviceAllocation(holder="x/y", sharePercent=100))
    refusal = plan(inventory.model_copy()).refusal  # type: ignore[attr-defined]
    assert refusal.reason is Reason.NO_CAPACITY


def test_nodes_from_the_api_objects() -> None:
    node = {
        "metadata": {"name": "n1", "labels": {"pool": "gpu"}},
        "spec": {"taints": [{"key": "gpu", "effect": "NoSchedule"}], "unschedulable": True},
        "status": {"allocatable": {"cpu": "7800m", "memory": "31Gi", "pods": "110"}},
    }
    pod = {
        "spec": {
            "nodeName": "n1",
            "containers": [{"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}, {"resources": {}}],
            "initContainers": [{"resources": {"requests": {"cpu": "2", "memory": "512Mi"}}}],
            "overhead": {"cpu": "100m"},
        },
        "status": {"phase": "Running"},
    }
    done = {
        "spec": {"nodeName": "n1", "containers": [{"resources": {"requests": {"cpu": "8"}}}]},
        "status": {"phase": "Succeeded"},
    }
    assert pod_requests(pod["spec"]) == (2100, 1024)  # type: ignore[arg-type]
    [n1] = build_nodes([node], [pod, done])
    assert (n1.cpuMilli, n1.memoryMiB, n1.pods) == (7800, 31 * 1024, 110)
    assert (n1.requestedCpuMilli, n1.requestedMemoryMiB, n1.podCount) == (2100, 1024, 1)
    assert n1.unschedulable
    assert n1.taints == [Taint(key="gpu", effect="NoSchedule")]
    assert n1.labels == {"pool": "gpu"}
    assert node_problem(n1, PodDemand(0, 0), []) is NodeProblem.CORDONED


def test_booked_pods_hold_their_nodes_cpu_until_they_are_bound() -> None:
    from planner.bookings import Booking, reserve, with_booked_pods

    node = Node(name="n1", cpuMilli=10000, memoryMiB=1024 * 1024)
    inventory = snapshot(node)
    inventory.devices.extend(device(f"gpu-{i}", "n1", "Tesla T4", "turing", 16, shareable=True) for i in (1, 2))
    inventory = InventorySnapshot(devices=inventory.devices, deviceClasses=inventory.deviceClasses, nodes=[node])
    bookings: list[Booking] = []
    for holder in ("ns/a", "ns/b"):
        booked = with_booked_pods(reserve(inventory, bookings, []), bookings)
        outcome = plan(booked, holder=holder)
        assert outcome.plan is not None, outcome.refusal  # type: ignore[attr-defined]
        assert outcome.plan.cpu == "4"  # type: ignore[attr-defined]
        bookings.append(Booking.of_plan(holder, outcome.plan, 0.0))  # type: ignore[attr-defined]
    booked = with_booked_pods(reserve(inventory, bookings, []), bookings)
    assert booked.nodes is not None
    assert booked.nodes[0].requestedCpuMilli == 2 * (4000 + ENDPOINT_FRONT_DEMAND.cpuMilli)
    # A third pod of 4 cores (and its front) does not fit the 1.8 left, though a T4 is free.
    assert plan(booked, holder="ns/c").refusal.reason is Reason.NO_SCHEDULABLE_NODE  # type: ignore[attr-defined]


def test_with_recent_demands_a_node_refusal_still_names_the_nodes() -> None:
    """The fragmentation-aware choice (the planner service's) refused a cordoned node's only device as
    NoCapacity: the check whether the nodes are what is missing searched shapes built for best fit."""
    from planner.fragmentation import RecentDemand

    recent = [RecentDemand(deviceCount=1, sharePercent=25, cpuMilli=1000, memoryMiB=1024, deviceClasses=(CLASS,))]
    for node in (
        Node(name="cordoned", cpuMilli=64000, memoryMiB=65536, unschedulable=True),
        Node(name="tainted", cpuMilli=64000, memoryMiB=65536, taints=[Taint(key="gpu", effect="NoSchedule")]),
        Node(name="cpu-poor", cpuMilli=2000, memoryMiB=65536),
    ):
        inventory = snapshot(node)
        for _ in range(2):  # the second plan on the same snapshot reads the nodes' results it kept
            outcome = plan(inventory, recentDemands=recent)
            assert outcome.refusal is not None  # type: ignore[attr-defined]
            assert outcome.refusal.reason is Reason.NO_SCHEDULABLE_NODE  # type: ignore[attr-defined]
            assert node.name in outcome.refusal.message  # type: ignore[attr-defined]


def test_a_node_that_is_not_ready_takes_no_pod_even_past_a_blanket_toleration() -> None:
    """The node lifecycle controller taints a NotReady node, but a module setting that tolerates every
    taint (``operator: Exists`` without a key) lets a plan past the taint: the Ready condition decides."""
    lost: dict[str, Any] = {
        "metadata": {"name": "lost"},
        "spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]},
        "status": {
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "Unknown"}],
        },
    }
    healthy = copy.deepcopy(lost)
    healthy["metadata"]["name"] = "healthy"
    healthy["spec"] = {}
    healthy["status"]["conditions"][1]["status"] = "True"
    bare = {"metadata": {"name": "bare"}, "status": {"allocatable": {"cpu": "8"}}}  # no conditions: nothing says
    n_bare, n_healthy, n_lost = build_nodes([lost, healthy, bare], [])  # by name
    assert (n_lost.ready, n_healthy.ready, n_bare.ready) == (False, True, True)
    everything = [Toleration(operator="Exists")]
    assert node_problem(n_lost, PodDemand(0, 0), everything) is NodeProblem.NOT_READY
    assert node_problem(n_lost, PodDemand(0, 0), []) is NodeProblem.NOT_READY
    assert node_problem(n_healthy, PodDemand(0, 0), everything) is None
    # Not Ready comes first: a cordoned NotReady node is told as not Ready.
    cordoned = n_lost.model_copy(update={"unschedulable": True})
    assert node_problem(cordoned, PodDemand(0, 0), []) is NodeProblem.NOT_READY
