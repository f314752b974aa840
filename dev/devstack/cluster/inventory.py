"""The simulated GPU inventory: data in ``deploy/dev/gpu-inventory.yaml``, rendered here into objects.

The file's nodes are the default fleet and, at the same time, the shapes of a fleet of any size:
``FleetSize`` says how many nodes of each shape (``gpu-h100``, ``gpu-h100-mig``, ``gpu-t4``, ``cpu``;
a node's shape is its name less the trailing ``-<n>``), and :func:`sized_inventory` makes them,
named ``<shape>-0``, ``<shape>-1``, … The default size is the file's own (one of each), so the
default fleet is exactly the file. ``ai-inference cluster up --h100-nodes N …`` keeps the size in
the cluster's state directory (``fleet.json``), where :func:`fleet_inventory` reads it back.

kwok has no DRA support, so the DRA side (DeviceClasses, ResourceSlices) is published by us, the
way the gpu module's driver would; the real kube-scheduler then allocates ResourceClaims against
it. PhysicalGPU objects mirror the gpu module's own inventory kind (CRD stand-in).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from devstack.cluster.paths import DEV_DIR
from inference_api.gpu_types import GPU_GROUP, GPU_VERSION

INVENTORY_FILE = DEV_DIR / "gpu-inventory.yaml"
# Where a cluster's state directory keeps the size of its fleet (absent: the default fleet).
FLEET_FILE = "fleet.json"
DRIVER = "gpu.deckhouse.io"
MEMORY_CAPACITY = f"{DRIVER}/memory"
SHARE_CAPACITY = f"{DRIVER}/sharePercent"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
SIMULATED_LABEL = "ai-inference.deckhouse.io/simulated"

WHOLE_DEVICE = "WholeDevice"
PARTITION = "Partition"


@dataclass(frozen=True)
class SimDevice:
    """One allocatable DRA device (a whole GPU or one MIG instance) on a simulated node."""

    node: str
    name: str  # device name in the ResourceSlice
    index: int  # physical GPU index on the node
    product_name: str
    hardware_family: str
    memory_gib: int  # memory of this device (the partition's, for a MIG instance)
    placement: str  # WholeDevice | Partition
    sharing_mode: str  # MPS | Exclusive
    physical_gpu: str  # name of the PhysicalGPU object it belongs to
    mig_profile: str | None = None

    @property
    def shareable(self) -> bool:
        return self.sharing_mode == "MPS"

    @property
    def attributes(self) -> dict[str, str | int | bool]:
        """Attribute values as CEL sees them under ``device.attributes["gpu.deckhouse.io"]``."""
        out: dict[str, str | int | bool] = {
            "productName": self.product_name,
            "hardwareFamily": self.hardware_family,
            "memoryGiB": self.memory_gib,
            "placement": self.placement,
            "sharingMode": self.sharing_mode,
            "shareable": self.shareable,
            "index": self.index,
            "physicalGPU": self.physical_gpu,
            "uuid": f"GPU-sim-{self.node}-{self.name}",
        }
        if self.mig_profile:
            out["migProfile"] = self.mig_profile
        return out


@dataclass(frozen=True)
class SimPhysicalGPU:
    name: str
    node: str
    index: int
    product_name: str
    hardware_family: str
    memory_gib: int
    mig_profiles: tuple[str, ...]
    sharing_modes: tuple[str, ...]


@dataclass(frozen=True)
class SimNode:
    name: str
    cpu: str
    memory: str
    devices: tuple[SimDevice, ...]
    gpus: tuple[SimPhysicalGPU, ...]


@dataclass(frozen=True)
class SimDeviceClass:
    name: str
    description: str
    match: dict[str, str | int | bool]

    @property
    def cel(self) -> str:
        """The CEL selector: driver check, then one equality per matched attribute."""
        terms = [f'device.driver == "{DRIVER}"']
        for key, value in self.match.items():
            terms.append(f'device.attributes["{DRIVER}"].{key} == {json.dumps(value)}')
        return " && ".join(terms)

    def selects(self, device: SimDevice) -> bool:
        """Python twin of ``cel`` for tests and planners that want the expected answer."""
        return all(device.attributes.get(k) == v for k, v in self.match.items())


@dataclass(frozen=True)
class Inventory:
    nodes: tuple[SimNode, ...]
    device_classes: tuple[SimDeviceClass, ...]
    source: Path = field(default=INVENTORY_FILE)

    @property
    def devices(self) -> tuple[SimDevice, ...]:
        return tuple(d for n in self.nodes for d in n.devices)

    @property
    def physical_gpus(self) -> tuple[SimPhysicalGPU, ...]:
        return tuple(g for n in self.nodes for g in n.gpus)

    def device_class(self, name: str) -> SimDeviceClass:
        for dc in self.device_classes:
            if dc.name == name:
                return dc
        raise KeyError(name)

    def devices_of_class(self, name: str) -> tuple[SimDevice, ...]:
        dc = self.device_class(name)
        return tuple(d for d in self.devices if dc.selects(d))


def load_inventory(path: Path = INVENTORY_FILE) -> Inventory:
    """Parse the inventory file into typed records (no cluster needed)."""
    raw = yaml.safe_load(path.read_text())
    products = raw["products"]
    mig_memory = {name: int(p["memoryGiB"]) for name, p in raw.get("migProfiles", {}).items()}
    nodes = []
    for n in raw["nodes"]:
        devices: list[SimDevice] = []
        gpus: list[SimPhysicalGPU] = []
        index = 0
        for group in n.get("gpus", []):
            product = products[group["product"]]
            for _ in range(int(group.get("count", 1))):
                gpu_name = f"{n['name']}-gpu-{index}"
                migs = tuple(group.get("mig", []))
                common = {
                    "node": n["name"],
                    "index": index,
                    "product_name": product["productName"],
                    "hardware_family": product["hardwareFamily"],
                    "sharing_mode": group["sharing"],
                    "physical_gpu": gpu_name,
                }
                if migs:
                    for part, profile in enumerate(migs):
                        devices.append(
                            SimDevice(
                                name=f"gpu-{index}-mig-{part}",
                                memory_gib=mig_memory[profile],
                                placement=PARTITION,
                                mig_profile=profile,
                                **common,
                            )
                        )
                else:
                    devices.append(
                        SimDevice(
                            name=f"gpu-{index}", memory_gib=int(product["memoryGiB"]), placement=WHOLE_DEVICE, **common
                        )
                    )
                modes = ["MIG"] if migs else []
                if group["sharing"] == "MPS":
                    modes.append("MPS")
                gpus.append(
                    SimPhysicalGPU(
                        name=gpu_name,
                        node=n["name"],
                        index=index,
                        product_name=product["productName"],
                        hardware_family=product["hardwareFamily"],
                        memory_gib=int(product["memoryGiB"]),
                        mig_profiles=migs,
                        sharing_modes=tuple(modes) or ("none",),
                    )
                )
                index += 1
        nodes.append(SimNode(n["name"], str(n["cpu"]), str(n["memory"]), tuple(devices), tuple(gpus)))
    classes = tuple(SimDeviceClass(c["name"], c.get("description", ""), dict(c["match"])) for c in raw["deviceClasses"])
    return Inventory(tuple(nodes), classes, path)


# ---------------------------------------------------------------------------------------------
# A fleet of any size


@dataclass(frozen=True)
class FleetSize:
    """How many nodes of each shape of the inventory file (the default: the file's own fleet)."""

    h100_nodes: int = 1
    mig_nodes: int = 1
    t4_nodes: int = 1
    cpu_nodes: int = 1
    # Every node's allocatable CPU and memory, when set (None: the file's). The orders' pods ask for
    # CPU and memory too: a fleet sized for many small orders needs more of both than a GPU node has.
    node_cpu: str | None = None
    node_memory: str | None = None

    # The inventory file's node shapes, by field.
    SHAPES = {"h100_nodes": "gpu-h100", "mig_nodes": "gpu-h100-mig", "t4_nodes": "gpu-t4", "cpu_nodes": "cpu"}

    def __post_init__(self) -> None:
        for name in self.SHAPES:
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")

    def count(self, shape: str) -> int:
        for name, known in self.SHAPES.items():
            if known == shape:
                return int(getattr(self, name))
        raise KeyError(shape)

    def describe(self) -> str:
        sizes = ", ".join(f"{getattr(self, n)} {shape}" for n, shape in self.SHAPES.items())
        if self.node_cpu or self.node_memory:
            sizes += f" (each cpu {self.node_cpu or 'as in the file'}, memory {self.node_memory or 'as in the file'})"
        return sizes


_NUMBERED = re.compile(r"^(?P<shape>.+)-(?P<n>\d+)$")


def node_shape(name: str) -> str:
    """``gpu-h100-0`` → ``gpu-h100``: a node's shape is its name less the trailing number."""
    match = _NUMBERED.match(name)
    return match.group("shape") if match else name


def renamed(node: SimNode, name: str) -> SimNode:
    """The node under another name: its devices and PhysicalGPUs follow (``<node>-gpu-<index>``)."""
    gpus = tuple(replace(g, name=f"{name}-gpu-{g.index}", node=name) for g in node.gpus)
    devices = tuple(replace(d, node=name, physical_gpu=f"{name}-gpu-{d.index}") for d in node.devices)
    return replace(node, name=name, devices=devices, gpus=gpus)


def sized_inventory(size: FleetSize | None = None, base: Inventory | None = None) -> Inventory:
    """The fleet of ``size``: each shape of the file's nodes made that many times (the first node
    of a shape is its template). The default size gives exactly the file's fleet."""
    base = base or load_inventory()
    size = size or FleetSize()
    templates: dict[str, SimNode] = {}
    for node in base.nodes:
        templates.setdefault(node_shape(node.name), node)
    nodes: list[SimNode] = []
    for shape, template in templates.items():
        try:
            count = size.count(shape)
        except KeyError:
            count = 1  # a shape FleetSize does not know: as in the file
        if size.node_cpu or size.node_memory:
            template = replace(template, cpu=size.node_cpu or template.cpu, memory=size.node_memory or template.memory)
        nodes += [renamed(template, f"{shape}-{i}") for i in range(count)]
    return Inventory(tuple(nodes), base.device_classes, base.source)


def save_fleet(state_dir: Path, size: FleetSize) -> None:
    """Keep the fleet's size with the cluster (read by :func:`fleet_inventory`)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / FLEET_FILE).write_text(json.dumps(asdict(size), indent=2))


def fleet_size(state_dir: Path | None) -> FleetSize:
    """The fleet size kept in a cluster's state directory; the default when none is kept."""
    path = state_dir / FLEET_FILE if state_dir is not None else None
    if path is None or not path.is_file():
        return FleetSize()
    raw = json.loads(path.read_text())
    counts = {k: int(v) for k, v in raw.items() if k in FleetSize.SHAPES}
    return FleetSize(**counts, node_cpu=raw.get("node_cpu"), node_memory=raw.get("node_memory"))


def fleet_inventory(state_dir: Path | None) -> Inventory:
    """The inventory of the cluster in ``state_dir``: the file's shapes at the size kept there."""
    return sized_inventory(fleet_size(state_dir))


# ---------------------------------------------------------------------------------------------
# Rendering into Kubernetes objects


def node_object(node: SimNode) -> dict[str, Any]:
    resources = {"cpu": node.cpu, "memory": node.memory, "pods": "110", "ephemeral-storage": "1Ti"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            # kwok manages only nodes carrying this annotation (see the launcher's kwok flags).
            "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": node.name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                SIMULATED_LABEL: "true",
                **({f"{DRIVER}/present": "true"} if node.devices else {}),
            },
        },
        "spec": {},
        # kwok's node-initialize stage keeps allocatable/capacity that are already set.
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


def _capacity(device: SimDevice) -> dict[str, Any]:
    memory = f"{device.memory_gib}Gi"
    if not device.shareable:
        return {MEMORY_CAPACITY: {"value": memory}}
    # memory: the default is the whole device, so a claim that names no capacity (a whole or
    # dedicated placement: activities/builders/claim.py sends none) takes the card to itself.
    # A shared claim requests gpu.deckhouse.io/memory (MiB granularity, 1 GiB minimum).
    # sharePercent: the MPS compute share, accounted independently of memory; default 0 so a
    # memory-only shared claim does not block the next one, while explicit requests add up to 100.
    return {
        MEMORY_CAPACITY: {
            "value": memory,
            "requestPolicy": {"default": memory, "validRange": {"min": "1Gi", "step": "1Mi"}},
        },
        SHARE_CAPACITY: {
            "value": "100",
            "requestPolicy": {"default": "0", "validRange": {"min": "0", "step": "1"}},
        },
    }


def _attribute(value: str | int | bool) -> dict[str, Any]:
    if isinstance(value, bool):  # before int: bool is an int in Python
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": value}


def resource_slice_object(node: SimNode) -> dict[str, Any]:
    devices = []
    for d in node.devices:
        device: dict[str, Any] = {
            "name": d.name,
            "attributes": {k: _attribute(v) for k, v in d.attributes.items()},
            "capacity": _capacity(d),
        }
        if d.shareable:
            device["allowMultipleAllocations"] = True
        devices.append(device)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node.name}-{DRIVER}", "labels": {SIMULATED_LABEL: "true"}},
        "spec": {
            "driver": DRIVER,
            "nodeName": node.name,
            "pool": {"name": node.name, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def device_class_object(dc: SimDeviceClass) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {
            "name": dc.name,
            "labels": {SIMULATED_LABEL: "true"},
            "annotations": {"description": dc.description},
        },
        "spec": {"selectors": [{"cel": {"expression": dc.cel}}]},
    }


def physical_gpu_object(gpu: SimPhysicalGPU, with_status: bool = True) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": f"{GPU_GROUP}/{GPU_VERSION}",
        "kind": "PhysicalGPU",
        "metadata": {"name": gpu.name, "labels": {SIMULATED_LABEL: "true", f"{DRIVER}/node": gpu.node}},
    }
    if with_status:
        obj["status"] = {
            "nodeName": gpu.node,
            "index": gpu.index,
            "productName": gpu.product_name,
            "memoryMiB": gpu.memory_gib * 1024,
            "hardwareFamily": gpu.hardware_family,
            "migProfiles": list(gpu.mig_profiles),
            "sharingModes": list(gpu.sharing_modes),
        }
    else:
        obj["spec"] = {}
    return obj


def inventory_objects(inv: Inventory | None = None) -> Iterator[dict[str, Any]]:
    """Every object of the inventory, in apply order (PhysicalGPUs without status)."""
    inv = inv or load_inventory()
    for node in inv.nodes:
        yield node_object(node)
    for dc in inv.device_classes:
        yield device_class_object(dc)
    for node in inv.nodes:
        if node.devices:
            yield resource_slice_object(node)
    for gpu in inv.physical_gpus:
        yield physical_gpu_object(gpu, with_status=False)


def physical_gpu_statuses(inv: Inventory | None = None) -> Iterator[dict[str, Any]]:
    """PhysicalGPU objects carrying only status: applied to the ``/status`` subresource."""
    inv = inv or load_inventory()
    for gpu in inv.physical_gpus:
        yield physical_gpu_object(gpu, with_status=True)
