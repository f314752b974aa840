"""The planner service: ``POST /api/v1/launch-plan`` around the planning library (Starlette + uvicorn).

Routes:

* ``POST /api/v1/launch-plan`` — body a ``LaunchPlanRequest``, answer a ``PlanOutcome`` (a plan or a
  refusal, both ``200``), planned on the snapshot the ``inventory`` callable gives. In the
  ``ai-inference planner`` command that is informers (``worker/observer/inventory.py``: list+watch of
  DeviceClasses, ResourceSlices, ResourceClaims, PhysicalGPUs and the orders' Pods), so a plan does
  not read the cluster; a change is seen by the next plan once its watch event arrived.
* ``GET /healthz`` — ``ok``; ``GET /readyz`` — ``ok`` once the inventory is synced (every kind listed
  once), else 503; ``GET /openapi.json`` — the OpenAPI 3.1 document of the above, its schemas
  generated from the pydantic models.

Each plan answered is **booked** (``BookingLedger``, ``planner.bookings``): later plans count it until
the informers show the order's claims allocated, the order plans again, or the booking TTL
(``planner.bookingTTLSeconds``) passes; unallocated order claims no booking covers count too. Plans
are serialized under the ledger's lock, as kube-scheduler assumes one pod at a time.

**Namespaces in turn.** Requests waiting to be planned are let in by a :class:`planner.fairness.FairGate`
keyed by the order's namespace (``holder``'s first part): one at a time with bookings (the ledger's
lock serializes them anyway), ``PLAN_CONCURRENCY`` without; the namespaces with requests waiting take
turns, first come first within one. Without it the waiters queued first come first (the thread pool's
40 places, then its FIFO), so a namespace whose flood of orders plans at once put every other
namespace's plan behind all of its own.

Callers are authorized like an extension API server: the bearer token goes to a **TokenReview**
(``authentication.k8s.io/v1``) that requires the service's **audience** (``planner.audience``,
``ai-inference-planner``: the caller sends a projected ServiceAccount token requested for it, so a
token made for the API server or for another service is refused, and this one is worth nothing
elsewhere), the user it names to a **SubjectAccessReview** (``authorization.k8s.io/v1``) for verb
``create`` on ``inferenceserviceclasses/planner`` in API group ``ai.deckhouse.io`` — a virtual
subresource no human role grants. No token, an unknown one or one for another audience → ``401``,
not allowed → ``403``, with a JSON ``{error, message}`` saying why; the token itself is never echoed,
logged or kept (a positive answer is remembered for ``cache_ttl`` seconds under the token's SHA-256).

The ``ai-inference planner`` command serves it over HTTPS (``--tls-cert-file``/``--tls-key-file``);
:class:`CertificateReloader` loads a renewed serving certificate into the running server.

Imports point one way: the Kubernetes inventory adapter lives with the activities, so whoever starts
the service (the ``ai-inference planner`` command, a test) hands it the reader.
"""

from __future__ import annotations

import collections
import hashlib
import os
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

import structlog
from opentelemetry import propagate, trace
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_asgi_app
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.json_schema import models_json_schema
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from inference_api.plan import LaunchPlan, LaunchPlanRequest, PlanOutcome
from inference_api.settings import PLANNER_AUDIENCE
from inference_api.types import CLASSES, GROUP
from planner.bookings import Booking, OrderClaim, prune, reserve, with_booked_pods
from planner.fairness import FairGate
from planner.fragmentation import RecentDemand, held_demands
from planner.inventory import InventorySnapshot
from planner.planning import PlanningRequest, plan_launch, plan_launch_traced, stranded_devices
from planner.quantity import Quantity
from planner.recipes import RecipeBook, load_recipe_book

log = structlog.get_logger(__name__)
_tracer = trace.get_tracer("ai-inference.planner")

LAUNCH_PLAN_PATH = "/api/v1/launch-plan"
HEALTHZ_PATH = "/healthz"
READYZ_PATH = "/readyz"
OPENAPI_PATH = "/openapi.json"

# The virtual subresource a caller must be allowed to create.
PLANNER_GROUP = GROUP
PLANNER_RESOURCE = CLASSES
PLANNER_SUBRESOURCE = "planner"
PLANNER_VERB = "create"
PERMISSION = f"{PLANNER_VERB} {PLANNER_RESOURCE}/{PLANNER_SUBRESOURCE} in API group {PLANNER_GROUP}"

MAX_BODY_BYTES = 1 << 20
DEFAULT_CACHE_TTL = 30.0
DEFAULT_BOOKING_TTL = 600.0
# Plans at once without bookings (a plain inventory reader: no lock to share); with bookings, one.
PLAN_CONCURRENCY = 4

ErrorKind = Literal["BadRequest", "Unauthorized", "Forbidden", "PayloadTooLarge", "InternalError", "ServiceUnavailable"]


class ErrorBody(BaseModel):
    """Why a request was not answered with a PlanOutcome."""

    model_config = ConfigDict(extra="forbid")
    error: ErrorKind = Field(description="What went wrong, by HTTP status.")
    message: str = Field(description="Why, for a person; never the caller's token.")
    details: list[dict[str, Any]] = Field(
        default_factory=list, description="Field errors of an invalid body (location, message, type)."
    )


# ------------------------------------------------------------------------ authorization


@dataclass(frozen=True)
class Caller:
    """Who a token belongs to, as the TokenReview said."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""


class ReviewError(Exception):
    """The API server could not be asked (the service answers 503; the caller retries)."""


class AccessReviewer(Protocol):
    # The audience a token must be bound to.
    audience: str

    def authenticate(self, token: str) -> Caller | None:
        """The token's user, or None when the API server does not accept the token for ``audience``."""
        ...

    def authorize(self, caller: Caller) -> Decision:
        """May the caller create inferenceserviceclasses/planner?"""
        ...


class KubernetesAccessReviewer:
    """TokenReview and SubjectAccessReview through the service's own ApiClient (its ServiceAccount
    needs ``create`` on tokenreviews and subjectaccessreviews).

    The TokenReview names ``audience``: the API server authenticates the token only if it was issued
    for it, and says so in ``status.audiences``, which is checked too (an API server that ignored
    the audiences would answer without them)."""

    def __init__(self, api: Any, timeout: float = 10, audience: str = PLANNER_AUDIENCE) -> None:
        if not audience:
            raise ValueError("the planner needs an audience for its TokenReviews")
        self._api = api
        self._timeout = timeout
        self.audience = audience

    def authenticate(self, token: str) -> Caller | None:
        from kubernetes.client import AuthenticationV1Api, V1TokenReview, V1TokenReviewSpec
        from kubernetes.client.exceptions import ApiException

        try:
            review = AuthenticationV1Api(self._api).create_token_review(
                V1TokenReview(spec=V1TokenReviewSpec(token=token, audiences=[self.audience])),
                _request_timeout=self._timeout,
            )
        except ApiException as err:
            # Status line only: an error body is not ours to repeat.
            raise ReviewError(f"TokenReview failed: HTTP {err.status} {err.reason}") from None
        except Exception as err:
            raise ReviewError(f"TokenReview failed: {type(err).__name__}") from None
        status = review.status
        if status is None or not status.authenticated or status.user is None:
            return None
        if self.audience not in (status.audiences or ()):
            return None
        user = status.user
        return Caller(
            username=user.username or "",
            uid=user.uid or "",
            groups=tuple(user.groups or ()),
            extra={k: tuple(v or ()) for k, v in (user.extra or {}).items()},
        )

    def authorize(self, caller: Caller) -> Decision:
        from kubernetes.client import (
            AuthorizationV1Api,
            V1ResourceAttributes,
            V1SubjectAccessReview,
            V1SubjectAccessReviewSpec,
        )
        from kubernetes.client.exceptions import ApiException

        review = V1SubjectAccessReview(
            spec=V1SubjectAccessReviewSpec(
                user=caller.username,
                uid=caller.uid or None,
                groups=list(caller.groups),
                extra={k: list(v) for k, v in caller.extra.items()} or None,
                resource_attributes=V1ResourceAttributes(
                    group=PLANNER_GROUP, resource=PLANNER_RESOURCE, subresource=PLANNER_SUBRESOURCE, verb=PLANNER_VERB
                ),
            )
        )
        try:
            answer = AuthorizationV1Api(self._api).create_subject_access_review(review, _request_timeout=self._timeout)
        except ApiException as err:
            raise ReviewError(f"SubjectAccessReview failed: HTTP {err.status} {err.reason}") from None
        except Exception as err:
            raise ReviewError(f"SubjectAccessReview failed: {type(err).__name__}") from None
        status = answer.status
        if status is None:
            return Decision(False, "the SubjectAccessReview came back without a status")
        reason = status.reason or status.evaluation_error or ""
        return Decision(bool(status.allowed) and not status.denied, reason)


class CallerCache:
    """Positive reviews for a short while, keyed by the SHA-256 of the token (never the token)."""

    def __init__(self, ttl: float = DEFAULT_CACHE_TTL, limit: int = 4096, clock: Callable[[], float] = time.monotonic):
        self._ttl = ttl
        self._limit = limit
        self._clock = clock
        self._entries: dict[str, tuple[float, Caller]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def key(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()

    def get(self, token: str) -> Caller | None:
        key, now = self.key(token), self._clock()
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry[0] <= now:
                del self._entries[key]
                return None
            return entry[1]

    def put(self, token: str, caller: Caller) -> None:
        if self._ttl <= 0:
            return
        now = self._clock()
        with self._lock:
            if len(self._entries) >= self._limit:
                self._entries = {k: v for k, v in self._entries.items() if v[0] > now}
                if len(self._entries) >= self._limit:
                    self._entries.pop(next(iter(self._entries)))
            self._entries[self.key(token)] = (now + self._ttl, caller)


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def _error(status: int, kind: ErrorKind, message: str, details: list[dict[str, Any]] | None = None) -> JSONResponse:
    headers = {"WWW-Authenticate": 'Bearer realm="ai-inference-planner"'} if status == 401 else None
    body = ErrorBody(error=kind, message=message, details=details or [])
    return JSONResponse(body.model_dump(mode="json"), status_code=status, headers=headers)


# ------------------------------------------------------------------------------ OpenAPI


def openapi_document() -> dict[str, Any]:
    """OpenAPI 3.1 (its schemas are JSON Schema 2020-12, which pydantic writes)."""
    refs, top = models_json_schema(
        [(LaunchPlanRequest, "validation"), (PlanOutcome, "serialization"), (ErrorBody, "serialization")],
        ref_template="#/components/schemas/{model}",
    )
    request_ref = refs[(LaunchPlanRequest, "validation")]
    outcome_ref = refs[(PlanOutcome, "serialization")]
    error_ref = refs[(ErrorBody, "serialization")]

    def json_content(ref: Mapping[str, Any]) -> dict[str, Any]:
        return {"application/json": {"schema": dict(ref)}}

    def error(description: str) -> dict[str, Any]:
        return {"description": description, "content": json_content(error_ref)}

    return {
        "openapi": "3.1.0",
        "info": {
            "title": "ai-inference planner",
            "version": "v1",
            "description": "Launch planning for one InferenceService: on which accelerator, with how much of "
            "it, with which vLLM recipe. See docs/planner.md.",
        },
        "paths": {
            LAUNCH_PLAN_PATH: {
                "post": {
                    "operationId": "launchPlan",
                    "summary": "Plan one order against the cluster's current inventory.",
                    "description": "Callers need `create` on the virtual subresource `inferenceserviceclasses/planner` "
                    "(API group ai.deckhouse.io), checked with a TokenReview and a SubjectAccessReview.",
                    "security": [{"kubernetesBearer": []}],
                    "requestBody": {"required": True, "content": json_content(request_ref)},
                    "responses": {
                        "200": {
                            "description": "A plan, or a refusal with its reason (exactly one of the two).",
                            "content": json_content(outcome_ref),
                        },
                        "400": error("The body is not a valid LaunchPlanRequest."),
                        "401": error(
                            "No bearer token, or the API server does not accept it for the planner's audience."
                        ),
                        "403": error(f"The caller may not {PERMISSION}."),
                        "413": error(f"The body is larger than {MAX_BODY_BYTES} bytes."),
                        "500": error("Planning failed (a bug: the service's log has the details)."),
                        "503": error("The API server could not be asked (reviews, inventory); retry."),
                    },
                }
            },
            HEALTHZ_PATH: {
                "get": {
                    "operationId": "healthz",
                    "summary": "Liveness.",
                    "responses": {
                        "200": {"description": "ok", "content": {"text/plain": {"schema": {"type": "string"}}}}
                    },
                }
            },
            READYZ_PATH: {
                "get": {
                    "operationId": "readyz",
                    "summary": "Readiness: the inventory is synced (every kind listed once).",
                    "responses": {
                        "200": {"description": "ok", "content": {"text/plain": {"schema": {"type": "string"}}}},
                        "503": {
                            "description": "not ready",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        },
                    },
                }
            },
            OPENAPI_PATH: {
                "get": {
                    "operationId": "openapi",
                    "summary": "This document.",
                    "responses": {
                        "200": {
                            "description": "OpenAPI 3.1",
                            "content": {"application/json": {"schema": {"type": "object"}}},
                        }
                    },
                }
            },
        },
        "components": {
            "schemas": top.get("$defs", {}),
            "securitySchemes": {
                "kubernetesBearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A Kubernetes ServiceAccount token bound to the planner's audience "
                    f"(`{PLANNER_AUDIENCE}` unless planner.audience says otherwise), reviewed with a TokenReview.",
                }
            },
        },
    }


# ---------------------------------------------------------------------- serving certificate


class CertificateReloader:
    """Puts a renewed serving certificate into the server's ``SSLContext``.

    cert-manager renews the certificate and the kubelet swaps the Secret volume's files; connections
    made after :meth:`check` sees them change get the new one, connections already open keep theirs.
    A pair that cannot be loaded (a half-written file) is logged and retried at the next check; the
    certificate in use stays.
    """

    def __init__(self, context: ssl.SSLContext, cert_file: str, key_file: str) -> None:
        self._context = context
        self._files = (cert_file, key_file)
        self._seen = self._stamp()

    def _stamp(self) -> tuple[tuple[int, int, int], ...] | None:
        try:
            stats = [os.stat(path) for path in self._files]
        except OSError:
            return None
        return tuple((st.st_ino, st.st_mtime_ns, st.st_size) for st in stats)

    def check(self) -> bool:
        """Reload when the files changed; True when a new certificate was loaded."""
        stamp = self._stamp()
        if stamp is None or stamp == self._seen:
            return False
        try:
            self._context.load_cert_chain(*self._files)
        except (OSError, ssl.SSLError) as err:
            log.warning("planner: the renewed serving certificate cannot be loaded yet", error=type(err).__name__)
            return False
        self._seen = stamp
        log.info("planner: serving certificate reloaded", cert_file=self._files[0])
        return True

    def start(self, interval: float = 30.0) -> threading.Event:
        """Check every ``interval`` seconds in a daemon thread; set the returned event to stop it."""
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(interval):
                self.check()

        threading.Thread(target=loop, name="planner-certificate-reloader", daemon=True).start()
        return stop


# ----------------------------------------------------------------------------- bookings


class InventoryReadError(Exception):
    """The inventory could not be read (the service answers 503; the caller retries)."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


_T = TypeVar("_T")


def read_guarded(read: Callable[[], _T]) -> _T:
    try:
        return read()
    except Exception as err:
        status = getattr(err, "status", None)
        what = f"HTTP {status} {getattr(err, 'reason', '')}".strip() if status else type(err).__name__
        raise InventoryReadError(what) from err


class InventoryView(Protocol):
    """An inventory that also tells the order claims it saw, from the same state (the informers)."""

    def view(self) -> tuple[InventorySnapshot, Sequence[OrderClaim]]: ...


class BookingLedger:
    """The plans this service answered that the cluster does not show allocated yet (``planner.bookings``).

    ``plan`` runs one plan under the ledger's lock: prune what the claims settled or the TTL expired,
    drop the order's own booking (a new plan replaces it), reserve the rest on the snapshot, plan, and
    book the answer. Plans are serialized, as kube-scheduler schedules one pod at a time: two orders
    planned at once would otherwise both be planned on the capacity neither has booked yet."""

    def __init__(self, ttl: float = DEFAULT_BOOKING_TTL, clock: Callable[[], float] = time.monotonic) -> None:
        if ttl <= 0:
            raise ValueError("the booking TTL must be positive")
        self.ttl = ttl
        self._clock = clock
        self._bookings: dict[str, Booking] = {}
        self._lock = threading.Lock()
        self._last: InventorySnapshot | None = None

    def bookings(self) -> list[Booking]:
        with self._lock:
            return list(self._bookings.values())

    def plan(
        self,
        view: Callable[[], tuple[InventorySnapshot, Sequence[OrderClaim]]],
        body: LaunchPlanRequest,
        book: RecipeBook,
    ) -> PlanOutcome:
        with self._lock:
            snapshot, claims = read_guarded(view)
            now = self._clock()
            pruned = prune(self._bookings.values(), claims, now, self.ttl)
            for dropped, why in pruned.dropped.items():
                log.info("planner: booking dropped", holder=dropped, why=why)
            self._bookings = {b.holder: b for b in pruned.kept}
            holder = body.holder
            if holder is not None and self._bookings.pop(holder, None) is not None:
                log.info("planner: booking dropped", holder=holder, why="replanned")
            reservation = reserve(snapshot, self._bookings.values(), claims)
            if reservation.unplaced:
                log.info(
                    "planner: reservations with room nowhere (the cluster is over-committed)",
                    holders=sorted({n.holder for n in reservation.unplaced}),
                )
            snapshot = with_booked_pods(reservation, self._bookings.values())
            # No kinds of order named: the plan is a function of the body and the cluster (with the
            # bookings), as the dry run's and the in-process planner's are, in every replica.
            request = PlanningRequest(**dict(body), inventory=snapshot)
            outcome, trace = plan_launch_traced(request, book)
            if outcome.plan is not None:
                log.debug("planner: planned", holder=holder, choice=trace.choice)
            if holder is not None and outcome.plan is not None:
                self._bookings[holder] = Booking.of_plan(holder, outcome.plan, now)
            self._last = snapshot
            return outcome

    def stranded(self) -> float:
        """What the last plan's snapshot leaves stranded against the kinds of order the cluster holds
        (``held_demands``; computed when asked: a scrape, not a plan, pays for it)."""
        with self._lock:
            last = self._last
        return stranded_devices(last, held_demands(last)) if last is not None else 0.0


class RecentOrders:
    """The kinds of orders planned lately (the last ``window`` plans). No longer weighed by plans: kept
    in one process's memory, it made a restarted planner, a second replica and the dry run plan
    differently from the same cluster (issue 37); plans name no kinds now and the stranded metric
    derives them from the cluster (``held_demands``). The list changes every ``refresh`` plans only."""

    def __init__(self, window: int = 512, refresh: int = 32) -> None:
        self._window: deque[RecentDemand] = deque(maxlen=window)
        self._refresh = refresh
        self._since = 0
        self._current: list[RecentDemand] = []

    def add(self, plan: LaunchPlan) -> None:
        self._window.append(demand_of(plan))
        self._since += 1
        if not self._current or self._since >= self._refresh:
            counts = collections.Counter(self._window)
            self._current = [d.model_copy(update={"weight": float(n)}) for d, n in sorted(counts.items(), key=repr)]
            self._since = 0

    def demands(self) -> list[RecentDemand]:
        return self._current


def demand_of(plan: LaunchPlan) -> RecentDemand:
    """What an order of this plan asks for, as the fragmentation-aware choice weighs it."""
    cpu = Quantity.of(plan.cpu).value * 1000
    memory = Quantity.of(plan.memory).value / (1024 * 1024)
    return RecentDemand(
        deviceCount=plan.deviceCount,
        sharePercent=plan.sharePercent,
        cpuMilli=int(cpu),
        memoryMiB=int(memory),
        deviceClasses=(plan.deviceClass,),
    )


def namespace_of(body: LaunchPlanRequest) -> str:
    """The order's namespace (``holder`` is ``namespace/name``; none: one shared turn)."""
    return (body.holder or "").partition("/")[0]


# ---------------------------------------------------------------------------------- app


class _AsgiEndpoint:
    """An ASGI callable as a Route's endpoint (a plain function there is taken for a request handler)."""

    def __init__(self, app: Callable[[Any, Any, Any], Any]) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


def create_app(
    inventory: Callable[[], InventorySnapshot],
    reviewer: AccessReviewer,
    *,
    recipes: RecipeBook | None = None,
    cache_ttl: float = DEFAULT_CACHE_TTL,
    clock: Callable[[], float] = time.monotonic,
    ready: Callable[[], bool] | None = None,
    booking_ttl: float = DEFAULT_BOOKING_TTL,
    registry: CollectorRegistry | None = None,
) -> Starlette:
    """The service. ``inventory`` gives the cluster's snapshot (called on every plan: informers keep
    it, so a call reads no API); ``reviewer`` answers TokenReviews and SubjectAccessReviews; ``ready``
    says whether the inventory is synced (default: the inventory's own ``ready()``, else always).

    An inventory with a ``view()`` (snapshot and order claims from one state: the informers) gets
    **bookings**: each answered plan counts against later plans until its claims are allocated, the
    order plans again, or ``booking_ttl`` seconds pass (``BookingLedger``). A plain reader cannot
    tell when a booking settles, and plans on what it reads.

    ``GET /metrics`` (no token: counts and timings only) serves ``registry`` (default: one of the
    app's own): plans by outcome, their latency, bookings held."""
    is_ready: Callable[[], bool] = ready or getattr(inventory, "ready", None) or (lambda: True)
    view: Callable[[], tuple[InventorySnapshot, Sequence[OrderClaim]]] | None = getattr(inventory, "view", None)
    ledger = BookingLedger(booking_ttl, clock) if view is not None else None
    metrics = registry or CollectorRegistry()
    plans = Counter(
        "ai_inference_planner_plans",
        "Launch-plan requests answered, by outcome: Planned, a refusal reason, or the error kind.",
        ["outcome"],
        registry=metrics,
    )
    plan_seconds = Histogram(
        "ai_inference_planner_plan_seconds",
        "Time to answer a launch-plan request that was planned or refused (authorization included).",
        buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        registry=metrics,
    )
    bookings_held = Gauge(
        "ai_inference_planner_bookings", "Plans booked and not yet settled by their claims.", registry=metrics
    )
    bookings_held.set_function(lambda: len(ledger.bookings()) if ledger is not None else 0)
    stranded = Gauge(
        "ai_inference_planner_stranded_devices",
        "Free accelerator capacity, in devices, left in fragments the orders the cluster holds could not use "
        "(the nodes' expected fragmentation against the kinds of order the cluster holds), as of the last plan.",
        registry=metrics,
    )
    stranded.set_function(lambda: ledger.stranded() if ledger is not None else 0.0)
    # Plans let in by namespace in turn (one at a time with bookings: they are serialized anyway).
    gate = FairGate(1 if ledger is not None else PLAN_CONCURRENCY)
    waiting = Gauge(
        "ai_inference_planner_plans_waiting",
        "Launch-plan requests waiting for their namespace's turn to be planned.",
        registry=metrics,
    )
    waiting.set_function(lambda: gate.waiting)
    metrics_app = make_asgi_app(registry=metrics)

    def plan_once(body: LaunchPlanRequest) -> PlanOutcome:
        if ledger is not None and view is not None:
            return ledger.plan(view, body, book)
        snapshot = read_guarded(inventory)
        return plan_launch(PlanningRequest(**dict(body), inventory=snapshot), book)

    book = recipes or load_recipe_book()  # loaded (and validated) now: a broken table fails the start
    cache = CallerCache(cache_ttl, clock=clock)
    document = openapi_document()

    async def authorize(request: Request) -> Caller | JSONResponse:
        token = _bearer(request)
        if token is None:
            return _error(401, "Unauthorized", "no bearer token: send `Authorization: Bearer <ServiceAccount token>`")
        cached = cache.get(token)
        if cached is not None:
            return cached
        try:
            caller = await run_in_threadpool(reviewer.authenticate, token)
            if caller is None:
                return _error(
                    401,
                    "Unauthorized",
                    f'the API server did not accept the bearer token for audience "{reviewer.audience}" (TokenReview): '
                    "send a ServiceAccount token requested for that audience",
                )
            decision = await run_in_threadpool(reviewer.authorize, caller)
        except ReviewError as err:
            log.warning("planner: review failed", error=str(err))
            return _error(503, "ServiceUnavailable", f"cannot authorize the caller now: {err}")
        if not decision.allowed:
            why = f" ({decision.reason})" if decision.reason else ""
            log.info("planner: caller refused", user=caller.username)
            return _error(403, "Forbidden", f'user "{caller.username}" may not {PERMISSION}{why}')
        cache.put(token, caller)
        return caller

    async def launch_plan(request: Request) -> Response:
        # The caller's span travels in `traceparent` (activities/planner_client.py): this one joins
        # its trace. A no-op unless the process set up tracing (tracing.otlpEndpoint).
        parent = propagate.extract(dict(request.headers))
        with _tracer.start_as_current_span(
            f"POST {LAUNCH_PLAN_PATH}",
            context=parent,
            kind=trace.SpanKind.SERVER,
            attributes={"http.request.method": "POST", "url.path": LAUNCH_PLAN_PATH},
        ) as span:
            response = await answer_launch_plan(request)
            span.set_attribute("http.response.status_code", response.status_code)
            return response

    async def answer_launch_plan(request: Request) -> Response:
        started = time.perf_counter()
        caller = await authorize(request)
        if isinstance(caller, Response):
            return caller
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            return _error(413, "PayloadTooLarge", f"the body is larger than {MAX_BODY_BYTES} bytes")
        raw = await request.body()
        if len(raw) > MAX_BODY_BYTES:
            return _error(413, "PayloadTooLarge", f"the body is larger than {MAX_BODY_BYTES} bytes")
        try:
            body = LaunchPlanRequest.model_validate_json(raw)
        except ValidationError as err:
            details = err.errors(include_url=False, include_context=False, include_input=False)
            message = f"the body is not a LaunchPlanRequest: {err.error_count()} error(s)"
            return _error(400, "BadRequest", message, [dict(d) for d in details])
        try:
            async with gate.turn(namespace_of(body)):
                outcome = await run_in_threadpool(plan_once, body)
        except InventoryReadError as err:
            log.warning("planner: inventory read failed", error=err.what)
            plans.labels("ServiceUnavailable").inc()
            return _error(503, "ServiceUnavailable", f"reading the inventory failed: {err.what}")
        except Exception as err:
            log.exception("planner: planning failed", holder=body.holder, model=body.facts.modelName)
            plans.labels("InternalError").inc()
            return _error(500, "InternalError", f"planning failed: {type(err).__name__}")
        plans.labels(outcome.refusal.reason.value if outcome.refusal else "Planned").inc()
        plan_seconds.observe(time.perf_counter() - started)
        log.info(
            "planner: planned",
            user=caller.username,
            holder=body.holder,
            model=body.facts.modelName,
            outcome=outcome.refusal.reason.value if outcome.refusal else "Planned",
            devices=outcome.plan.deviceNames if outcome.plan else None,
            ms=round((time.perf_counter() - started) * 1000, 1),
        )
        return Response(outcome.model_dump_json(), media_type="application/json")

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok\n")

    async def readyz(request: Request) -> Response:
        if is_ready():
            return PlainTextResponse("ok\n")
        return PlainTextResponse("not ready: the inventory is not synced yet\n", status_code=503)

    async def openapi(request: Request) -> Response:
        return JSONResponse(document)

    return Starlette(
        routes=[
            Route(LAUNCH_PLAN_PATH, launch_plan, methods=["POST"]),
            Route(HEALTHZ_PATH, healthz, methods=["GET"]),
            Route(READYZ_PATH, readyz, methods=["GET"]),
            Route(OPENAPI_PATH, openapi, methods=["GET"]),
            # A Route, not a Mount: a Mount would redirect /metrics to /metrics/.
            Route("/metrics", _AsgiEndpoint(metrics_app), methods=["GET"]),
        ]
    )


__all__ = [
    "LAUNCH_PLAN_PATH",
    "AccessReviewer",
    "BookingLedger",
    "Caller",
    "CallerCache",
    "CertificateReloader",
    "Decision",
    "ErrorBody",
    "InventoryReadError",
    "KubernetesAccessReviewer",
    "ReviewError",
    "create_app",
    "openapi_document",
]
