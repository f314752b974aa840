"""API types of ai.deckhouse.io/v1alpha1: the one source of truth for the CRDs and the code.

Field names are the API's own (camelCase) so that the CRD, the docs and the code read alike.
Write-time refusals live here as ``x-kubernetes-validations`` so the API server says no
before anything is stored; ``inference_api.crd`` turns these models into the CRDs.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

GROUP = "ai.deckhouse.io"
VERSION = "v1alpha1"
# The class the module ships (Helm creates it); background preemption leaves its orders alone.
BUNDLED_CLASS_NAME = "default-llm"
# Resource (plural) names of the module's two kinds: the one home every client call reads.
ORDERS = "inferenceservices"
CLASSES = "inferenceserviceclasses"
API_VERSION = f"{GROUP}/{VERSION}"

# "32B", "360M", "1.5B", "7b": a number and a magnitude (thousand, million, billion, trillion).
# "[.]" rather than an escaped dot: CEL string literals allow no "\\." escape.
PARAMETER_COUNT_PATTERN = r"^[0-9]+([.][0-9]+)?[KkMmBbTt]$"
HF_REPO_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$"


def cel(rule: str, message: str, field_path: str | None = None) -> dict[str, str]:
    entry = {"rule": rule, "message": message}
    if field_path:
        entry["fieldPath"] = field_path
    return entry


# The order's name names its Service (an RFC 1035 label: starts with a letter) and its
# StatefulSet, whose pods carry `controller-revision-hash: <name>-<10 chars>`, a label value of at
# most 63 characters. Kubernetes' own rule for the order (a DNS subdomain) is looser than both, so
# the CRD refuses such names at write time instead of leaving an order that can never be applied.
ORDER_NAME_MAX_LENGTH = 52
ORDER_NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
ORDER_NAME_RULES: tuple[dict[str, str], ...] = (
    cel(
        f"self.metadata.name.size() <= {ORDER_NAME_MAX_LENGTH}",
        f"metadata.name: an InferenceService name must be at most {ORDER_NAME_MAX_LENGTH} characters: it names "
        "the order's StatefulSet, whose pods' revision label adds 11 more and is limited to 63",
    ),
    cel(
        f"self.metadata.name.matches('{ORDER_NAME_PATTERN}')",
        "metadata.name: an InferenceService name must start with a letter and contain only lowercase letters, "
        "digits and '-' (no '.'): it names the order's Service, which must be an RFC 1035 label",
    ),
)


def _validations(*rules: dict[str, str]) -> dict[str, Any]:
    return {"x-kubernetes-validations": list(rules)}


class _Model(BaseModel):
    # Unknown fields are ignored when reading objects: the API server already pruned them.
    model_config = ConfigDict(extra="ignore", populate_by_name=True, use_enum_values=False)


# ---------------------------------------------------------------------------- enums


class ModelSource(StrEnum):
    HUGGING_FACE = "HuggingFace"
    AI_MODELS = "ai-models"


class ModelKind(StrEnum):
    MODEL = "Model"
    CLUSTER_MODEL = "ClusterModel"


class EndpointType(StrEnum):
    CHAT = "Chat"
    EMBEDDINGS = "Embeddings"
    RERANK = "Rerank"


class SharingMode(StrEnum):
    SHARED = "Shared"
    DEDICATED = "Dedicated"


class PlacementType(StrEnum):
    WHOLE_DEVICE = "WholeDevice"
    PARTITION = "Partition"


class ServingFeature(StrEnum):
    """What a chat endpoint serves besides plain chat, when the model's family has it (recipes/model-families.yaml)."""

    TOOL_CALLING = "ToolCalling"
    REASONING = "Reasoning"


class ExposureType(StrEnum):
    EXTERNAL = "External"
    CLUSTER_LOCAL = "ClusterLocal"


class Authentication(StrEnum):
    TOKEN = "Token"
    NONE = "None"


class HttpsMode(StrEnum):
    CERT_MANAGER = "CertManager"
    CUSTOM_CERTIFICATE = "CustomCertificate"


class UpdateStrategy(StrEnum):
    ROLLING_UPDATE = "RollingUpdate"
    ON_DELETE = "OnDelete"


class MovePolicy(StrEnum):
    """Whether the module may move a serving order to a better place (a repack, docs/planner.md)."""

    MAKE_BEFORE_BREAK = "MakeBeforeBreak"
    NEVER = "Never"


class Phase(StrEnum):
    PENDING = "Pending"
    READY = "Ready"
    DEGRADED = "Degraded"
    FAILED = "Failed"


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class ModelScope(StrEnum):
    CLUSTER = "Cluster"
    NAMESPACE = "Namespace"


class ConditionType(StrEnum):
    CLASS_RESOLVED = "ClassResolved"
    MODEL_RESOLVED = "ModelResolved"
    PLANNED = "Planned"
    WORKLOAD_READY = "WorkloadReady"
    READY = "Ready"
    SCALING_HEALTHY = "ScalingHealthy"
    RUNTIME_CURRENT = "RuntimeCurrent"
    # Class conditions.
    VALIDATED = "Validated"


# ------------------------------------------------------------------- shared pieces


class ObjectMeta(_Model):
    name: str = Field(description="Name of the object.")
    namespace: str | None = Field(default=None, description="Namespace of a namespaced object.")
    uid: str | None = Field(default=None, description="UID assigned by the API server.")
    generation: int | None = Field(default=None, description="Generation of the spec.")
    resourceVersion: str | None = Field(default=None, description="Resource version.")
    labels: dict[str, str] | None = Field(default=None, description="Labels.")
    annotations: dict[str, str] | None = Field(default=None, description="Annotations.")
    finalizers: list[str] | None = Field(default=None, description="Finalizers.")
    deletionTimestamp: str | None = Field(default=None, description="Set when deletion was asked.")


class Condition(_Model):
    """A metav1.Condition."""

    type: str = Field(description="Type of the condition, e.g. Ready or Planned.", max_length=316)
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(
        description="Stable CamelCase reason; every reason is answered on the FAQ page.",
        max_length=1024,
        min_length=1,
    )
    message: str = Field(default="", description="What happened and what it asks of the reader.", max_length=32768)
    observedGeneration: int | None = Field(
        default=None, description="metadata.generation the condition was computed for.", ge=0
    )
    lastTransitionTime: str = Field(
        description="When status last changed (RFC 3339).", json_schema_extra={"format": "date-time"}
    )


# ------------------------------------------------------------------ InferenceService


class ModelRef(_Model):
    kind: ModelKind | None = Field(
        default=None,
        description="Catalog kind: Model (namespaced) or ClusterModel (cluster-scoped). "
        "Required with src: ai-models; not allowed with src: HuggingFace.",
    )
    name: str = Field(
        description="HuggingFace: the repository, org/repo. ai-models: the name of the Model or ClusterModel.",
        min_length=1,
        max_length=253,
    )
    namespace: str | None = Field(
        default=None,
        description="Namespace of a kind: Model reference; defaults to the order's namespace. "
        "Allowed with kind: Model only.",
        max_length=63,
    )


class SecretKeyRef(_Model):
    name: str = Field(description="Name of a Secret in the order's namespace.", min_length=1, max_length=253)
    # A Secret's data key: at most 253 characters of [-._a-zA-Z0-9] (what the API server allows).
    key: str = Field(
        default="token",
        description="Key inside the Secret that holds the token.",
        min_length=1,
        max_length=253,
        pattern=r"^[-._a-zA-Z0-9]+$",
    )


class ModelSpec(_Model):
    model_config = ConfigDict(
        json_schema_extra=_validations(
            cel(
                "self.src != 'HuggingFace' || (!has(self.ref.kind) && !has(self.ref.namespace))",
                "spec.model.ref: a HuggingFace reference is {name: org/repo} only; remove ref.kind and ref.namespace",
                ".ref",
            ),
            cel(
                f"self.src != 'HuggingFace' || self.ref.name.matches('{HF_REPO_PATTERN}')",
                "spec.model.ref.name: a HuggingFace reference names a repository as org/repo, "
                "e.g. Qwen/Qwen2.5-32B-Instruct-AWQ",
                ".ref.name",
            ),
            cel(
                "self.src != 'ai-models' || has(self.ref.kind)",
                "spec.model.ref.kind is required when src is ai-models: set Model or ClusterModel",
                ".ref",
            ),
            cel(
                "!has(self.ref.namespace) || (has(self.ref.kind) && self.ref.kind == 'Model')",
                "spec.model.ref.namespace is allowed only with kind: Model; "
                "a ClusterModel or HuggingFace reference has no namespace",
                ".ref.namespace",
            ),
            cel(
                "!has(self.authSecretRef) || self.src == 'HuggingFace'",
                "spec.model.authSecretRef is allowed only with src: HuggingFace; "
                "a catalog model carries its own access",
                ".authSecretRef",
            ),
            cel(
                f"!has(self.parameterCount) || self.parameterCount.matches('{PARAMETER_COUNT_PATTERN}')",
                "spec.model.parameterCount must be a number with a magnitude, e.g. 360M, 7B, 1.5B",
                ".parameterCount",
            ),
        )
    )

    src: ModelSource = Field(description="Where the model comes from: HuggingFace or ai-models (the catalog).")
    ref: ModelRef = Field(description="The model; its shape follows src.")
    authSecretRef: SecretKeyRef | None = Field(
        default=None,
        description="HuggingFace only: a Secret in the order's namespace holding a token for a gated model. "
        "Mounted into the model fetcher as HF_TOKEN; the module never reads its value.",
    )
    parameterCount: str | None = Field(
        default=None,
        description="Size of the model (e.g. 32B, 360M), used on the direct path when the "
        "repository name carries no size token.",
        max_length=16,
    )


class InferenceServiceSpec(_Model):
    inferenceServiceClassName: str = Field(
        description="Name of the InferenceServiceClass the order is placed under. Ask your administrator.",
        min_length=1,
        max_length=253,
    )
    model: ModelSpec = Field(description="The model to serve.")


class EndpointStatus(_Model):
    url: str | None = Field(default=None, description="Where the OpenAI-compatible API answers.")
    type: ExposureType | None = Field(default=None, description="Mirrors the class's exposurePolicy.type.")


class ModelStatus(_Model):
    endpointType: EndpointType | None = Field(
        default=None,
        description="The API contract the platform picked: the first of the class's allowedEndpointTypes "
        "that the model can serve.",
    )


class ConstraintsStatus(_Model):
    minReplicas: int | None = Field(default=None, description="Lowest replica count the class imposes.")
    maxReplicas: int | None = Field(default=None, description="Highest replica count the class imposes.")
    priorityClassName: str | None = Field(default=None, description="Priority class the workload runs with.")
    modelScope: ModelScope | None = Field(
        default=None, description="Cluster (ClusterModel) or Namespace (Model); empty on the direct path."
    )


class ServingFeaturesStatus(_Model):
    modelFamily: str | None = Field(
        default=None, description="The model family the recipes know the model as; empty: none they know."
    )
    toolCalling: bool = Field(
        default=False,
        description="Chat requests with tools and tool_choice auto are answered with tool_calls; false: vLLM "
        "answers such a request 400 (a named or 'required' tool_choice too).",
    )
    reasoning: bool = Field(
        default=False, description="The model's reasoning comes back apart from its answer (message.reasoning)."
    )


class ResolvedStatus(_Model):
    deviceClass: str | None = Field(default=None, description="DRA DeviceClass the plan chose.")
    acceleratorProductName: str | None = Field(default=None, description="Product name of the device.")
    acceleratorMemoryGiB: int | None = Field(default=None, description="Memory of the device, GiB.")
    placementMode: PlacementType | None = Field(default=None, description="WholeDevice or Partition.")
    sharingMode: SharingMode | None = Field(default=None, description="Shared or Dedicated.")
    sharePercent: int | None = Field(default=None, description="Share of the device that is the order's.")
    replanCount: int = Field(default=0, description="How many times the plan was recomputed.")
    features: ServingFeaturesStatus | None = Field(
        default=None, description="What the endpoint serves besides plain chat (the recipe's model family)."
    )
    modelCommit: str | None = Field(
        default=None,
        description="The commit of the model's repository every replica fetches, pinned when the plan was made; "
        "a new one is taken on an edit of the order or a manual replan. Absent: not pinned "
        "(modelNotPinned says why); each replica resolves the reference when it downloads.",
    )
    modelNotPinned: str | None = Field(
        default=None, description="Why the model's commit is not pinned (the hub's answer to the worker)."
    )


class InferenceServiceStatus(_Model):
    phase: Phase | None = Field(default=None, description="Pending, Ready, Degraded or Failed.")
    reason: str | None = Field(
        default=None, description="The reason behind the phase: the first condition that is not True."
    )
    observedGeneration: int | None = Field(default=None, description="Generation the status describes.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="ClassResolved, ModelResolved, Planned, WorkloadReady, Ready, ScalingHealthy, RuntimeCurrent.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    endpoint: EndpointStatus | None = Field(default=None, description="The published endpoint.")
    authSecretName: str | None = Field(
        default=None, description="Secret holding the bearer token, when the class requires one."
    )
    model: ModelStatus | None = Field(default=None, description="What the platform decided about the model.")
    constraints: ConstraintsStatus | None = Field(default=None, description="Bounds the class imposes.")
    resolved: ResolvedStatus | None = Field(default=None, description="What the plan assigned.")


class InferenceService(_Model):
    """An order: a class and a model, nothing else."""

    apiVersion: Literal["ai.deckhouse.io/v1alpha1"] = "ai.deckhouse.io/v1alpha1"
    kind: Literal["InferenceService"] = "InferenceService"
    metadata: ObjectMeta
    spec: InferenceServiceSpec
    status: InferenceServiceStatus = Field(default_factory=InferenceServiceStatus)


# ------------------------------------------------------------- InferenceServiceClass


class AdmissionPolicy(_Model):
    allowedNamespaces: list[str] = Field(
        default_factory=lambda: ["*"],
        description='Namespaces whose orders may use the class; "*" admits every namespace.',
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )


class ModelPolicy(_Model):
    model_config = ConfigDict(
        json_schema_extra=_validations(
            cel(
                f"!has(self.maxParameterCount) || self.maxParameterCount.matches('{PARAMETER_COUNT_PATTERN}')",
                "spec.modelPolicy.maxParameterCount must be a number with a magnitude, e.g. 1B, 70B, 360M",
                ".maxParameterCount",
            ),
        )
    )

    allowedEndpointTypes: list[EndpointType] = Field(
        description="API contracts an order may be served with, in order of preference: the first one "
        "the model can serve wins. Required, non-empty, each of Chat, Embeddings, Rerank at most once.",
        min_length=1,
        max_length=3,
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    maxParameterCount: str | None = Field(
        default=None, description="Largest model the class admits, e.g. 70B.", max_length=16
    )
    allowedFormats: list[str] | None = Field(
        default=None,
        description="Model formats the class admits (e.g. safetensors, gguf); empty admits any format.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )

    disabledFeatures: list[ServingFeature] | None = Field(
        default=None,
        description="Serving features the class turns off for every order, whatever the model's family: "
        "ToolCalling (no automatic tool choice), Reasoning (reasoning stays inside the answer).",
        max_length=2,
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )

    @field_validator("allowedEndpointTypes")
    @classmethod
    def _unique(cls, value: list[EndpointType]) -> list[EndpointType]:
        # The CRD says the same through x-kubernetes-list-type: set.
        if len(set(value)) != len(value):
            raise ValueError("each of Chat, Embeddings, Rerank may appear at most once")
        return value


class AcceleratorPolicy(_Model):
    model_config = ConfigDict(
        json_schema_extra=_validations(
            cel(
                "!has(self.minSharePercent) || !has(self.maxSharePercent) "
                "|| self.minSharePercent <= self.maxSharePercent",
                "spec.acceleratorPolicy: minSharePercent must not exceed maxSharePercent "
                "(1 <= minSharePercent <= maxSharePercent <= 100)",
                ".minSharePercent",
            ),
        )
    )

    allowedDeviceClasses: list[str] | None = Field(
        default=None,
        description="DRA DeviceClass names the plan may choose from; empty allows every device class.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    allowedSharingModes: list[SharingMode] | None = Field(
        default=None,
        description="Shared and/or Dedicated; empty means Dedicated only.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    allowedPlacementTypes: list[PlacementType] | None = Field(
        default=None,
        description="WholeDevice and/or Partition; empty means WholeDevice only.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    maxAcceleratorCount: int | None = Field(
        default=None, description="Most devices one replica may get; at least 1.", ge=1
    )
    minSharePercent: int | None = Field(
        default=None, description="Smallest share of a device the plan may assign, 1..100.", ge=1, le=100
    )
    maxSharePercent: int | None = Field(
        default=None, description="Largest share of a device the plan may assign, 1..100.", ge=1, le=100
    )


class CertManagerCertificate(_Model):
    clusterIssuerName: str = Field(description="cert-manager ClusterIssuer that signs the endpoint's certificate.")


class CustomCertificate(_Model):
    secretName: str = Field(description="TLS Secret (in the module's namespace) holding the certificate.")


class HttpsPolicy(_Model):
    model_config = ConfigDict(
        json_schema_extra=_validations(
            cel(
                "self.mode != 'CertManager' || (has(self.certManager) && !has(self.customCertificate))",
                "spec.exposurePolicy.https: mode CertManager needs https.certManager and no https.customCertificate",
                ".certManager",
            ),
            cel(
                "self.mode != 'CustomCertificate' || (has(self.customCertificate) && !has(self.certManager))",
                "spec.exposurePolicy.https: mode CustomCertificate needs https.customCertificate "
                "and no https.certManager",
                ".customCertificate",
            ),
        )
    )

    mode: HttpsMode = Field(description="How the certificate is obtained: CertManager or CustomCertificate.")
    certManager: CertManagerCertificate | None = Field(default=None, description="With mode CertManager.")
    customCertificate: CustomCertificate | None = Field(default=None, description="With mode CustomCertificate.")


class ExposurePolicy(_Model):
    model_config = ConfigDict(
        json_schema_extra=_validations(
            cel(
                "self.type != 'ClusterLocal' || !has(self.https)",
                "spec.exposurePolicy.https is not allowed with type ClusterLocal: "
                "an in-cluster endpoint has no ingress certificate",
                ".https",
            ),
        )
    )

    type: ExposureType = Field(
        default=ExposureType.EXTERNAL, description="External (an Ingress) or ClusterLocal (the Service only)."
    )
    authentication: Authentication = Field(
        default=Authentication.TOKEN, description="Token (a bearer token in {order}-auth) or None."
    )
    https: HttpsPolicy | None = Field(default=None, description="Certificate of an External endpoint.")


class ScalingPolicy(_Model):
    model_config = ConfigDict(
        json_schema_extra=_validations(
            cel(
                "self.minReplicas <= self.maxReplicas",
                "spec.scalingPolicy: minReplicas must not exceed maxReplicas",
                ".minReplicas",
            ),
        )
    )

    minReplicas: int = Field(default=1, description="Fewest replicas of an order.", ge=1)
    maxReplicas: int = Field(default=1, description="Most replicas of an order; above 1 an HPA is created.", ge=1)
    allowedPriorityClassNames: list[str] | None = Field(
        default=None,
        description="PriorityClasses orders of this class run with; the first one is used. "
        "Capacity moves from lower to higher priority.",
        json_schema_extra={"x-kubernetes-list-type": "atomic"},
    )


class UpdatePolicy(_Model):
    strategy: UpdateStrategy = Field(
        default=UpdateStrategy.ROLLING_UPDATE, description="StatefulSet update strategy: RollingUpdate or OnDelete."
    )
    moves: MovePolicy | None = Field(
        default=None,
        description="Whether the module's repack may move a serving order onto a place that takes less of a "
        "device, or its share onto another device in use so that the one it leaves comes free: "
        "MakeBeforeBreak (new replicas start beside the old ones, which go once the new ones are "
        "Ready; under RollingUpdate only) or Never. Absent: MakeBeforeBreak. The module's "
        "observer.repack.enabled setting switches repacks on.",
    )

    def moves_allowed(self) -> bool:
        """Moves made before they break are allowed (``moves`` MakeBeforeBreak or absent, RollingUpdate)."""
        return self.moves != MovePolicy.NEVER and self.strategy == UpdateStrategy.ROLLING_UPDATE


class InferenceServiceClassSpec(_Model):
    admissionPolicy: AdmissionPolicy | None = Field(
        default=None, description="Which namespaces may order under the class; absent admits every namespace."
    )
    modelPolicy: ModelPolicy = Field(description="Which models and API contracts the class admits.")
    acceleratorPolicy: AcceleratorPolicy | None = Field(
        default=None,
        description="Bounds of the placement; absent gives every replica one whole, dedicated device.",
    )
    exposurePolicy: ExposurePolicy = Field(
        default_factory=ExposurePolicy, description="How the endpoint is published and protected."
    )
    scalingPolicy: ScalingPolicy | None = Field(
        default=None, description="Replica bounds and priority; absent gives one replica and no autoscaler."
    )
    updatePolicy: UpdatePolicy = Field(default_factory=UpdatePolicy, description="How workloads are updated.")
    modelStorageClassName: str | None = Field(
        default=None, description="StorageClass of new model volumes; standing volumes keep theirs."
    )


class InferenceServiceClassStatus(_Model):
    phase: str | None = Field(default=None, description="Ready when the class validated.")
    observedGeneration: int | None = Field(default=None, description="Generation the status describes.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Validated and Ready.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


class InferenceServiceClass(_Model):
    """An administrator's policy for orders."""

    apiVersion: Literal["ai.deckhouse.io/v1alpha1"] = "ai.deckhouse.io/v1alpha1"
    kind: Literal["InferenceServiceClass"] = "InferenceServiceClass"
    metadata: ObjectMeta
    spec: InferenceServiceClassSpec
    status: InferenceServiceClassStatus = Field(default_factory=InferenceServiceClassStatus)
