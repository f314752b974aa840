"""The launch plan: what the planner decided for one order, and the vLLM recipe to run there.

Shared by the planner (which produces it), the workload builders (which turn it into
objects) and the order workflow (which carries it and publishes ``status.resolved``).

What travels in workflow payloads (``LaunchPlan`` with its ``Recipe`` and ``ReplicaPlacement``s in
the order's state, ``PlanOutcome`` and ``PlanRefusal`` as the plan activity's result) drops fields it
does not know (``extra="ignore"``): a release rolled back to reads what a later one wrote
(docs/upgrade.md). The planner API's request (``LaunchPlanRequest``, ``OrderFacts``, ``Toleration``,
``RuntimeFallbackFlag``) is no workflow payload and still refuses a field it does not know (HTTP 400).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from inference_api.reasons import Reason
from inference_api.types import (
    AcceleratorPolicy,
    EndpointType,
    PlacementType,
    ResolvedStatus,
    ServingFeature,
    ServingFeaturesStatus,
    SharingMode,
)


class RecipeSource(StrEnum):
    COMPILED = "compiled"
    PRESET = "preset"
    FALLBACK = "fallback"


class RecipeFeatures(BaseModel):
    """What the recipe compiled for clients besides plain chat (recipes/model-families.yaml)."""

    model_config = ConfigDict(extra="ignore")  # a workflow payload (above)
    modelFamily: str | None = Field(default=None, description="The model family the tables know; None: unknown.")
    toolCallParser: str | None = Field(default=None, description="vLLM --tool-call-parser (auto tool choice on).")
    reasoningParser: str | None = Field(default=None, description="vLLM --reasoning-parser.")
    chatTemplate: str | None = Field(default=None, description="vLLM --chat-template, where the family needs one.")
    note: str = Field(default="", description="Why a feature is not served (unknown family, the class, the contract).")

    def status(self) -> ServingFeaturesStatus:
        return ServingFeaturesStatus(
            modelFamily=self.modelFamily,
            toolCalling=self.toolCallParser is not None,
            reasoning=self.reasoningParser is not None,
        )


class Recipe(BaseModel):
    """How vLLM is launched on the chosen hardware (the latency branch of a compiled recipe)."""

    model_config = ConfigDict(extra="ignore")  # a workflow payload (above)
    source: RecipeSource
    runtime: str = "vllm"
    runtimeVersion: str = Field(description="Release of the runtime the recipe was compiled for.")
    image: str
    args: list[str] = Field(default_factory=list, description="Arguments after `vllm serve <model>`.")
    env: dict[str, str] = Field(default_factory=dict)
    hardwareFamily: str
    branch: str = "latency"
    vramMinimumGiB: float = Field(ge=0)
    features: RecipeFeatures | None = Field(
        default=None, description="Serving features compiled into args (None: a plan made before they were)."
    )


class OrderFacts(BaseModel):
    """What is known about the ordered model when planning."""

    model_config = ConfigDict(extra="forbid")
    modelName: str = Field(description="HF repo (org/repo) or the catalog model's served name.")
    parameterCount: str | None = Field(default=None, description="Catalog fact, e.g. 32B; wins over the order's value.")
    # spec.model.parameterCount of the order: the second rung, used when the catalog has no fact.
    orderParameterCount: str | None = Field(
        default=None, description="spec.model.parameterCount of the order, used when there is no catalog fact."
    )
    quantization: str | None = Field(default=None, description="Catalog fact, e.g. awq, gptq, fp8; none = unquantized.")
    format: str | None = None
    endpointType: EndpointType = EndpointType.CHAT
    disabledFeatures: list[ServingFeature] = Field(
        default_factory=list, description="The class's modelPolicy.disabledFeatures: not compiled, whatever the family."
    )


class ReplicaPlacement(BaseModel):
    """Where the plan put one replica: its node and its devices."""

    model_config = ConfigDict(extra="ignore")  # a workflow payload (above)
    nodeName: str
    deviceNames: list[str]


MAX_PLANNED_REPLICAS = 64


class LaunchPlan(BaseModel):
    model_config = ConfigDict(extra="ignore")  # a workflow payload (above)
    deviceClass: str
    acceleratorProductName: str
    acceleratorMemoryGiB: int
    placementMode: PlacementType
    sharingMode: SharingMode
    deviceCount: int = Field(ge=1)
    sharePercent: int = Field(ge=1, le=100)
    # Sent as the claim's capacity request gpu.deckhouse.io/memory when 1 <= sharePercent <= 99.
    memoryRequestMiB: int | None = None
    cpu: str = Field(description="CPU request of the runtime container, e.g. '4'.")
    memory: str = Field(description="Memory request of the runtime container, e.g. '32Gi'.")
    modelVolumeGiB: int = Field(ge=1)
    recipe: Recipe
    # Where the planner found room. The DRA scheduler makes the final choice within deviceClass;
    # builders may pin the claim to these devices so that the plan and the scheduler agree.
    nodeName: str | None = Field(default=None, description="Node of the devices the plan found room on.")
    deviceNames: list[str] = Field(default_factory=list, description="DRA devices the plan found room on.")
    modelMemoryMiB: int | None = Field(
        default=None, description="Accelerator memory the model needs on each device (the share was sized for it)."
    )
    deviceSelector: str | None = Field(
        default=None,
        description="A DRA CEL selector that selects exactly the planned devices (every replica's), by the unique "
        "attribute their driver publishes for each (uuid); absent when a device publishes none. The claim carries "
        "it, and the pod a node affinity to the planned nodes, so that the cluster allocates what the plan chose.",
    )
    replicaPlacements: list[ReplicaPlacement] = Field(
        default_factory=list,
        description="Where each replica goes, when the request asked for several (the first is nodeName and "
        "deviceNames); empty: one replica was planned.",
    )
    # The commit of the model's repository every replica fetches, asked of the hub by the worker when
    # the plan was made (activities/model_revision.py); None: not pinned (the message said why), or a
    # plan made before pins: each replica's fetcher resolves the reference itself.
    modelCommit: str | None = Field(default=None, pattern=r"^[0-9a-f]{40}$")
    # Why the commit is not pinned (the hub's answer, or the setting that is off); None when pinned.
    modelNotPinned: str | None = None
    # The worker's seal of the planner's answer for one order (activities/plan_seal.py): the apply writes
    # only a plan it sealed. None: not sealed (a plan recorded before seals, or one made by hand).
    seal: str | None = None

    def placements(self) -> list[ReplicaPlacement]:
        """Every replica's placement the plan made (one when it made none per replica)."""
        if self.replicaPlacements:
            return list(self.replicaPlacements)
        return [ReplicaPlacement(nodeName=self.nodeName, deviceNames=self.deviceNames)] if self.nodeName else []

    def resolved(self, replan_count: int) -> ResolvedStatus:
        return ResolvedStatus(
            deviceClass=self.deviceClass,
            acceleratorProductName=self.acceleratorProductName,
            acceleratorMemoryGiB=self.acceleratorMemoryGiB,
            placementMode=self.placementMode,
            sharingMode=self.sharingMode,
            sharePercent=self.sharePercent,
            replanCount=replan_count,
            features=self.recipe.features.status() if self.recipe.features else None,
            modelCommit=self.modelCommit,
            modelNotPinned=self.modelNotPinned,
        )


class Toleration(BaseModel):
    """A pod toleration (core/v1 Toleration): the module settings' workload.tolerations, which every
    replica's pod carries."""

    model_config = ConfigDict(extra="forbid")
    key: str | None = None
    operator: str = Field(default="Equal", description="Equal or Exists.")
    value: str | None = None
    effect: str | None = Field(default=None, description="Empty: every effect.")
    tolerationSeconds: int | None = None


class RuntimeFallbackFlag(BaseModel):
    """``runtimeFallback`` of F2-09: may the planner synthesize a generic recipe (phase 2.4.1)."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = True


class LaunchPlanRequest(BaseModel):
    """Body of ``POST /api/v1/launch-plan`` (F2-09): what the controller knows about one order.

    The planner adds its own inventory snapshot (GPUs, DeviceClasses, current claims) and answers
    with a :class:`PlanOutcome`.
    """

    model_config = ConfigDict(extra="forbid")
    facts: OrderFacts
    acceleratorPolicy: AcceleratorPolicy | None = Field(
        default=None, description="The class's acceleratorPolicy; absent: one whole, dedicated device per replica."
    )
    runtimeFallback: RuntimeFallbackFlag = Field(default_factory=RuntimeFallbackFlag)
    className: str | None = Field(default=None, description="Name of the InferenceServiceClass, for messages.")
    holder: str | None = Field(
        default=None,
        description="namespace/name of the order. Device allocations with this holder are the order's own: "
        "a replan does not count them against it.",
    )
    currentPlan: LaunchPlan | None = Field(
        default=None,
        description="The plan the order already holds. On the devices it names, one allocation of its share is "
        "the order's own and is not counted against it (for inventories that cannot tell holders apart).",
    )
    besideCurrent: bool = Field(
        default=False,
        description="Plan a move made before it breaks: the order's own allocations count against it, so the "
        "new place has room while the replicas it holds still run.",
    )
    preferDevice: str | None = Field(
        default=None,
        max_length=512,
        description="A repack's target (``node/device``): among the places that take the same of the cluster, "
        "this device ranks first. A hint that changes the choice, never what fits or how much is taken.",
    )
    tolerations: list[Toleration] = Field(
        default_factory=list,
        description="What the replicas' pods tolerate (module settings workload.tolerations): a node with a "
        "NoSchedule/NoExecute taint none of them tolerates is not planned on.",
    )
    nodeSelector: dict[str, str] = Field(
        default_factory=dict, description="The replicas' pods' nodeSelector (module settings workload.nodeSelector)."
    )
    replicas: int = Field(
        default=1,
        ge=1,
        le=MAX_PLANNED_REPLICAS,
        description="How many replicas to place, each on capacity of its own (an order whose replica count is "
        "fixed: all of them); they share the first's device class, share and recipe.",
    )


class PlanRefusal(BaseModel):
    model_config = ConfigDict(extra="ignore")  # a workflow payload (above)
    reason: Reason
    message: str


class PlanOutcome(BaseModel):
    """Exactly one of plan / refusal is set."""

    model_config = ConfigDict(extra="ignore")  # a workflow payload (above)
    plan: LaunchPlan | None = None
    refusal: PlanRefusal | None = None
