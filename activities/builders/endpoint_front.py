"""The endpoint front of a replica: vLLM on the pod's loopback, a token-checking front on the pod's port.

vLLM's API key guards only ``/v1``, ``/v2``, ``/inference`` and ``/cohere``; it serves
``POST /invocations`` (a full chat completion), ``/tokenize``, ``/pooling``, ``/score`` and more
to anyone who reaches its port, and a ClusterLocal order's Service (and every pod IP) reaches
the whole port. The Ingress's path list protects an External endpoint from the internet, but
not from the cluster. So, as an operator fronts an engine whose own auth is partial:

* the ``runtime`` container runs ``vllm serve ... --host 127.0.0.1 --port 8001``: nothing outside
  the pod can connect to it, and it declares no port;
* the ``endpoint-front`` container (``endpoint_front_app``) listens on the pod's port ``http``
  (8000, what the Service, the NetworkPolicy and the Ingress name) and forwards to the engine
  only what the endpoint publishes: ``/v1/...`` with the token (the same Secret key, read by
  ``secretKeyRef``; 401 on every other path without it, 404 with it), and ``GET /health`` and
  ``GET /metrics`` (probes and Prometheus) without it;
* the runtime's own probes are exec probes against its loopback (an ``httpGet`` probe comes
  from the node, which the loopback does not reach); the front's readiness is the engine's
  ``/health`` through it, its liveness its own socket.

The front runs in the runtime's image (``python3 -c <source>``: vLLM ships starlette, uvicorn and
httpx), so there is no second image to ship, pull or keep patched.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from activities.builders.auth import TOKEN_KEY, requires_token
from activities.builders.common import HTTP_PORT_NAME, PRE_STOP, RUNTIME_PORT, WorkloadInputs
from activities.builders.exposure import EXPOSED_PATH_PREFIX
from planner.nodes import ENDPOINT_FRONT_DEMAND

FRONT_CONTAINER = "endpoint-front"
ENGINE_HOST = "127.0.0.1"
ENGINE_PORT = 8001
API_KEY_ENV = "VLLM_API_KEY"
# What the endpoint publishes: the Ingress's prefix, the same constant.
PUBLISHED_PREFIXES = (EXPOSED_PATH_PREFIX,)
# What anyone allowed by the NetworkPolicy may GET: probes and Prometheus.
OPEN_PATHS = ("/health", "/metrics")
FRONT_SOURCE = Path(__file__).with_name("endpoint_front_app.py").read_text()
# One asyncio process uses one core at most: a limit of one costs it nothing. It writes nothing but
# its log (a read-only root filesystem).
FRONT_RESOURCES: dict[str, Any] = {
    "requests": {
        "cpu": f"{ENDPOINT_FRONT_DEMAND.cpuMilli}m",
        "memory": f"{ENDPOINT_FRONT_DEMAND.memoryMiB}Mi",
        "ephemeral-storage": "16Mi",
    },
    "limits": {"cpu": "1", "memory": "512Mi", "ephemeral-storage": "128Mi"},
}

_PROBE_SCRIPT = (
    "import os, urllib.request\n"
    "request = urllib.request.Request('http://{host}:{port}{path}')\n"
    "{auth}"
    "urllib.request.urlopen(request, timeout=4).read()\n"
)


def engine_url() -> str:
    return f"http://{ENGINE_HOST}:{ENGINE_PORT}"


def engine_address_args() -> list[str]:
    """Where ``vllm serve`` listens: the pod's loopback, never the pod's IP."""
    return ["--host", ENGINE_HOST, "--port", str(ENGINE_PORT)]


def front_command(listen: str = f"0.0.0.0:{RUNTIME_PORT}", upstream: str | None = None) -> list[str]:
    command = ["python3", "-c", FRONT_SOURCE, "--listen", listen, "--upstream", upstream or engine_url()]
    for prefix in PUBLISHED_PREFIXES:
        command += ["--publish", prefix]
    for path in OPEN_PATHS:
        command += ["--open", path]
    return command


def engine_probe_script(path: str, with_token: bool) -> str:
    """A probe of the engine on the pod's loopback; the token from the container's own environment."""
    auth = f"request.add_header('Authorization', 'Bearer ' + os.environ['{API_KEY_ENV}'])\n" if with_token else ""
    return _PROBE_SCRIPT.format(host=ENGINE_HOST, port=ENGINE_PORT, path=path, auth=auth)


def _exec_probe(path: str, with_token: bool = False) -> dict[str, Any]:
    return {"exec": {"command": ["python3", "-c", engine_probe_script(path, with_token)]}}


def engine_probes(
    inputs: WorkloadInputs, startup_failure_threshold: int, startup_period_seconds: int
) -> dict[str, Any]:
    """The runtime container's probes: ``/health`` to start and live, the API (with the token) to be ready."""
    return {
        "startupProbe": _exec_probe("/health")
        | {"periodSeconds": startup_period_seconds, "timeoutSeconds": 5, "failureThreshold": startup_failure_threshold},
        "readinessProbe": _exec_probe("/v1/models", requires_token(inputs.service_class))
        | {"periodSeconds": 10, "timeoutSeconds": 5, "successThreshold": 1, "failureThreshold": 3},
        "livenessProbe": _exec_probe("/health") | {"periodSeconds": 30, "timeoutSeconds": 10, "failureThreshold": 5},
    }


def front_container(inputs: WorkloadInputs, image: str, security_context: dict[str, Any]) -> dict[str, Any]:
    """The ``endpoint-front`` container: the pod's one listener."""
    env: list[dict[str, Any]] = [
        {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
    ]
    if requires_token(inputs.service_class):
        env.append(
            {"name": API_KEY_ENV, "valueFrom": {"secretKeyRef": {"name": inputs.names.auth_secret, "key": TOKEN_KEY}}}
        )
    return {
        "name": FRONT_CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": front_command(),
        "ports": [{"name": HTTP_PORT_NAME, "containerPort": RUNTIME_PORT, "protocol": "TCP"}],
        "env": env,
        "resources": copy.deepcopy(FRONT_RESOURCES),
        "securityContext": copy.deepcopy(security_context) | {"readOnlyRootFilesystem": True},
        # The front outlives the Service's endpoints as long as the engine does (a request in flight ends).
        "lifecycle": copy.deepcopy(PRE_STOP),
        # Ready when the engine behind it answers /health (the runtime's readiness gates the API).
        "readinessProbe": {
            "httpGet": {"path": "/health", "port": HTTP_PORT_NAME},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
        # Alive while it accepts connections: a loading engine never restarts the front.
        "livenessProbe": {"tcpSocket": {"port": HTTP_PORT_NAME}, "periodSeconds": 30, "timeoutSeconds": 5},
    }
