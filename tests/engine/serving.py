"""What the real-engine tests share: an order of the tiny model made Ready on the real engine, HTTP helpers.

``serve_order(stand, name)`` creates the order and polls, every half second, its first pod's ``Ready``,
the engine (its own ``/health`` on the pod's loopback), the order's endpoint (``/v1/models`` through
the endpoint front, with the token) and the order's phase, in that order, so that a pod Ready before
its engine answered and an order Ready before its endpoint answered are seen. The timeline it returns
is in seconds from the order's creation.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import pytest

from activities.builders.auth import TOKEN_KEY
from devstack import tiny_model
from devstack.standins.engine import EngineReplica
from devstack.vllm_cpu_env import VERSION as ENGINE_VERSION
from devstack.vllm_env import shipped_vllm_version
from tests.e2e.stand import DEFAULT_CLASS, Stand

RELEASES = f"engine vllm-cpu {ENGINE_VERSION}; recipes target vLLM {shipped_vllm_version()}"
TINY_MODEL = {
    "src": "HuggingFace",
    "ref": {"name": tiny_model.REPOSITORY},
    "parameterCount": tiny_model.PARAMETER_COUNT,
}
# The first probe waits for a model that loads in minutes on two busy cores.
ENGINE_STAND_OVERRIDES: dict[str, Any] = {"health": {"serveWaitSeconds": 900, "serveRetrySeconds": 1}}


def request(
    url: str, path: str, token: str | None = None, body: dict[str, Any] | None = None, timeout: float = 30
) -> tuple[int, bytes]:
    """``GET`` (``POST`` with a JSON ``body``) ``url + path``: (status, body); (0, b"") when nothing answers."""
    data = json.dumps(body).encode() if body is not None else None
    sent = urllib.request.Request(url + path, data=data, method="POST" if data is not None else "GET")
    if token:
        sent.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        sent.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(sent, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
    except OSError:
        return 0, b""


def chat_body(model: str, stream: bool = False, max_tokens: int = 8) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": "Say this is a test"}],
        "max_tokens": max_tokens,
        "stream": stream,
    }


@dataclass
class Served:
    stand: Stand
    url: str  # the order's endpoint: the pod's endpoint front
    token: str
    model: str
    replica: EngineReplica
    name: str = "tiny"
    # Seconds from the order's creation: (what, when)
    timeline: dict[str, float] = field(default_factory=dict)
    ready_before_engine_answered: bool = False
    # The first replica's pod seen Ready while its engine's /health did not answer yet (a kubelet marks
    # it Ready on its probes only; kwok's default Stage did at once).
    pod_ready_before_engine: bool = False


def pod_ready(stand: Stand, pod: str) -> bool:
    """Whether the pod's ``Ready`` condition is True now (False while it does not exist)."""
    found = stand.core.list_namespaced_pod(stand.namespace, field_selector=f"metadata.name={pod}").items
    conditions = found[0].status.conditions or [] if found else []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def token_of(stand: Stand, name: str) -> str:
    secret = stand.core.read_namespaced_secret(f"{name}-auth", stand.namespace)
    return base64.b64decode(secret.data[TOKEN_KEY]).decode()


async def serve_order(stand: Stand, name: str, timeout: float = 900, class_name: str = DEFAULT_CLASS) -> Served:
    """The order ``name`` of the tiny model, Ready on the real engine; the timeline of how it got there."""
    started = time.monotonic()
    stand.create_order(name, TINY_MODEL, class_name=class_name)
    timeline: dict[str, float] = {}
    ready_early = pod_early = False
    token: str | None = None
    deadline = started + timeout
    while time.monotonic() < deadline:
        # The pod first, the engine after: a pod seen Ready must find its engine answering when asked next.
        pod_is_ready = await asyncio.to_thread(pod_ready, stand, f"{name}-0")
        if pod_is_ready:
            timeline.setdefault("pod Ready", time.monotonic() - started)
        replica = stand.fleet.engine(stand.namespace, name)
        answered = healthy = False
        if replica is not None:
            timeline.setdefault("engine started", time.monotonic() - started)
            if token is None:
                token = await asyncio.to_thread(token_of, stand, name)
            health, _ = await asyncio.to_thread(request, replica.engine_url, "/health", None, None, 2)
            healthy = health == 200
            if healthy:
                timeline.setdefault("engine /health 200", time.monotonic() - started)
            status, _ = await asyncio.to_thread(request, replica.url, "/v1/models", token, None, 2)
            answered = status == 200
            if answered:
                timeline.setdefault("endpoint /v1/models 200", time.monotonic() - started)
        pod_early = pod_early or (pod_is_ready and not healthy)
        phase, _ = await asyncio.to_thread(stand.phase, name)
        if phase == "Ready":
            # The endpoint was asked first in this round: Ready with no answer yet is a lie.
            ready_early = ready_early or not answered
            timeline["order Ready"] = time.monotonic() - started
            break
        await asyncio.sleep(0.5)
    else:
        pytest.fail(
            f"the order never got Ready on the real engine: {stand.describe(name)}\n  {stand.workload_report()}"
        )
    replica = stand.fleet.engine(stand.namespace, name)
    assert replica is not None
    assert token is not None
    print(f"\ntime to Ready on the real engine ({RELEASES}): {json.dumps(timeline)}")
    return Served(stand, replica.url, token, tiny_model.REPOSITORY, replica, name, timeline, ready_early, pod_early)
