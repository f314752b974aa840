"""The Service ``{order}``: one stable in-cluster address in front of every ready replica.

ClusterIP on port 80, named ``http``, forwarding to the runtime's port 8000 by name. Port 80
keeps the in-cluster URL free of a port (``http://{order}.{namespace}.svc``) and is what the
Ingress backend points at; the target is the container port's name, so a recipe that moved
the runtime's port would not need a Service change. Only ready pods (``GET /v1/models``
answered) receive traffic: that is the readiness probe's job, not the Service's.
"""

from __future__ import annotations

from typing import Any

from activities.builders.common import (
    HTTP_PORT_NAME,
    SERVICE_PORT,
    WorkloadInputs,
    object_meta,
    selector_labels,
)


def build_service(inputs: WorkloadInputs) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(inputs, inputs.names.service, "endpoint"),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(inputs.name),
            "ports": [
                {
                    "name": HTTP_PORT_NAME,
                    "protocol": "TCP",
                    "port": SERVICE_PORT,
                    "targetPort": HTTP_PORT_NAME,
                    "appProtocol": "http",
                }
            ],
        },
    }
