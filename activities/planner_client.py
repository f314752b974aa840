"""The plan activity's planner: the planner service over HTTPS, or the planning library in-process.

``make_planner(settings, api)`` gives the function ``OrderActivities`` calls with a ``PlanInput``:

* ``planner.baseURL`` set: ``POST {baseURL}/api/v1/launch-plan`` with the ``LaunchPlanRequest`` as
  JSON and ``Authorization: Bearer <token>``. The URL must be ``https://`` (an ``http://`` one is
  refused when the worker starts, unless ``planner.allowInsecureHttp``: tests only); the server's
  certificate is verified against ``planner.caFile`` (else the system's roots). The token is a
  projected ServiceAccount token bound to ``planner.audience``, read from ``planner.tokenFile``
  (:class:`ProjectedToken`: read again whenever the kubelet rotates it) — never the worker's own
  ServiceAccount token, which the API server would accept from whoever holds it. The service reviews
  it for that audience and authorizes the caller with a SubjectAccessReview of ``create`` on
  ``inferenceserviceclasses/planner``.
* otherwise: ``read_inventory(api)`` and ``planner.plan_launch`` in this process.

A transport failure, a timeout or an HTTP error raise (the activity is retried); a refusal is a
``PlanOutcome`` with ``refusal`` set, like a plan. The token is never logged nor put in an error.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import ssl
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import structlog
from kubernetes.client import ApiClient
from opentelemetry import propagate, trace

from activities.inventory import read_inventory
from inference_api.payloads import PlanInput
from inference_api.plan import (
    MAX_PLANNED_REPLICAS,
    LaunchPlanRequest,
    OrderFacts,
    PlanOutcome,
    RuntimeFallbackFlag,
    Toleration,
)
from inference_api.settings import ModuleSettings, require_https
from planner import PlanningRequest, plan_launch
from planner.recipes import RecipeBook, load_recipe_book
from planner.scaling import planned_replicas

log = structlog.get_logger(__name__)
_tracer = trace.get_tracer("ai-inference.planner-client")

LAUNCH_PLAN_PATH = "/api/v1/launch-plan"
# Fields a planner of the release before does not know (its request model forbids extras): sent only
# when set, so that a worker and a planner of two releases meet during an upgrade.
_NEWER_FIELDS = frozenset({"preferDevice"})


def _body_json(body: LaunchPlanRequest) -> str:
    """The request as sent: the newer fields left out while they hold their default."""
    unset = {name for name in _NEWER_FIELDS if getattr(body, name) is None}
    return body.model_dump_json(exclude=unset or None)


PlanFunction = Callable[[PlanInput], PlanOutcome]


class PlannerServiceError(RuntimeError):
    """The planner service answered with an error status (the activity retries)."""

    def __init__(self, status: int, error: str, message: str) -> None:
        self.status = status
        self.error = error
        super().__init__(f"planner service answered HTTP {status} {error}: {message}")


def holder_of(request: PlanInput) -> str:
    """How an order names itself to the planner; the inventory adapter names its claims the same way."""
    return request.ref.key


def launch_plan_request(request: PlanInput, settings: ModuleSettings) -> LaunchPlanRequest:
    """The F2-09 body for one order: facts, the class's acceleratorPolicy, the fallback flag, who it is."""
    facts = request.facts
    return LaunchPlanRequest(
        facts=OrderFacts(
            modelName=request.servedName,
            parameterCount=facts.parameterCount if facts else None,
            orderParameterCount=request.order.spec.model.parameterCount,
            quantization=facts.quantization if facts else None,
            format=facts.format if facts else None,
            endpointType=request.endpointType,
            disabledFeatures=request.cls.spec.modelPolicy.disabledFeatures or [],
        ),
        acceleratorPolicy=request.cls.spec.acceleratorPolicy,
        runtimeFallback=RuntimeFallbackFlag(enabled=settings.planner.runtimeFallback.enabled),
        className=request.cls.metadata.name,
        holder=holder_of(request),
        currentPlan=request.current,
        besideCurrent=request.besideCurrent,
        preferDevice=request.preferDevice,
        replicas=min(planned_replicas(request.cls), MAX_PLANNED_REPLICAS),
        **scheduling(settings),
    )


def plan_in_process(
    request: LaunchPlanRequest,
    api: ApiClient,
    *,
    recipes: RecipeBook | None = None,
    timeout: float | None = None,
    settings: ModuleSettings | None = None,
) -> PlanOutcome:
    """What the planner service does for a request, here: read the inventory, plan on it (with the
    settings' workload tolerations and nodeSelector, which the replicas' pods carry)."""
    inventory = read_inventory(api, timeout=timeout)
    return plan_launch(PlanningRequest(**{**dict(request), **scheduling(settings)}, inventory=inventory), recipes)


def scheduling(settings: ModuleSettings | None) -> dict[str, Any]:
    """The PlanningRequest fields the module settings give: what the replicas' pods tolerate and select."""
    if settings is None:
        return {}
    return {
        "tolerations": [Toleration.model_validate(t) for t in settings.workload.tolerations],
        "nodeSelector": dict(settings.workload.nodeSelector),
    }


# ----------------------------------------------------------------- audience-bound tokens


class TokenUnavailableError(RuntimeError):
    """The token for a service cannot be sent: its file is missing or unreadable, or it is bound to
    another audience. The message names the file and the audiences, never the token."""


def token_audiences(token: str) -> list[str] | None:
    """The ``aud`` claim of a JWT (not verified: the receiving service's TokenReview does that);
    None for a token that is not a JWT."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, binascii.Error):
        return None
    audience = claims.get("aud") if isinstance(claims, dict) else None
    if isinstance(audience, str):
        return [audience]
    if isinstance(audience, list):
        return [str(a) for a in audience]
    return None


def read_audience_token(path: Path, audience: str, service: str) -> str:
    """The token in ``path``, checked to be bound to ``audience`` when it is a JWT.

    A ServiceAccount token for another audience (the pod's own, made for the API server, above all)
    is refused rather than sent: whoever receives it could replay it.
    """
    try:
        token = path.read_text().strip()
    except OSError as err:
        raise TokenUnavailableError(f"the {service} token file {path} cannot be read: {err.strerror}") from None
    if not token:
        raise TokenUnavailableError(f"the {service} token file {path} is empty")
    audiences = token_audiences(token)
    if audiences is not None and audience not in audiences:
        raise TokenUnavailableError(
            f"the token in {path} is bound to audiences {audiences}, not {audience!r}: refusing to send it to the "
            f"{service} (project a ServiceAccount token with audience {audience!r} there)"
        )
    return token


class ProjectedToken:
    """A projected ServiceAccount token file: read again whenever it changes (the kubelet rotates it
    well before it expires), checked for its audience each time it is read."""

    def __init__(self, path: Path, audience: str, service: str = "planner") -> None:
        self.path = path
        self.audience = audience
        self.service = service
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int] | None = None
        self._token = ""

    def __call__(self) -> str:
        try:
            st = os.stat(self.path)
        except OSError as err:
            raise TokenUnavailableError(
                f"the {self.service} token file {self.path} cannot be read: {err.strerror}"
            ) from None
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        with self._lock:
            if stamp != self._seen:
                self._token = read_audience_token(self.path, self.audience, self.service)
                self._seen = stamp
            return self._token


def server_verification(ca_file: str | None) -> ssl.SSLContext | bool:
    """How a service's certificate is verified: against ``ca_file`` alone, else the system's roots."""
    if not ca_file:
        return True
    return ssl.create_default_context(cafile=ca_file)


# ------------------------------------------------------------------------------- client


class HttpPlanner:
    """``POST {baseURL}/api/v1/launch-plan``; one connection pool for the worker's lifetime."""

    def __init__(
        self,
        base_url: str,
        token: Callable[[], str | None],
        timeout: float,
        settings: ModuleSettings,
        transport: httpx.BaseTransport | None = None,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        self.url = base_url.rstrip("/") + LAUNCH_PLAN_PATH
        self._host = httpx.URL(self.url).host
        self._token = token
        self._settings = settings
        self._http = httpx.Client(timeout=timeout, transport=transport, verify=verify)

    def close(self) -> None:
        self._http.close()

    def request(self, body: LaunchPlanRequest) -> PlanOutcome:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        token = self._token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        attributes = {"http.request.method": "POST", "url.path": LAUNCH_PLAN_PATH, "server.address": self._host}
        with _tracer.start_as_current_span(
            f"planner POST {LAUNCH_PLAN_PATH}", kind=trace.SpanKind.CLIENT, attributes=attributes
        ) as span:
            # The span's context travels in `traceparent`: the service's own span joins the trace.
            propagate.inject(headers)
            response = self._http.post(self.url, content=_body_json(body), headers=headers)
            span.set_attribute("http.response.status_code", response.status_code)
            if response.status_code != 200:
                error, message = _error_of(response)
                span.set_attribute("error.type", error)
                raise PlannerServiceError(response.status_code, error, message)
            return PlanOutcome.model_validate_json(response.content)

    def __call__(self, request: PlanInput) -> PlanOutcome:
        return self.request(launch_plan_request(request, self._settings))


def _error_of(response: httpx.Response) -> tuple[str, str]:
    """The service's JSON error ({error, message}); a line of anything else (a proxy's page)."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "message" in body:
        return str(body.get("error") or response.reason_phrase), str(body["message"])[:500]
    text = " ".join(response.text.split())[:200]
    return response.reason_phrase, text or "(no body)"


def make_planner(settings: ModuleSettings, api: ApiClient) -> PlanFunction:
    """The plan activity's planner: over HTTPS when ``planner.baseURL`` is set, else in-process.

    Raises ``InsecureTransportError`` for an ``http://`` URL (unless ``planner.allowInsecureHttp``)
    and ``OSError``/``ssl.SSLError`` for an unusable ``planner.caFile``: the worker does not start.
    """
    planner = settings.planner
    base_url = planner.baseURL
    timeout = planner.timeoutSeconds
    if base_url:
        require_https(base_url, "planner.baseURL", planner.allowInsecureHttp, "planner.allowInsecureHttp")
        if base_url.strip().lower().startswith("http://"):
            log.warning("planner: plain http (planner.allowInsecureHttp is true): unsafe, for tests only")
        verify = server_verification(planner.caFile)
        token = ProjectedToken(Path(planner.tokenFile), planner.audience, "planner")
        log.info(
            "planner: service",
            url=base_url.rstrip("/") + LAUNCH_PLAN_PATH,
            audience=planner.audience,
            token_file=planner.tokenFile,
            ca_file=planner.caFile or "system roots",
        )
        return HttpPlanner(base_url, token, timeout, settings, verify=verify)

    recipes = load_recipe_book(planner.recipesDirectory)

    def in_process(request: PlanInput) -> PlanOutcome:
        return plan_in_process(
            launch_plan_request(request, settings), api, recipes=recipes, timeout=timeout, settings=settings
        )

    log.info("planner: in-process")
    return in_process
