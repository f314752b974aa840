"""The planner's answer made unforgeable: the worker seals each launch plan it gets from the planner,
and the apply writes only a plan whose seal it can check.

A plan travels from the planner (over TLS, to the worker's ``plan_launch``) through the order
workflow's state (a Temporal payload: anyone holding a module certificate can start a run with any
state) to ``apply_workload``. The apply already checks what it can derive (the recipe against the
release's tables, the placement type against the class); the rest of a plan — the node, the devices,
the share, CPU, memory, the volume — only the planner can judge. So ``plan_launch`` seals the plan:
an HMAC-SHA256, with a key only the worker holds, over the order's uid and the plan's canonical JSON.
A plan whose seal does not match (edited, made by hand, or another order's) is refused at apply as
the run's own state (``STATE_REFUSED``): the order plans again.

The key is a Secret of the module's namespace (``ai-inference-plan-seal``, made by the first worker
that needs it, shared by every worker replica); a worker that cannot have it (no module namespace,
as in the tests' in-process stands) seals with a key of its own process, and then a plan outlives
only that process (the order plans again once after a restart, keeping its place).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
from typing import Any

import structlog
from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from activities.builders.common import LABEL_MANAGED_BY, MANAGED_BY
from inference_api.plan import LaunchPlan

log = structlog.get_logger(__name__)

SEAL_SECRET = "ai-inference-plan-seal"
SEAL_KEY = "key"
SEAL_PREFIX = "v1:"


def _canonical(plan: LaunchPlan, uid: str) -> bytes:
    body = plan.model_dump(mode="json", exclude={"seal"})
    for pin in ("modelCommit", "modelNotPinned"):
        if body.get(pin) is None:
            # A plan sealed before pins had no such field: its seal still holds (no replan on upgrade).
            body.pop(pin, None)
    return uid.encode() + b"\n" + json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def seal_of(plan: LaunchPlan, uid: str, key: bytes) -> str:
    """The seal of ``plan`` for the order ``uid``."""
    return SEAL_PREFIX + hmac.new(key, _canonical(plan, uid), hashlib.sha256).hexdigest()


def sealed(plan: LaunchPlan, uid: str, key: bytes) -> LaunchPlan:
    return plan.model_copy(update={"seal": seal_of(plan, uid, key)})


def seal_problem(plan: LaunchPlan, uid: str, key: bytes) -> str | None:
    """Why the apply must not believe ``plan`` for order ``uid`` (None: the worker sealed it for it)."""
    if not plan.seal:
        return "the launch plan carries no seal: it was not answered by the planner to this module's worker"
    if not hmac.compare_digest(plan.seal, seal_of(plan, uid, key)):
        return (
            "the launch plan's seal does not match it: its placement or sizing (node, devices, share, CPU, memory, "
            "volume) is not what the planner answered for this order"
        )
    return None


class SealKey:
    """The worker's sealing key, read (or made) once: the module namespace's Secret, else its own."""

    def __init__(self, core: CoreV1Api, namespace: str) -> None:
        self.core = core
        self.namespace = namespace
        self._key: bytes | None = None
        self._lock = threading.Lock()

    def __call__(self) -> bytes:
        with self._lock:
            if self._key is None:
                self._key = self._load()
            return self._key

    def _load(self) -> bytes:
        try:
            return self._read() or self._create()
        except ApiException as err:
            # No module namespace (a test's in-process worker), or no right to it: a key of this process.
            log.warning("plan seal key of this process only", namespace=self.namespace, status=err.status)
            return secrets.token_bytes(32)

    def _read(self) -> bytes | None:
        try:
            secret: Any = self.core.read_namespaced_secret(SEAL_SECRET, self.namespace, _request_timeout=10)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        raw = (secret.data or {}).get(SEAL_KEY)
        return base64.b64decode(raw) if raw else None

    def _create(self) -> bytes:
        key = secrets.token_bytes(32)
        body = {
            "metadata": {"name": SEAL_SECRET, "labels": {LABEL_MANAGED_BY: MANAGED_BY}},
            "type": "Opaque",
            "data": {SEAL_KEY: base64.b64encode(key).decode()},
        }
        try:
            self.core.create_namespaced_secret(self.namespace, body, _request_timeout=10)
        except ApiException as err:
            if err.status != 409:
                raise
            # Another worker made it first: theirs is the key.
            theirs = self._read()
            if theirs is None:
                raise
            return theirs
        return key
