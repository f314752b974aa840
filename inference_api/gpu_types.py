"""PhysicalGPU as this module reads it from the gpu module's inventory.

The CRD generated from this type is a dev/test stand-in for the gpu module's own kind.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from inference_api import crd_spec

GPU_GROUP = "gpu.deckhouse.io"
GPU_VERSION = "v1alpha1"
GPU_PLURAL = "physicalgpus"


class PhysicalGPUStatus(BaseModel):
    """What the gpu module observed on the node."""

    model_config = ConfigDict(extra="ignore")
    nodeName: str = Field(description="Node the device is on.")
    index: int = Field(default=0, description="Index of the device on the node.")
    productName: str = Field(description="Product name, e.g. NVIDIA H100 80GB HBM3.")
    memoryMiB: int = Field(description="Device memory in MiB.", ge=0)
    hardwareFamily: str = Field(description="Hardware family, e.g. hopper, ampere, turing.")
    migProfiles: list[str] = Field(default_factory=list, description="MIG profiles the device is partitioned into.")
    sharingModes: list[str] = Field(default_factory=list, description="Sharing the device offers: MPS, MIG, none.")


class PhysicalGPUSpec(BaseModel):
    """Empty: the gpu module only publishes status."""

    model_config = ConfigDict(extra="ignore")


STAND_IN_CRDS = [
    crd_spec.CRDSpec(
        kind="PhysicalGPU",
        plural=GPU_PLURAL,
        singular="physicalgpu",
        scope="Cluster",
        short_names=[],
        description="A physical GPU of the gpu module's inventory (dev/test stand-in: only what ai-inference reads).",
        spec_model=PhysicalGPUSpec,
        status_model=PhysicalGPUStatus,
        columns=[
            crd_spec.column("Node", ".status.nodeName", "Node of the device."),
            crd_spec.column("Product", ".status.productName", "Product name."),
            crd_spec.column("MemoryMiB", ".status.memoryMiB", "Device memory.", kind="integer"),
            crd_spec.AGE,
        ],
        group=GPU_GROUP,
        version=GPU_VERSION,
        categories=["gpu"],
        spec_required=False,
        labels={"ai-inference.deckhouse.io/stand-in": "gpu"},
    )
]
