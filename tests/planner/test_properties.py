"""Properties of plan_launch on random inventories: no device is over-committed, the class's
allow-list is obeyed, and the same input gives the same plan."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inference_api.plan import LaunchPlan, OrderFacts, PlanOutcome, RuntimeFallbackFlag
from inference_api.types import AcceleratorPolicy, PlacementType, SharingMode
from planner.cel_selectors import matches
from planner.inventory import Device, DeviceAllocation, InventorySnapshot
from planner.planning import PlanningRequest, plan_launch
from tests.planner.helpers import H100, SIM_CLASSES, T4, device, policy

CLASS_NAMES = [c.name for c in SIM_CLASSES]
MODELS = [
    "Qwen/Qwen2.5-32B-Instruct-AWQ",
    "Qwen/Qwen2.5-7B-Instruct",
    "org/Model-2B",
    "org/Model-5B",
    "org/Model-9B",
    "org/Model-17B",
    "org/Model-30B",
    "org/Model-70B",
]

allocation = st.builds(
    DeviceAllocation,
    holder=st.sampled_from(["ns/a", "ns/b", "ns/c", "ns/me"]),
    # Memory-only claims (share 0) and small shares with much memory make the memory the binding limit.
    sharePercent=st.one_of(st.sampled_from([0, 0, 5, 10, 30, 100]), st.integers(0, 100)),
    memoryMiB=st.one_of(st.none(), st.sampled_from([1024, 20 * 1024, 50 * 1024, 70 * 1024]), st.integers(0, 90 * 1024)),
)


@st.composite
def devices(draw: st.DrawFn) -> list[Device]:
    out: list[Device] = []
    for node in range(draw(st.integers(1, 2))):
        for i in range(draw(st.integers(1, 4))):
            kind = draw(st.sampled_from(["h100", "t4", "mig"]))
            held = draw(st.lists(allocation, max_size=3))
            shareable = draw(st.sampled_from([True, True, False]))
            if kind == "h100":
                d = device(f"gpu-{i}", f"node-{node}", H100, "hopper", 80, shareable=shareable, allocations=held)
            elif kind == "t4":
                d = device(f"gpu-{i}", f"node-{node}", T4, "turing", 16, shareable=shareable, allocations=held)
            else:
                d = device(
                    f"gpu-{i}",
                    f"node-{node}",
                    H100,
                    "hopper",
                    40,
                    shareable=shareable,
                    placement=PlacementType.PARTITION,
                    mig_profile="3g.40gb",
                    allocations=held,
                )
            out.append(d)
    return out


policies = st.builds(
    policy,
    classes=st.one_of(st.none(), st.lists(st.sampled_from([*CLASS_NAMES, "no-such-class"]), unique=True, max_size=3)),
    sharing=st.sampled_from(
        [[SharingMode.SHARED], [SharingMode.SHARED, SharingMode.DEDICATED], [SharingMode.DEDICATED]]
    ),
    placement=st.sampled_from(
        [[PlacementType.WHOLE_DEVICE], [PlacementType.PARTITION], [PlacementType.WHOLE_DEVICE, PlacementType.PARTITION]]
    ),
    max_count=st.integers(1, 4),
)


def request(model: str, accelerator: AcceleratorPolicy, inventory: InventorySnapshot, holder: str) -> PlanningRequest:
    return PlanningRequest(
        facts=OrderFacts(modelName=model),
        acceleratorPolicy=accelerator,
        inventory=inventory,
        runtimeFallback=RuntimeFallbackFlag(enabled=True),
        className="prop",
        holder=holder,
    )


def held_mib(d: Device, a: DeviceAllocation) -> int:
    if a.memoryMiB is not None:
        return a.memoryMiB
    return (d.memoryMiB or 0) * a.sharePercent // 100


def assert_not_over_committed(inventory: InventorySnapshot, plan: LaunchPlan, holder: str) -> None:
    by_key = {d.key: d for d in inventory.devices}
    for name in plan.deviceNames:
        d = by_key[f"{plan.nodeName}/{name}"]
        others = [a for a in d.allocations if a.holder != holder]
        assert d.memoryMiB is not None
        assert plan.modelMemoryMiB is not None
        # The model fits the device beside what others hold, memory and compute share alike.
        assert sum(held_mib(d, a) for a in others) + plan.modelMemoryMiB <= d.memoryMiB
        assert sum(a.sharePercent for a in others) + plan.sharePercent <= 100
        if not d.allowMultipleAllocations:
            assert not others
        if plan.sharePercent == 100:
            # A whole share needs the device empty: nobody holds a share or memory of it. (A claim of
            # share 0 without a memory figure holds neither, as the DRA capacity accounting sees it.)
            assert all(a.sharePercent == 0 and held_mib(d, a) == 0 for a in others)
        # Nor is the silicon it shares with a partition or its parent held by anyone else.
        related = [
            r for r in inventory.devices
            if r.node == d.node and (r.parentDevice == d.name or d.parentDevice == r.name)
        ]  # fmt: skip
        assert not [a for r in related for a in r.allocations if a.holder != holder]


def assert_in_allow_list(inventory: InventorySnapshot, plan: LaunchPlan, accelerator: AcceleratorPolicy) -> None:
    allowed = accelerator.allowedDeviceClasses or [c.name for c in inventory.deviceClasses]
    assert plan.deviceClass in allowed
    device_class = inventory.device_class(plan.deviceClass)
    assert device_class is not None
    by_key = {d.key: d for d in inventory.devices}
    for name in plan.deviceNames:
        assert matches(device_class, by_key[f"{plan.nodeName}/{name}"])
    assert plan.placementMode in (accelerator.allowedPlacementTypes or [PlacementType.WHOLE_DEVICE])
    assert plan.sharingMode in (accelerator.allowedSharingModes or [SharingMode.DEDICATED])
    assert plan.deviceCount <= (accelerator.maxAcceleratorCount or 1)


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(model=st.sampled_from(MODELS), accelerator=policies, fleet=devices(), holder=st.sampled_from(["ns/me", "ns/x"]))
def test_a_plan_never_over_commits_and_stays_in_the_allow_list(
    model: str, accelerator: AcceleratorPolicy, fleet: list[Device], holder: str
) -> None:
    inventory = InventorySnapshot(devices=fleet, deviceClasses=SIM_CLASSES)
    outcome = plan_launch(request(model, accelerator, inventory, holder))
    if outcome.plan is None:
        assert outcome.refusal is not None
        assert outcome.refusal.message
        return
    assert_not_over_committed(inventory, outcome.plan, holder)
    assert_in_allow_list(inventory, outcome.plan, accelerator)


@SETTINGS
@given(
    models=st.lists(st.sampled_from(MODELS), min_size=1, max_size=12),
    accelerator=policies,
    fleet=devices(),
)
def test_orders_placed_one_by_one_never_over_commit(
    models: list[str], accelerator: AcceleratorPolicy, fleet: list[Device]
) -> None:
    """Each plan becomes an allocation of the next snapshot, as the cluster would report it."""
    inventory = InventorySnapshot(devices=fleet, deviceClasses=SIM_CLASSES)
    for i, model in enumerate(models):
        holder = f"ns/order-{i}"
        outcome = plan_launch(request(model, accelerator, inventory, holder))
        if outcome.plan is None:
            continue
        p = outcome.plan
        assert_not_over_committed(inventory, p, holder)
        assert_in_allow_list(inventory, p, accelerator)
        taken = set(p.deviceNames)
        inventory = InventorySnapshot(
            devices=[
                d.model_copy(
                    update={
                        "allocations": [
                            *d.allocations,
                            DeviceAllocation(holder=holder, sharePercent=p.sharePercent, memoryMiB=p.memoryRequestMiB),
                        ]
                    }
                )
                if d.node == p.nodeName and d.name in taken
                else d
                for d in inventory.devices
            ],
            deviceClasses=SIM_CLASSES,
        )


def _same(a: PlanOutcome, b: PlanOutcome) -> None:
    assert a.model_dump() == b.model_dump()


@SETTINGS
@given(model=st.sampled_from(MODELS), accelerator=policies, fleet=devices(), holder=st.sampled_from(["ns/me", "ns/x"]))
def test_the_same_input_gives_the_same_plan(
    model: str, accelerator: AcceleratorPolicy, fleet: list[Device], holder: str
) -> None:
    inventory = InventorySnapshot(devices=fleet, deviceClasses=SIM_CLASSES)
    req = request(model, accelerator, inventory, holder)
    first = plan_launch(req)
    # Again on the same objects (the snapshot index is reused), and on a deep copy (it is built anew).
    _same(first, plan_launch(req))
    _same(first, plan_launch(req.model_copy(deep=True)))
    rebuilt = InventorySnapshot.model_validate(inventory.model_dump())
    _same(first, plan_launch(request(model, accelerator, rebuilt, holder)))
