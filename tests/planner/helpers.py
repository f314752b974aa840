"""A hand-built inventory shaped like the simulated cluster (deploy/dev/gpu-inventory.yaml).

gpu-h100-0: 4 MPS-shareable H100 (gpu-0..3) and 4 exclusive H100 (gpu-4..7);
gpu-h100-mig-0: one H100 cut into two 3g.40gb MIG instances, MPS on each;
gpu-t4-0: 4 MPS-shareable Tesla T4.
DeviceClasses select with the same CEL the simulated cluster publishes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from inference_api.plan import LaunchPlan, OrderFacts, PlanOutcome, RuntimeFallbackFlag
from inference_api.reasons import Reason
from inference_api.types import AcceleratorPolicy, PlacementType, SharingMode
from planner.inventory import Device, DeviceAllocation, DeviceClass, InventorySnapshot
from planner.planning import PlanningRequest, plan_launch

D = "gpu.deckhouse.io"
H100 = "NVIDIA H100 80GB HBM3"
T4 = "Tesla T4"
H100_MIB = 80 * 1024
T4_MIB = 16 * 1024


def device(
    name: str,
    node: str,
    product: str,
    family: str,
    memory_gib: int,
    *,
    shareable: bool,
    placement: PlacementType = PlacementType.WHOLE_DEVICE,
    mig_profile: str | None = None,
    allocations: Iterable[DeviceAllocation] = (),
) -> Device:
    return Device(
        name=name,
        node=node,
        productName=product,
        memoryMiB=memory_gib * 1024,
        hardwareFamily=family,
        placement=placement,
        migProfile=mig_profile,
        allowMultipleAllocations=shareable,
        attributes={"sharingMode": "MPS" if shareable else "Exclusive", "shareable": shareable},
        capacity={f"{D}/sharePercent": 100} if shareable else {},
        allocations=list(allocations),
    )


def cel(**match: object) -> str:
    """The simulated cluster's selector: driver check, then one equality per attribute."""
    terms = [f'device.driver == "{D}"']
    terms += [f'device.attributes["{D}"].{k} == {json.dumps(v)}' for k, v in match.items()]
    return " && ".join(terms)


SIM_CLASSES = [
    DeviceClass(name="nvidia-h100-mps-mig", selectors=[cel(productName=H100, sharingMode="MPS")]),
    DeviceClass(
        name="nvidia-hopper-s3-shared",
        selectors=[cel(hardwareFamily="hopper", placement="WholeDevice", shareable=True)],
    ),
    DeviceClass(name="nvidia-t4-mps-physical", selectors=[cel(productName=T4, placement="WholeDevice")]),
    DeviceClass(
        name="nvidia-h100-dedicated", selectors=[cel(productName=H100, placement="WholeDevice", shareable=False)]
    ),
]


def sim_devices(allocations: Mapping[str, Iterable[DeviceAllocation]] | None = None) -> list[Device]:
    """allocations: "node/device" → what other claims hold."""
    taken = dict(allocations or {})
    out: list[Device] = []
    for i in range(8):
        key = f"gpu-h100-0/gpu-{i}"
        held = taken.get(key, ())
        out.append(device(f"gpu-{i}", "gpu-h100-0", H100, "hopper", 80, shareable=i < 4, allocations=held))
    for part in range(2):
        key = f"gpu-h100-mig-0/gpu-0-mig-{part}"
        out.append(
            device(
                f"gpu-0-mig-{part}",
                "gpu-h100-mig-0",
                H100,
                "hopper",
                40,
                shareable=True,
                placement=PlacementType.PARTITION,
                mig_profile="3g.40gb",
                allocations=taken.get(key, ()),
            )
        )
    for i in range(4):
        key = f"gpu-t4-0/gpu-{i}"
        out.append(device(f"gpu-{i}", "gpu-t4-0", T4, "turing", 16, shareable=True, allocations=taken.get(key, ())))
    return out


def sim_snapshot(
    allocations: Mapping[str, Iterable[DeviceAllocation]] | None = None,
    classes: list[DeviceClass] | None = None,
) -> InventorySnapshot:
    chosen = SIM_CLASSES if classes is None else classes
    return InventorySnapshot(devices=sim_devices(allocations), deviceClasses=chosen)


def policy(
    classes: list[str] | None = None,
    sharing: list[SharingMode] | None = None,
    placement: list[PlacementType] | None = None,
    max_count: int | None = 1,
    min_share: int | None = None,
    max_share: int | None = None,
) -> AcceleratorPolicy:
    return AcceleratorPolicy(
        allowedDeviceClasses=classes,
        allowedSharingModes=sharing,
        allowedPlacementTypes=placement,
        maxAcceleratorCount=max_count,
        minSharePercent=min_share,
        maxSharePercent=max_share,
    )


SHARED = [SharingMode.SHARED]
DEDICATED = [SharingMode.DEDICATED]
BOTH_MODES = [SharingMode.SHARED, SharingMode.DEDICATED]
WHOLE = [PlacementType.WHOLE_DEVICE]
PARTITION = [PlacementType.PARTITION]
BOTH_PLACEMENTS = [PlacementType.WHOLE_DEVICE, PlacementType.PARTITION]

# The bundled default-llm: both modes, both placements, one device per replica, no share bounds.
DEFAULT_LLM = policy(sharing=BOTH_MODES, placement=BOTH_PLACEMENTS, max_count=1)


def plan(
    model: str,
    accelerator_policy: AcceleratorPolicy | None = DEFAULT_LLM,
    inventory: InventorySnapshot | None = None,
    *,
    fallback: bool = True,
    holder: str | None = None,
    current: LaunchPlan | None = None,
    **facts: Any,
) -> PlanOutcome:
    return plan_launch(
        PlanningRequest(
            facts=OrderFacts(modelName=model, **facts),
            acceleratorPolicy=accelerator_policy,
            inventory=inventory if inventory is not None else sim_snapshot(),
            runtimeFallback=RuntimeFallbackFlag(enabled=fallback),
            holder=holder,
            currentPlan=current,
            className="test-class",
        )
    )


def planned(outcome: PlanOutcome) -> LaunchPlan:
    assert outcome.refusal is None, outcome.refusal
    assert outcome.plan is not None
    return outcome.plan


def refused(outcome: PlanOutcome, reason: Reason) -> str:
    assert outcome.plan is None, outcome.plan
    assert outcome.refusal is not None
    assert outcome.refusal.reason is reason, outcome.refusal
    return outcome.refusal.message


def hold(plan_: LaunchPlan, holder: str = "ns/other") -> dict[str, list[DeviceAllocation]]:
    """The allocations a plan makes, as the inventory would report them."""
    memory = plan_.memoryRequestMiB
    return {
        f"{plan_.nodeName}/{name}": [DeviceAllocation(holder=holder, sharePercent=plan_.sharePercent, memoryMiB=memory)]
        for name in plan_.deviceNames
    }


def merge(*maps: Mapping[str, list[DeviceAllocation]]) -> dict[str, list[DeviceAllocation]]:
    out: dict[str, list[DeviceAllocation]] = {}
    for m in maps:
        for key, allocations in m.items():
            out.setdefault(key, []).extend(allocations)
    return out


def arg(plan_: LaunchPlan, flag: str) -> str | None:
    args = plan_.recipe.args
    if flag not in args:
        return None
    i = args.index(flag)
    return args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else ""
