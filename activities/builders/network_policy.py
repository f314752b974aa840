"""The NetworkPolicy ``{order}``: who may reach the replicas' serving port at all.

vLLM's API key guards only the path prefixes ``/v1``, ``/v2``, ``/inference`` and ``/cohere``;
``/rerank``, ``/score``, ``/tokenize``, ``/pause``, ``/sleep``, ``/collective_rpc``, ``/metrics``
and others answer anyone who reaches the port. The Ingress publishes ``/v1`` only, but the
Service and the pod IPs reach every route, so the pods accept connections to the serving port
only from the namespaces that have a reason to connect:

* the order's own namespace — the clients of a ClusterLocal endpoint;
* the module's namespace (``settings.moduleNamespace``) — the worker's health probe;
* the monitoring namespace (``settings.exposure.monitoringNamespace``) — Prometheus scrapes
  ``/metrics``, which the HPA scales on;
* the ingress controller's namespace (``settings.exposure.ingressControllerNamespace``) — only
  for an External class; a ClusterLocal order has no Ingress, so the controller has no business
  with it.

Namespaces are matched by ``kubernetes.io/metadata.name``, the label the API server sets on
every namespace and nobody can change. Only ingress is restricted: the model fetcher downloads
from the network. The kubelet's probes come from the node, which network plugins let through.
"""

from __future__ import annotations

from typing import Any

from activities.builders.common import HTTP_PORT_NAME, WorkloadInputs, object_meta, selector_labels
from inference_api.types import ExposureType

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def allowed_namespaces(inputs: WorkloadInputs) -> list[str]:
    """The namespaces whose pods may connect to the serving port, sorted, each once."""
    settings = inputs.settings
    names = {inputs.namespace, settings.moduleNamespace, settings.exposure.monitoringNamespace}
    if inputs.service_class.spec.exposurePolicy.type == ExposureType.EXTERNAL:
        names.add(settings.exposure.ingressControllerNamespace)
    return sorted(name for name in names if name)


def build_network_policy(inputs: WorkloadInputs) -> dict[str, Any]:
    peer = {
        "namespaceSelector": {
            "matchExpressions": [
                {"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": allowed_namespaces(inputs)},
            ]
        }
    }
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_meta(inputs, inputs.names.network_policy, "network"),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(inputs.name)},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [peer], "ports": [{"protocol": "TCP", "port": HTTP_PORT_NAME}]}],
        },
    }
