"""Small helpers for tests against the local cluster: plain-dict objects over the dynamic client."""

from __future__ import annotations

from typing import Any

from kubernetes.client import ApiClient, CustomObjectsApi
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError

import devstack.cluster.kube as kube
from inference_api.types import GROUP, VERSION


def dynamic(api: ApiClient) -> DynamicClient:
    return kube.dynamic_client(api)


def get(dyn: DynamicClient, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    resource = dyn.resources.get(api_version=api_version, kind=kind)
    obj: dict[str, Any] = dyn.get(resource, name=name, namespace=namespace).to_dict()
    return obj


def exists(dyn: DynamicClient, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
    try:
        get(dyn, api_version, kind, name, namespace)
    except NotFoundError:
        return False
    return True


def delete(
    dyn: DynamicClient,
    api_version: str,
    kind: str,
    name: str,
    namespace: str | None = None,
    propagation: str | None = None,
) -> None:
    resource = dyn.resources.get(api_version=api_version, kind=kind)
    body = {"propagationPolicy": propagation} if propagation else None
    dyn.delete(resource, name=name, namespace=namespace, body=body)


def kwok_pod(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    """A pod kwok will "run" (nothing runs: the image is never pulled)."""
    container: dict[str, Any] = {"name": "main", "image": "registry.example/none:0"}
    claims = spec.pop("container_claims", None)
    if claims:
        container["resources"] = {"claims": [{"name": c} for c in claims]}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [container], "terminationGracePeriodSeconds": 0, **spec},
    }


def pod_running(dyn: DynamicClient, name: str, namespace: str) -> dict[str, Any] | None:
    pod = get(dyn, "v1", "Pod", name, namespace)
    return pod if pod.get("status", {}).get("phase") == "Running" else None


def order_body(
    name: str, namespace: str | None = None, model: str = "acme/llm-1B", class_name: str = "default-llm"
) -> dict[str, Any]:
    """An InferenceService of the bundled class: a Hugging Face model and nothing else."""
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceService",
        "metadata": metadata,
        "spec": {"inferenceServiceClassName": class_name, "model": {"src": "HuggingFace", "ref": {"name": model}}},
    }


def create_order(api: ApiClient, namespace: str, name: str, model: str = "acme/llm-1B") -> dict[str, Any]:
    """An InferenceService of the bundled class, stored (no module acts on it in these tests): something
    for an object to belong to, along the controller ownerReference chain the readers check."""
    created: dict[str, Any] = CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, "inferenceservices", order_body(name, model=model)
    )
    return created


def order_statefulset(
    api: ApiClient, namespace: str, name: str, pod: dict[str, Any], replicas: int = 1
) -> dict[str, Any]:
    """A stored order ``name`` and the body of a StatefulSet it controls whose pods are ``pod``'s spec
    with the order's label: the chain the readers follow before they believe a label (order →
    StatefulSet → pod → the claims the pod was given). Apply the body; its pods are ``{name}-{i}``."""
    from activities.builders.common import LABEL_ORDER

    order = create_order(api, namespace, name)
    labels = {LABEL_ORDER: name}
    owner = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceService",
        "name": name,
        "uid": order["metadata"]["uid"],
        "controller": True,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "ownerReferences": [owner]},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod["spec"]},
        },
    }
