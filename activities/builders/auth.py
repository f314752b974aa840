"""The bearer token Secret ``{order}-auth`` of a class with ``authentication: Token``.

The token is created once and never rotated silently: the apply step creates this Secret only
when it is absent (see ``DesiredObject.create_only``), because every client of the endpoint
holds a copy of the token and a silent rotation would lock them all out. Deleting the Secret
is the way to rotate it; the next reconcile makes a new one.

The value appears in exactly one place: this Secret's ``data``. The runtime reads it through a
``secretKeyRef``, the probe reads it from the Secret, and nothing logs it.
"""

from __future__ import annotations

import base64
import secrets
from typing import Any

from activities.builders.common import WorkloadInputs, object_meta
from inference_api.types import Authentication, InferenceServiceClass

TOKEN_KEY = "token"
# 32 random bytes: 256 bits, far beyond guessing; url-safe so it pastes into a header as is.
TOKEN_BYTES = 32


def new_token() -> str:
    """A fresh bearer token from the operating system's CSPRNG."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def requires_token(service_class: InferenceServiceClass) -> bool:
    return service_class.spec.exposurePolicy.authentication == Authentication.TOKEN


def auth_secret_name(inputs: WorkloadInputs) -> str | None:
    """``status.authSecretName``: the Secret's name when the class asks for a token, else None."""
    return inputs.names.auth_secret if requires_token(inputs.service_class) else None


def build_auth_secret(inputs: WorkloadInputs, token: str) -> dict[str, Any] | None:
    """The Secret holding ``token``, or None when the class sets ``authentication: None``."""
    if not requires_token(inputs.service_class):
        return None
    if not token:
        raise ValueError("the auth token must not be empty")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": object_meta(inputs, inputs.names.auth_secret, "auth"),
        "type": "Opaque",
        # `data`, not `stringData`: stringData is write-only, so server-side apply could never
        # see the field it owns and would report a difference on every apply.
        "data": {TOKEN_KEY: base64.b64encode(token.encode()).decode()},
    }
