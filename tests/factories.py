"""Object and payload factories of the tests: one place for the orders, classes, plans and settings
the tests build.

* Spec-shaped (``order``, ``service_class``, ``plan``, ``inputs``, ...): the examples of the spec,
  with a fixed UID; the builder tests and their golden files depend on these exact values.
* Workflow-shaped (``make_order``, ``make_class``, ``make_plan``): an order of the bundled
  default-llm class with a fresh UID each (workflow ids stay unique on a shared dev server), a
  class Ready as the watcher would mark it, a shared-device plan.
* Catalog (``make_settings``, ``catalog_object``, sample facts): the catalog lookup's settings and
  Model / ClusterModel objects as the API server returns them.
"""

from __future__ import annotations

import uuid
from typing import Any

from activities.builders import ModelArtifact, WorkloadInputs, artifact_for_order
from inference_api.catalog_types import CATALOG_GROUP, CATALOG_VERSION, ModelFacts
from inference_api.plan import LaunchPlan, Recipe, RecipeSource
from inference_api.settings import ModuleSettings
from inference_api.types import (
    Condition,
    ConditionStatus,
    EndpointType,
    InferenceService,
    InferenceServiceClass,
    ModelKind,
    PlacementType,
    SharingMode,
)

# ---------------------------------------------------------------------------------- spec-shaped

UID = "0b6a7f5e-1111-4c3a-9d2e-5f0c1a2b3c4d"
TOKEN = "tok-Zm9vYmFyLXNlY3JldC12YWx1ZS1kby1ub3QtbGVhaw"


def order(
    name: str = "support-llm",
    namespace: str = "support",
    model: str = "Qwen/Qwen2.5-32B-Instruct-AWQ",
    auth_secret: dict[str, str] | None = None,
    generation: int = 1,
    catalog: dict[str, Any] | None = None,
) -> InferenceService:
    spec_model: dict[str, Any]
    if catalog is not None:
        spec_model = {"src": "ai-models", "ref": catalog}
    else:
        spec_model = {"src": "HuggingFace", "ref": {"name": model}}
        if auth_secret is not None:
            spec_model["authSecretRef"] = auth_secret
    return InferenceService.model_validate(
        {
            "metadata": {"name": name, "namespace": namespace, "uid": UID, "generation": generation},
            "spec": {"inferenceServiceClassName": "llm-chat-external", "model": spec_model},
        }
    )


def service_class(**spec: Any) -> InferenceServiceClass:
    body = {"modelPolicy": {"allowedEndpointTypes": ["Chat"]}, **spec}
    return InferenceServiceClass.model_validate({"metadata": {"name": "a-class"}, "spec": body})


def external_token_certmanager(**extra: Any) -> InferenceServiceClass:
    """The admin guide's llm-chat-external."""
    return service_class(
        exposurePolicy={
            "type": "External",
            "authentication": "Token",
            "https": {"mode": "CertManager", "certManager": {"clusterIssuerName": "letsencrypt"}},
        },
        admissionPolicy={"allowedNamespaces": ["support", "analytics"]},
        scalingPolicy={"minReplicas": 1, "maxReplicas": 4},
        acceleratorPolicy={
            "allowedSharingModes": ["Shared", "Dedicated"],
            "allowedPlacementTypes": ["WholeDevice", "Partition"],
            "maxAcceleratorCount": 1,
        },
        updatePolicy={"strategy": "RollingUpdate"},
        **extra,
    )


def cluster_local_none(**extra: Any) -> InferenceServiceClass:
    """The examples' llm-internal: no scalingPolicy, no acceleratorPolicy."""
    spec: dict[str, Any] = {
        "exposurePolicy": {"type": "ClusterLocal", "authentication": "None"},
        "updatePolicy": {"strategy": "RollingUpdate"},
    }
    return service_class(**(spec | extra))


def strict_class(**extra: Any) -> InferenceServiceClass:
    """The examples' llm-strict: a named priority class and a self-signed issuer."""
    return service_class(
        exposurePolicy={
            "type": "External",
            "authentication": "Token",
            "https": {"mode": "CertManager", "certManager": {"clusterIssuerName": "selfsigned"}},
        },
        scalingPolicy={
            "allowedPriorityClassNames": ["inference-normal", "inference-low"],
            "minReplicas": 1,
            "maxReplicas": 4,
        },
        updatePolicy={"strategy": "RollingUpdate"},
        **extra,
    )


def plan(
    share: int = 100,
    memory_request_mib: int | None = None,
    device_count: int = 1,
    volume_gib: int = 40,
    device_class: str = "nvidia-h100-mps-mig",
    runtime_version: str = "0.33.0",
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
    model_memory_mib: int | None = None,
) -> LaunchPlan:
    return LaunchPlan(
        deviceClass=device_class,
        acceleratorProductName="NVIDIA H100 80GB HBM3",
        acceleratorMemoryGiB=80,
        placementMode=PlacementType.PARTITION if share < 100 else PlacementType.WHOLE_DEVICE,
        sharingMode=SharingMode.SHARED if share < 100 else SharingMode.DEDICATED,
        deviceCount=device_count,
        sharePercent=share,
        memoryRequestMiB=memory_request_mib,
        modelMemoryMiB=model_memory_mib,
        cpu="4",
        memory="32Gi",
        modelVolumeGiB=volume_gib,
        recipe=Recipe(
            source=RecipeSource.COMPILED,
            runtimeVersion=runtime_version,
            image=f"vllm/vllm-openai:v{runtime_version}",
            args=["--max-model-len", "8192", "--gpu-memory-utilization", "0.9"] if args is None else args,
            env=env or {},
            hardwareFamily="hopper",
            vramMinimumGiB=20,
        ),
    )


def inputs(
    the_order: InferenceService | None = None,
    the_class: InferenceServiceClass | None = None,
    the_plan: LaunchPlan | None = None,
    settings: ModuleSettings | None = None,
    endpoint_type: EndpointType = EndpointType.CHAT,
    artifact: ModelArtifact | None = None,
    **kwargs: Any,
) -> WorkloadInputs:
    o = the_order or order()
    return WorkloadInputs(
        order=o,
        service_class=the_class or external_token_certmanager(),
        plan=the_plan or plan(),
        settings=settings or ModuleSettings(),
        endpoint_type=endpoint_type,
        artifact=artifact or artifact_for_order(o),
        **kwargs,
    )


def runtime_container(sts: dict[str, Any]) -> dict[str, Any]:
    containers = sts["spec"]["template"]["spec"]["containers"]
    assert containers[0]["name"] == "runtime"
    return containers[0]


def fetcher_container(sts: dict[str, Any]) -> dict[str, Any]:
    (init,) = sts["spec"]["template"]["spec"]["initContainers"]
    assert init["name"] == "model-fetcher"
    return init


def env_map(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container.get("env", [])}


# ------------------------------------------------------------------------------ workflow-shaped

READY = Condition(
    type="Ready", status=ConditionStatus.TRUE, reason="ClassValid", lastTransitionTime="2026-01-01T00:00:00Z"
)


def make_plan(device_class: str = "nvidia-hopper-s3-shared", share: int = 30) -> LaunchPlan:
    return LaunchPlan(
        deviceClass=device_class,
        acceleratorProductName="NVIDIA H100 80GB HBM3",
        acceleratorMemoryGiB=80,
        placementMode="WholeDevice",
        sharingMode="Shared",
        deviceCount=1,
        sharePercent=share,
        memoryRequestMiB=24576,
        cpu="4",
        memory="32Gi",
        modelVolumeGiB=40,
        recipe=Recipe(
            source=RecipeSource.COMPILED,
            runtimeVersion="v0.33.0",
            image="vllm/vllm-openai:v0.33.0",
            hardwareFamily="hopper",
            vramMinimumGiB=20,
        ),
    )


def make_class(name: str = "default-llm", ready: bool = True, **spec: Any) -> InferenceServiceClass:
    body: dict[str, Any] = {"modelPolicy": {"allowedEndpointTypes": ["Chat", "Embeddings", "Rerank"]}}
    body.update(spec)
    cls = InferenceServiceClass.model_validate({"metadata": {"name": name}, "spec": body})
    if ready:
        cls.status.conditions.append(READY)
    return cls


def make_order(name: str, class_name: str = "default-llm", generation: int = 1) -> InferenceService:
    return InferenceService.model_validate(
        {
            "metadata": {"name": name, "namespace": "support", "uid": str(uuid.uuid4()), "generation": generation},
            "spec": {
                "inferenceServiceClassName": class_name,
                "model": {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-32B-Instruct-AWQ"}},
            },
        }
    )


# -------------------------------------------------------------------------------------- catalog


def make_settings(
    *,
    mode: str = "Enabled",
    transport: str = "Rest",
    base_url: str = "http://127.0.0.1:9",
    timeout: float = 2.0,
    requeue: float = 30.0,
) -> ModuleSettings:
    return ModuleSettings(
        catalog={"mode": mode},
        aiModels={
            "catalogTransport": transport,
            "catalogLookup": {
                "baseURL": base_url,
                "timeoutSeconds": timeout,
                "notReadyRequeueSeconds": requeue,
            },
        },
    )


QWEN_FACTS = ModelFacts(
    parameterCount="32B",
    quantization="awq",
    format="safetensors",
    endpointTypes=[EndpointType.CHAT],
    servedName="Qwen/Qwen2.5-32B-Instruct-AWQ",
)
QWEN_SOURCE = "hf://Qwen/Qwen2.5-32B-Instruct-AWQ"
E5_FACTS = ModelFacts(parameterCount="560M", format="safetensors", endpointTypes=[EndpointType.EMBEDDINGS])


def catalog_object(
    kind: ModelKind,
    name: str,
    namespace: str | None = None,
    *,
    phase: str = "Ready",
    facts: ModelFacts | None = None,
    source: str | None = None,
) -> dict[str, Any]:
    """A Model / ClusterModel as the API server returns it."""
    metadata: dict[str, Any] = {"name": name, "uid": f"uid-{name}"}
    if namespace is not None:
        metadata["namespace"] = namespace
    status: dict[str, Any] = {"phase": phase}
    if facts is not None:
        status["facts"] = facts.model_dump(mode="json", exclude_none=True)
    return {
        "apiVersion": f"{CATALOG_GROUP}/{CATALOG_VERSION}",
        "kind": kind.value,
        "metadata": metadata,
        "spec": {"source": source} if source else {},
        "status": status,
    }
