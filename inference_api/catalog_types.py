"""Model and ClusterModel as this module reads them from the ai-models catalog.

The CRDs generated from these types are a dev/test stand-in for the ai-models module's own
kinds: only the facts the lookup returns are modelled.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from inference_api import crd_spec
from inference_api.types import EndpointType, ModelScope

CATALOG_GROUP = "ai-models.deckhouse.io"
CATALOG_VERSION = "v1alpha1"


def catalog_plural(kind: str) -> str:
    """The resource name of a catalog kind: Model → models, ClusterModel → clustermodels."""
    return kind.lower() + "s"


class ModelPhase(StrEnum):
    PENDING = "Pending"
    READY = "Ready"
    FAILED = "Failed"


class CatalogModelSpec(BaseModel):
    """Where the catalog fetched the model from."""

    model_config = ConfigDict(extra="ignore")
    source: str | None = Field(default=None, description="Origin of the artefact, e.g. hf://Qwen/Qwen2.5-7B.")
    displayName: str | None = Field(default=None, description="Name served by the runtime; defaults to the origin.")


class ModelFacts(BaseModel):
    """Facts the catalog knows about a model: what the planner and the class's model policy judge."""

    model_config = ConfigDict(extra="ignore")
    parameterCount: str | None = Field(default=None, description="Size, e.g. 7B.")
    quantization: str | None = Field(default=None, description="Quantization, e.g. awq, gptq, fp8; empty = none.")
    format: str | None = Field(default=None, description="Artefact format, e.g. safetensors, gguf.")
    endpointTypes: list[EndpointType] = Field(
        default_factory=list, description="API contracts the model can serve: Chat, Embeddings, Rerank."
    )
    servedName: str | None = Field(default=None, description="Name the runtime serves the model as.")


class CatalogModelStatus(BaseModel):
    """Readiness and facts, as the catalog publishes them."""

    model_config = ConfigDict(extra="ignore")
    phase: ModelPhase = Field(default=ModelPhase.PENDING, description="Pending, Ready or Failed.")
    facts: ModelFacts | None = Field(default=None, description="What the catalog knows of the model.")


class CatalogLookupResult(BaseModel):
    """One model's facts, whichever transport produced them (REST or the objects)."""

    model_config = ConfigDict(extra="ignore")
    kind: str
    name: str
    namespace: str | None = None
    ready: bool
    scope: ModelScope
    facts: ModelFacts = Field(default_factory=ModelFacts)


def _crd(kind: str, scope: str) -> crd_spec.CRDSpec:
    return crd_spec.CRDSpec(
        kind=kind,
        plural=catalog_plural(kind),
        singular=kind.lower(),
        scope=scope,
        short_names=[],
        description=f"{kind} of the ai-models catalog (dev/test stand-in: only the facts ai-inference reads).",
        spec_model=CatalogModelSpec,
        status_model=CatalogModelStatus,
        columns=[
            crd_spec.column("Phase", ".status.phase", "Readiness of the model."),
            crd_spec.column("Size", ".status.facts.parameterCount", "Parameter count."),
            crd_spec.column("Contracts", ".status.facts.endpointTypes", "API contracts the model serves."),
            crd_spec.AGE,
        ],
        group=CATALOG_GROUP,
        version=CATALOG_VERSION,
        categories=["ai-models"],
        spec_required=False,
        labels={"ai-inference.deckhouse.io/stand-in": "ai-models"},
    )


STAND_IN_CRDS = [_crd("Model", "Namespaced"), _crd("ClusterModel", "Cluster")]
