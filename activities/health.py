"""Health of a serving order: one probe of its OpenAI API, and the watch loop around it.

The probe (``GET /v1/models``, with the order's Bearer token when it has one) is shared by the
observer, which probes serving orders itself, and the worker's first probe. Its pieces are pure
where they can be (the target, the token from a Secret as the API server returns it, the verdict
on an answer) so they are tested without a server. The token is used for the request only: it is
never part of a result, a detail or a log line.

The watch loop polls inside one heartbeating activity (the workflow-side health watch of the
legacy order workflow): it returns only when health changes state or after ``maxDurationSeconds``.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

import httpx

from inference_api.payloads import ProbeResult

MODELS_PATH = "/v1/models"


def probe_target(
    name: str, namespace: str, service: Mapping[str, Any] | None = None, annotation: str | None = None
) -> str:
    """The order's in-cluster Service URL; with ``annotation`` set (the local stack's stand-ins),
    the URL the order's Service names there, when it names one."""
    if annotation and service:
        target = ((service.get("metadata") or {}).get("annotations") or {}).get(annotation)
        if target:
            return str(target).rstrip("/")
    return f"http://{name}.{namespace}.svc"


def token_from_secret(secret: Mapping[str, Any] | None, key: str = "token") -> str | None:
    """The bearer token of an auth Secret as the API server returns it (``data`` is base64)."""
    raw = ((secret or {}).get("data") or {}).get(key)
    if not raw:
        return None
    try:
        return base64.b64decode(raw, validate=True).decode() or None
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None


def models_verdict(status_code: int, body: bytes, served_name: str | None) -> ProbeResult:
    """ok when the API answered 200 with a model list naming ``served_name`` (any model when it is
    not known)."""
    if status_code != 200:
        return ProbeResult(ok=False, detail=f"GET {MODELS_PATH}: HTTP {status_code}")
    try:
        document = json.loads(body)
        served = [m.get("id") for m in document.get("data", []) if isinstance(m, dict)]
    except (ValueError, AttributeError, TypeError):
        return ProbeResult(ok=False, detail=f"GET {MODELS_PATH}: not JSON")
    if served_name is None:
        if not served:
            return ProbeResult(ok=False, detail=f"GET {MODELS_PATH} lists no model")
        return ProbeResult(ok=True, detail=f"GET {MODELS_PATH} lists {served[0]}")
    if served_name not in served:
        return ProbeResult(ok=False, detail=f"GET {MODELS_PATH} does not list {served_name}")
    return ProbeResult(ok=True, detail=f"GET {MODELS_PATH} lists {served_name}")


async def probe_models(
    http: httpx.AsyncClient,
    target: str,
    served_name: str | None,
    token: str | None = None,
    timeout_seconds: float = 5,
) -> ProbeResult:
    """One ``GET {target}/v1/models``; a transport error is a failed probe named by its type only."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = await http.get(f"{target}{MODELS_PATH}", headers=headers, timeout=timeout_seconds)
    except httpx.HTTPError as err:
        return ProbeResult(ok=False, detail=f"GET {MODELS_PATH}: {type(err).__name__}")
    return models_verdict(response.status_code, response.content, served_name)
