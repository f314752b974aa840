"""Valid and invalid objects for the CRDs, shared by the CEL-library test and the API-server test.

Each invalid case names the text the refusal must carry: the field and what is allowed.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Case:
    id: str
    kind: str  # InferenceService | InferenceServiceClass
    body: dict[str, Any]
    # None: accepted. Otherwise a substring of the API server's refusal.
    error: str | None = None
    # "cel": refused by an x-kubernetes-validations rule; "schema": by the OpenAPI schema.
    via: str = "cel"


def order(model: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ai.deckhouse.io/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": "support-llm"},
        "spec": {"inferenceServiceClassName": "default-llm", "model": model, **spec},
    }


def klass(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"modelPolicy": {"allowedEndpointTypes": ["Chat"]}}
    body.update(spec)
    return {
        "apiVersion": "ai.deckhouse.io/v1alpha1",
        "kind": "InferenceServiceClass",
        "metadata": {"name": "test-class"},
        "spec": body,
    }


HF = {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-32B-Instruct-AWQ"}}
CATALOG = {"src": "ai-models", "ref": {"kind": "ClusterModel", "name": "qwen2-5-8b-instruct-awq"}}
EXTERNAL_CERT = {
    "type": "External",
    "authentication": "Token",
    "https": {"mode": "CertManager", "certManager": {"clusterIssuerName": "letsencrypt"}},
}


def _with(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(base)
    out.update(changes)
    return out


ORDER_CASES = [
    Case("minimal-hf-order", "InferenceService", order(HF)),
    Case(
        "gated-hf-order",
        "InferenceService",
        order(_with(HF, authSecretRef={"name": "hf-token", "key": "token"})),
    ),
    Case("hf-with-parameter-count", "InferenceService", order(_with(HF, parameterCount="32B"))),
    Case("catalog-cluster-model", "InferenceService", order(CATALOG)),
    Case(
        "catalog-model-with-namespace",
        "InferenceService",
        order({"src": "ai-models", "ref": {"kind": "Model", "name": "m", "namespace": "models"}}),
    ),
    Case(
        "hf-ref-with-kind",
        "InferenceService",
        order({"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-7B", "kind": "Model"}}),
        error="a HuggingFace reference is {name: org/repo} only",
    ),
    Case(
        "hf-ref-with-namespace",
        "InferenceService",
        order({"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-7B", "namespace": "x"}}),
        error="a HuggingFace reference is {name: org/repo} only",
    ),
    Case(
        "hf-name-not-a-repo",
        "InferenceService",
        order({"src": "HuggingFace", "ref": {"name": "just-a-name"}}),
        error="names a repository as org/repo",
    ),
    Case(
        "catalog-without-kind",
        "InferenceService",
        order({"src": "ai-models", "ref": {"name": "qwen"}}),
        error="spec.model.ref.kind is required when src is ai-models",
    ),
    Case(
        "cluster-model-with-namespace",
        "InferenceService",
        order({"src": "ai-models", "ref": {"kind": "ClusterModel", "name": "q", "namespace": "x"}}),
        error="spec.model.ref.namespace is allowed only with kind: Model",
    ),
    Case(
        "catalog-with-auth-secret",
        "InferenceService",
        order(_with(CATALOG, authSecretRef={"name": "hf-token"})),
        error="spec.model.authSecretRef is allowed only with src: HuggingFace",
    ),
    Case(
        "bad-parameter-count",
        "InferenceService",
        order(_with(HF, parameterCount="32 billion")),
        error="spec.model.parameterCount must be a number with a magnitude",
    ),
    Case(
        "auth-secret-key-too-long",
        "InferenceService",
        order(_with(HF, authSecretRef={"name": "hf-token", "key": "k" * 254})),
        error="Too long: may not be more than 253",
        via="schema",
    ),
    Case(
        "auth-secret-key-not-a-data-key",
        "InferenceService",
        order(_with(HF, authSecretRef={"name": "hf-token", "key": "the token"})),
        error="should match",
        via="schema",
    ),
    Case(
        "unknown-kind",
        "InferenceService",
        order({"src": "ai-models", "ref": {"kind": "Dataset", "name": "q"}}),
        error='supported values: "Model", "ClusterModel"',
        via="schema",
    ),
    Case(
        "unknown-source",
        "InferenceService",
        order({"src": "S3", "ref": {"name": "a/b"}}),
        error='supported values: "HuggingFace", "ai-models"',
        via="schema",
    ),
    Case(
        "no-class-name",
        "InferenceService",
        {
            "apiVersion": "ai.deckhouse.io/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": "x"},
            "spec": {"model": HF},
        },
        error="spec.inferenceServiceClassName: Required value",
        via="schema",
    ),
]

CLASS_CASES = [
    Case(
        "bundled-default-llm",
        "InferenceServiceClass",
        klass(
            modelPolicy={"allowedEndpointTypes": ["Chat", "Embeddings", "Rerank"]},
            acceleratorPolicy={
                "allowedSharingModes": ["Shared", "Dedicated"],
                "allowedPlacementTypes": ["WholeDevice", "Partition"],
                "maxAcceleratorCount": 1,
            },
            scalingPolicy={"minReplicas": 1, "maxReplicas": 2},
            exposurePolicy=EXTERNAL_CERT,
        ),
    ),
    Case(
        "cluster-local-no-auth",
        "InferenceServiceClass",
        klass(exposurePolicy={"type": "ClusterLocal", "authentication": "None"}),
    ),
    Case(
        "strict-class",
        "InferenceServiceClass",
        klass(
            modelPolicy={"allowedEndpointTypes": ["Chat"], "maxParameterCount": "1B"},
            acceleratorPolicy={
                "allowedDeviceClasses": ["nvidia-t4-mps-physical"],
                "maxAcceleratorCount": 1,
                "minSharePercent": 25,
                "maxSharePercent": 100,
            },
            scalingPolicy={"allowedPriorityClassNames": ["inference-normal"], "minReplicas": 1, "maxReplicas": 4},
        ),
    ),
    Case(
        "custom-certificate",
        "InferenceServiceClass",
        klass(
            exposurePolicy={
                "type": "External",
                "https": {"mode": "CustomCertificate", "customCertificate": {"secretName": "tls"}},
            }
        ),
    ),
    Case(
        "no-endpoint-types",
        "InferenceServiceClass",
        klass(modelPolicy={}),
        error="spec.modelPolicy.allowedEndpointTypes: Required value",
        via="schema",
    ),
    Case(
        "empty-endpoint-types",
        "InferenceServiceClass",
        klass(modelPolicy={"allowedEndpointTypes": []}),
        error="spec.modelPolicy.allowedEndpointTypes: Invalid value: 0: spec.modelPolicy.allowedEndpointTypes "
        "in body should have at least 1 items",
        via="schema",
    ),
    Case(
        "duplicate-endpoint-types",
        "InferenceServiceClass",
        klass(modelPolicy={"allowedEndpointTypes": ["Chat", "Chat"]}),
        error='spec.modelPolicy.allowedEndpointTypes[1]: Duplicate value: "Chat"',
        via="schema",
    ),
    Case(
        "unknown-endpoint-type",
        "InferenceServiceClass",
        klass(modelPolicy={"allowedEndpointTypes": ["Completion"]}),
        error='supported values: "Chat", "Embeddings", "Rerank"',
        via="schema",
    ),
    Case(
        "cluster-local-with-https",
        "InferenceServiceClass",
        klass(
            exposurePolicy={
                "type": "ClusterLocal",
                "https": {"mode": "CertManager", "certManager": {"clusterIssuerName": "x"}},
            }
        ),
        error="spec.exposurePolicy.https is not allowed with type ClusterLocal",
    ),
    Case(
        "cert-manager-without-branch",
        "InferenceServiceClass",
        klass(
            exposurePolicy={
                "type": "External",
                "https": {"mode": "CertManager", "customCertificate": {"secretName": "x"}},
            }
        ),
        error="mode CertManager needs https.certManager",
    ),
    Case(
        "custom-certificate-without-branch",
        "InferenceServiceClass",
        klass(
            exposurePolicy={
                "type": "External",
                "https": {"mode": "CustomCertificate", "certManager": {"clusterIssuerName": "x"}},
            }
        ),
        error="mode CustomCertificate needs https.customCertificate",
    ),
    Case(
        "min-above-max-replicas",
        "InferenceServiceClass",
        klass(scalingPolicy={"minReplicas": 3, "maxReplicas": 2}),
        error="spec.scalingPolicy: minReplicas must not exceed maxReplicas",
    ),
    Case(
        "min-above-max-share",
        "InferenceServiceClass",
        klass(acceleratorPolicy={"minSharePercent": 60, "maxSharePercent": 50}),
        error="minSharePercent must not exceed maxSharePercent",
    ),
    Case(
        "share-above-100",
        "InferenceServiceClass",
        klass(acceleratorPolicy={"maxSharePercent": 101}),
        error="spec.acceleratorPolicy.maxSharePercent: Invalid value: 101",
        via="schema",
    ),
    Case(
        "share-zero",
        "InferenceServiceClass",
        klass(acceleratorPolicy={"minSharePercent": 0}),
        error="spec.acceleratorPolicy.minSharePercent: Invalid value: 0",
        via="schema",
    ),
    Case(
        "zero-accelerators",
        "InferenceServiceClass",
        klass(acceleratorPolicy={"maxAcceleratorCount": 0}),
        error="spec.acceleratorPolicy.maxAcceleratorCount: Invalid value: 0",
        via="schema",
    ),
    Case(
        "bad-max-parameter-count",
        "InferenceServiceClass",
        klass(modelPolicy={"allowedEndpointTypes": ["Chat"], "maxParameterCount": "lots"}),
        error="spec.modelPolicy.maxParameterCount must be a number with a magnitude",
    ),
]

ALL_CASES = ORDER_CASES + CLASS_CASES

# Fields of an older cut that are not today's API: pruned, or refused under strict validation.
PRUNED_ORDER_FIELDS = {
    "runtime": {"name": "vllm"},
    "launchStrategy": "latency",
    "resources": {"accelerator": {"deviceClasses": ["nvidia-h100-mps-mig"]}},
}
