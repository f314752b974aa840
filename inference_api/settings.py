"""Module settings: the public ``catalog.mode`` and the internal values of phases 2.3 and 2.4.

Loaded with pydantic-settings (typed, validated, one precedence order) from, highest first:
constructor arguments, environment variables ``AI_INFERENCE_<FIELD>`` with ``__`` between
nested keys (``AI_INFERENCE_PLANNER__BASEURL``), then a values file named by
``AI_INFERENCE_VALUES_FILE`` (the chart mounts one), then the embedded defaults.
"""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)


class CatalogMode(StrEnum):
    ENABLED = "Enabled"
    NONE = "None"


class CatalogTransport(StrEnum):
    REST = "Rest"
    KUBERNETES = "Kubernetes"


class CatalogSettings(BaseModel):
    mode: CatalogMode = Field(default=CatalogMode.ENABLED, description="Enabled or None (no catalog clients).")


class CatalogLookup(BaseModel):
    baseURL: str = "https://ai-models-controller.d8-ai-models.svc.cluster.local:8080"
    path: str = "/api/internal/v1/models/lookup"
    timeoutSeconds: float = Field(default=10, gt=0)
    notReadyRequeueSeconds: float = Field(default=30, gt=0)


class AIModelsSettings(BaseModel):
    catalogTransport: CatalogTransport = CatalogTransport.REST
    catalogLookup: CatalogLookup = Field(default_factory=CatalogLookup)


class RuntimeFallback(BaseModel):
    enabled: bool = True


class PlannerSettings(BaseModel):
    # Empty: plan in-process with the same library the planner service wraps.
    baseURL: str | None = None
    timeoutSeconds: float = Field(default=10, gt=0)
    runtimeFallback: RuntimeFallback = Field(default_factory=RuntimeFallback)


class TemporalSettings(BaseModel):
    address: str = "localhost:7233"
    namespace: str = "default"
    taskQueue: str = "ai-inference"
    tlsEnabled: bool = False


class ExposureSettings(BaseModel):
    # {name} and {namespace} of the order; the result is the host of an External endpoint.
    domainTemplate: str = "{name}.{namespace}.ai.example.com"
    ingressClassName: str | None = None
    # Namespaces let in by each order's NetworkPolicy (besides the order's own and the module's):
    # where the ingress controller runs (External classes only), and where Prometheus scrapes
    # /metrics from (the HPA's queue metric).
    ingressControllerNamespace: str = Field(default="d8-ingress-nginx", min_length=1)
    monitoringNamespace: str = Field(default="d8-monitoring", min_length=1)


class HealthSettings(BaseModel):
    intervalSeconds: float = Field(default=600, gt=0)
    failureThreshold: int = Field(default=3, ge=1)
    probeTimeoutSeconds: float = Field(default=5, gt=0)
    # How long the first probe waits for a replica to load the model, and how often it looks.
    serveWaitSeconds: float = Field(default=1800, gt=0)
    serveRetrySeconds: float = Field(default=5, gt=0)
    # How often an autoscaled order's scaling watch reads its HPA and replicas (preemption).
    scalingIntervalSeconds: float = Field(default=15, gt=0)
    # When set, the probe reads its target URL from this annotation of the order's Service
    # (the local cluster's stand-in runtimes); otherwise it probes the in-cluster Service.
    probeTargetAnnotation: str | None = None


class ObserverSettings(BaseModel):
    """The observer (``ai-inference watch``): resync period, probe concurrency and its shard.

    Not part of what shapes an order: left out of ``model_dump`` (so out of the release
    fingerprint), or every shard, whose ``shard`` differs, would compute another fingerprint.
    """

    # How often the listing of orders is compared with Temporal's running order workflows.
    resyncSeconds: float = Field(default=300, gt=0)
    # Health probes in flight at once.
    probeConcurrency: int = Field(default=64, ge=1)
    # Changes of one order seen within this window are coalesced into one signal.
    debounceSeconds: float = Field(default=1.0, ge=0)
    # Orders are split by uid: this observer handles int(sha256(uid)) % shards == shard.
    shards: int = Field(default=1, ge=1)
    shard: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _shard_in_range(self) -> ObserverSettings:
        if self.shard >= self.shards:
            raise ValueError(f"observer.shard {self.shard} is not below observer.shards {self.shards}")
        return self


class ModuleSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="AI_INFERENCE_", env_nested_delimiter="__", case_sensitive=False, extra="ignore"
    )

    catalog: CatalogSettings = Field(default_factory=CatalogSettings)
    aiModels: AIModelsSettings = Field(default_factory=AIModelsSettings)
    planner: PlannerSettings = Field(default_factory=PlannerSettings)
    temporal: TemporalSettings = Field(default_factory=TemporalSettings)
    exposure: ExposureSettings = Field(default_factory=ExposureSettings)
    health: HealthSettings = Field(default_factory=HealthSettings)
    # exclude: per-process (a shard number), never part of the release fingerprint.
    observer: ObserverSettings = Field(default_factory=ObserverSettings, exclude=True)
    moduleNamespace: str = "d8-ai-inference"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        values_file = os.environ.get("AI_INFERENCE_VALUES_FILE")
        if values_file and Path(values_file).is_file():
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=values_file))
        return tuple(sources)


def load_settings(**overrides: Any) -> ModuleSettings:
    return ModuleSettings(**overrides)
