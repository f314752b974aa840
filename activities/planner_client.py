"""The plan activity's planner: the planner service over HTTP, or the planning library in-process.

``make_planner(settings, api)`` gives the function ``OrderActivities`` calls with a ``PlanInput``:

* ``planner.baseURL`` set: ``POST {baseURL}/api/v1/launch-plan`` with the ``LaunchPlanRequest`` as
  JSON and ``Authorization: Bearer <token>``: the pod's ServiceAccount token
  (``/var/run/secrets/kubernetes.io/serviceaccount/token``, read on each call since the kubelet
  rotates it), or, outside a pod, the bearer token of the kubeconfig the ``ApiClient`` was built from.
  The service authorizes the caller with a SubjectAccessReview of ``create`` on
  ``inferenceserviceclasses/planner``.
* otherwise: ``read_inventory(api)`` and ``planner.plan_launch`` in this process.

A transport failure, a timeout or an HTTP error raise (the activity is retried); a refusal is a
``PlanOutcome`` with ``refusal`` set, like a plan. The token is never logged nor put in an error.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import structlog
from kubernetes.client import ApiClient

from activities.inventory import read_inventory
from inference_api.payloads import PlanInput
from inference_api.plan import LaunchPlanRequest, OrderFacts, PlanOutcome, RuntimeFallbackFlag
from inference_api.settings import ModuleSettings
from planner import PlanningRequest, plan_launch
from planner.recipes import RecipeBook

log = structlog.get_logger(__name__)

LAUNCH_PLAN_PATH = "/api/v1/launch-plan"
SERVICE_ACCOUNT_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")

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
        ),
        acceleratorPolicy=request.cls.spec.acceleratorPolicy,
        runtimeFallback=RuntimeFallbackFlag(enabled=settings.planner.runtimeFallback.enabled),
        className=request.cls.metadata.name,
        holder=holder_of(request),
        currentPlan=request.current,
    )


def plan_in_process(
    request: LaunchPlanRequest, api: ApiClient, *, recipes: RecipeBook | None = None, timeout: float | None = None
) -> PlanOutcome:
    """What the planner service does for a request, here: read the inventory, plan on it."""
    inventory = read_inventory(api, timeout=timeout)
    return plan_launch(PlanningRequest(**dict(request), inventory=inventory), recipes)


def bearer_token(api: ApiClient, token_file: Path = SERVICE_ACCOUNT_TOKEN) -> str | None:
    """The caller's identity for the planner service: the pod's ServiceAccount token, else the
    ApiClient's bearer token (a kubeconfig's ``token``, an exec plugin's, in-cluster config's)."""
    try:
        token = token_file.read_text().strip()
    except OSError:
        token = ""
    if token:
        return token
    configuration = api.configuration
    # Calls the refresh hook of in-cluster and exec-plugin configurations before reading.
    # Kubeconfig and in-cluster loaders store it as "BearerToken"; older clients as "authorization".
    value = configuration.get_api_key_with_prefix("BearerToken", alias="authorization") or ""
    scheme, _, rest = value.strip().partition(" ")
    if rest and scheme.lower() == "bearer":
        return rest.strip() or None
    return value.strip() or None


class HttpPlanner:
    """``POST {baseURL}/api/v1/launch-plan``; one connection pool for the worker's lifetime."""

    def __init__(
        self,
        base_url: str,
        token: Callable[[], str | None],
        timeout: float,
        settings: ModuleSettings,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = base_url.rstrip("/") + LAUNCH_PLAN_PATH
        self._token = token
        self._settings = settings
        self._http = httpx.Client(timeout=timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def request(self, body: LaunchPlanRequest) -> PlanOutcome:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        token = self._token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        response = self._http.post(self.url, content=body.model_dump_json(), headers=headers)
        if response.status_code != 200:
            error, message = _error_of(response)
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
    """The plan activity's planner: over HTTP when ``planner.baseURL`` is set, else in-process."""
    base_url = settings.planner.baseURL
    timeout = settings.planner.timeoutSeconds
    if base_url:
        log.info("planner: service", url=base_url.rstrip("/") + LAUNCH_PLAN_PATH)
        return HttpPlanner(base_url, lambda: bearer_token(api), timeout, settings)

    def in_process(request: PlanInput) -> PlanOutcome:
        return plan_in_process(launch_plan_request(request, settings), api, timeout=timeout)

    log.info("planner: in-process")
    return in_process
