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

import asyncio
import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

import httpx

from inference_api.payloads import ProbeResult
from inference_api.reasons import Reason

MODELS_PATH = "/v1/models"
# A model list is a few KiB (vLLM lists its model and its LoRA adapters): an answer larger than this
# is no model list, and reading it would cost the shared observer and worker memory an order decides.
MAX_PROBE_BODY_BYTES = 1 << 20
# What a probe says of an order whose class asks for a token it cannot read: it fails closed.
TOKEN_UNUSABLE_DETAIL = (
    "the order's auth Secret has no usable token (empty, missing or not text): the endpoint refuses every request"
)
# The token is never in it: only that the one in the Secret is refused, and what makes it current.
TOKEN_NOT_HELD_DETAIL = (
    "GET /v1/models: HTTP {status} with the token of the order's auth Secret: the replicas hold another "
    "token (each reads it once, when it starts), so an edited token has not reached them yet; restart "
    "them to take it (kubectl rollout restart statefulset/<order>), or delete the Secret to have a new "
    "token made and the replicas rolled onto it"
)


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


def models_verdict(status_code: int, body: bytes, served_name: str | None, token_sent: bool = False) -> ProbeResult:
    """ok when the API answered 200 with a model list naming ``served_name`` (any model when it is
    not known). ``token_sent``: the request carried the token of the order's Secret, so a 401 or 403
    means the replicas hold another token (``AuthTokenInvalid``: the Secret was edited after they
    started; each reads it once, when it starts)."""
    if status_code in (401, 403) and token_sent:
        return ProbeResult(
            ok=False,
            detail=TOKEN_NOT_HELD_DETAIL.format(status=status_code),
            reason=Reason.AUTH_TOKEN_INVALID.value,
        )
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
    *,
    token_required: bool = False,
    max_body_bytes: int = MAX_PROBE_BODY_BYTES,
) -> ProbeResult:
    """One ``GET {target}/v1/models``, bounded: ``timeout_seconds`` for the whole exchange (connect,
    head and body together: a server that drips a byte a second is cut at the deadline, not kept
    alive read by read), at most ``max_body_bytes`` of body, no compressed answer (a small gzip body
    may inflate to gigabytes). A transport error is a failed probe named by its type only.

    ``token_required``: the class asks for a token, and without one (``token`` None or empty: an
    empty or unreadable Secret) the probe fails closed with ``AuthTokenInvalid``, sending nothing.
    """
    if token_required and not token:
        return ProbeResult(ok=False, detail=TOKEN_UNUSABLE_DETAIL, reason=Reason.AUTH_TOKEN_INVALID.value)
    headers = {"Accept-Encoding": "identity"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        async with asyncio.timeout(timeout_seconds):
            async with http.stream("GET", f"{target}{MODELS_PATH}", headers=headers, timeout=timeout_seconds) as answer:
                encoding = answer.headers.get("content-encoding", "identity").strip().lower()
                if encoding not in ("", "identity"):
                    return ProbeResult(ok=False, detail=f"GET {MODELS_PATH}: a {encoding[:32]}-encoded answer")
                declared = answer.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > max_body_bytes:
                    return _too_large(max_body_bytes)
                body = bytearray()
                async for chunk in answer.aiter_raw():
                    body += chunk
                    if len(body) > max_body_bytes:
                        return _too_large(max_body_bytes)
    except TimeoutError:
        return ProbeResult(ok=False, detail=f"GET {MODELS_PATH}: no whole answer in {timeout_seconds:g} s")
    except httpx.HTTPError as err:
        return ProbeResult(ok=False, detail=f"GET {MODELS_PATH}: {type(err).__name__}")
    return models_verdict(answer.status_code, bytes(body), served_name, token_sent=bool(token))


def _too_large(limit: int) -> ProbeResult:
    return ProbeResult(ok=False, detail=f"GET {MODELS_PATH}: an answer over {limit} bytes")
