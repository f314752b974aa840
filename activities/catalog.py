"""Model facts from the ai-models catalog: the client the resolve-model activity calls.

Two transports (phase 2.3 of the spec):

* ``catalogTransport: Rest`` (default) asks the ai-models controller's internal lookup API,
  ``GET {baseURL}{path}?kind=..&name=..[&namespace=..]``. When that API gives no usable answer
  (connection refused, timeout, 5xx, a malformed body) the Model / ClusterModel object is read
  right away, in the same call, so an order does not wait a retry cycle for a catalog that is
  merely restarting.
* ``catalogTransport: Kubernetes`` is the explicit rollback: objects only, REST is never called.

The lookup API is asked over ``https://`` only (an ``http://`` baseURL is refused, and the objects
answer instead, unless ``aiModels.catalogLookup.allowInsecureHttp``: tests only), with a projected
ServiceAccount token bound to ``aiModels.catalogLookup.audience`` (``tokenFile``, read on each
lookup), never the worker's own ServiceAccount token.

``catalog.mode: None`` means no catalog client at all: an order naming ``src: ai-models`` gets
``CatalogDisabled`` without any I/O, and Hugging Face orders never reach this module.

``catalog.mode: Enabled`` on a cluster without the ai-models module: the lookup service does not
answer, and the API server does not serve the Model / ClusterModel kinds at all (a 404 that
discovery confirms: not "this model does not exist"). The order gets ``CatalogNotInstalled``, a
message naming the missing module, and looks again every ``notReadyRequeueSeconds``, so installing
ai-models later lets it proceed.

The answer is a :class:`CatalogOutcome`: either the facts of a ready model, or a refusal Reason
with a message for the owner of the order. Only when *neither* path can answer is an exception
(:class:`CatalogUnavailableError`) raised, because that is an outage worth retrying, not a verdict.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

import httpx
import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from activities.planner_client import TokenUnavailableError, read_audience_token
from inference_api.catalog_types import (
    CATALOG_GROUP,
    CATALOG_VERSION,
    CatalogLookupResult,
    CatalogModelSpec,
    CatalogModelStatus,
    ModelFacts,
    ModelPhase,
    catalog_plural,
)
from inference_api.payloads import ModelResolution
from inference_api.reasons import Reason
from inference_api.settings import (
    CatalogMode,
    CatalogTransport,
    InsecureTransportError,
    ModuleSettings,
    require_https,
)
from inference_api.types import ModelKind, ModelRef, ModelScope, ModelSource, ModelSpec

log = structlog.get_logger(__name__)

PLURALS: dict[ModelKind, str] = {kind: catalog_plural(kind) for kind in ModelKind}

# In a pod, the service account's CA signs the in-cluster https endpoint of ai-models. Outside a
# pod the file does not exist. (Its token is NOT sent: see aiModels.catalogLookup.tokenFile.)
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class CatalogPath(StrEnum):
    """Which path produced an answer (for logs and for the resolve-model activity's details)."""

    REST = "Rest"
    KUBERNETES = "Kubernetes"
    NONE = "None"  # catalog.mode None: nobody was asked


class CatalogLookupAnswer(CatalogLookupResult):
    """The REST wire format of one lookup: CatalogLookupResult plus where the artefact comes from.

    ``source`` mirrors ``spec.source`` of the object (e.g. ``hf://Qwen/Qwen2.5-7B-Instruct``): a
    ClusterModel's name is not a repository, so the model fetcher needs the origin.
    """

    source: str | None = None


class ResolvedCatalogModel(BaseModel):
    """What the rest of an order needs from the catalog.

    The model's namespace is deliberately absent: the workload of an order never carries it
    (spec 2.3), so nothing downstream can leak it into a manifest by accident.
    """

    model_config = ConfigDict(frozen=True)
    kind: ModelKind
    name: str
    scope: ModelScope
    servedName: str = Field(description="Name the runtime serves the model as.")
    source: str | None = Field(default=None, description="Origin the model fetcher downloads from.")
    facts: ModelFacts


class CatalogOutcome(BaseModel):
    """Facts of a ready model, or a refusal Reason with a message for the owner of the order."""

    model_config = ConfigDict(frozen=True)
    resolved: ResolvedCatalogModel | None = None
    reason: Reason | None = None
    message: str = ""
    requeueAfterSeconds: float | None = Field(
        default=None,
        description="When to look again (notReadyRequeueSeconds): ModelNotReady, and ModelNotFound while "
        "the lookup service did not answer.",
    )
    answeredBy: CatalogPath
    restUnavailable: str | None = Field(
        default=None, description="Why REST gave no answer, when the objects answered in its place."
    )

    @property
    def ok(self) -> bool:
        return self.resolved is not None


class CatalogUnavailableError(Exception):
    """Neither REST nor the objects could answer: an outage, retryable, not a verdict on the order."""


class CatalogReadError(Exception):
    """A catalog object could not be read (anything but "it does not exist")."""


class CatalogNotInstalledError(Exception):
    """The API server does not serve the catalog's kinds: the ai-models module is not installed."""


class CatalogObjectReader(Protocol):
    """Reads one Model / ClusterModel object. Blocking; called from a worker thread."""

    def read_model(self, kind: ModelKind, name: str, namespace: str | None) -> Mapping[str, Any] | None:
        """The object as the API server returns it, or None when it does not exist.

        Raises CatalogNotInstalledError when the API server does not serve the kind (ai-models is
        not installed), CatalogReadError for every other failure (forbidden, unreachable, timeout).
        """
        ...


# ------------------------------------------------------------------ pure functions


def uses_catalog(model: ModelSpec) -> bool:
    """Only ``src: ai-models`` orders consult the catalog; Hugging Face orders never do."""
    return model.src is ModelSource.AI_MODELS


def model_scope(kind: ModelKind) -> ModelScope:
    """ClusterModel → Cluster, Model → Namespace (published as status.constraints.modelScope)."""
    return ModelScope.CLUSTER if kind is ModelKind.CLUSTER_MODEL else ModelScope.NAMESPACE


def served_model_name(facts: ModelFacts, ref: ModelRef) -> str:
    """The name the runtime serves: the catalog's servedName, else the name of the reference."""
    return facts.servedName or ref.name


def lookup_namespace(ref: ModelRef, order_namespace: str) -> str | None:
    """Namespace to look a Model up in: its own, else the order's. A ClusterModel has none."""
    if ref.kind is ModelKind.CLUSTER_MODEL:
        return None
    return ref.namespace or order_namespace


def describe_ref(kind: ModelKind, name: str, namespace: str | None) -> str:
    return f'{kind.value} "{name}"' + (f' in namespace "{namespace}"' if namespace else "")


def result_from_object(kind: ModelKind, obj: Mapping[str, Any]) -> CatalogLookupAnswer:
    """A Model / ClusterModel object as the lookup answer REST would have returned for it."""
    metadata = obj.get("metadata") or {}
    spec = CatalogModelSpec.model_validate(obj.get("spec") or {})
    status = CatalogModelStatus.model_validate(obj.get("status") or {})
    return CatalogLookupAnswer(
        kind=kind.value,
        name=str(metadata.get("name", "")),
        namespace=metadata.get("namespace"),
        ready=status.phase is ModelPhase.READY,
        scope=model_scope(kind),
        facts=status.facts or ModelFacts(),
        source=spec.source,
    )


def outcome_from_result(
    result: CatalogLookupResult | None,
    ref: ModelRef,
    namespace: str | None,
    settings: ModuleSettings,
    answered_by: CatalogPath,
    rest_unavailable: str | None = None,
) -> CatalogOutcome:
    """The verdict on a lookup answer (None: the model does not exist). No I/O."""
    assert ref.kind is not None  # callers pass catalog references only
    what = describe_ref(ref.kind, ref.name, namespace)
    common: dict[str, Any] = {"answeredBy": answered_by, "restUnavailable": rest_unavailable}
    if result is None:
        hint = (
            " A Model reference without ref.namespace is looked up in the order's namespace."
            if ref.kind is ModelKind.MODEL
            else ""
        )
        check = f"Check spec.model.ref (kind, name, namespace) against the catalog.{hint}"
        if rest_unavailable is not None:
            # Only the objects were asked: the lookup service, which may know the model, did not
            # answer. Not a final answer, so the order looks again (the message never carries a token:
            # ``rest_unavailable`` names the failure, not the request).
            requeue = settings.aiModels.catalogLookup.notReadyRequeueSeconds
            return CatalogOutcome(
                reason=Reason.MODEL_NOT_FOUND,
                message=f"{what} is not among the catalog's objects, and the ai-models lookup service did "
                f"not answer ({rest_unavailable[:200]}); the order looks again in {requeue:g}s. {check}",
                requeueAfterSeconds=requeue,
                **common,
            )
        return CatalogOutcome(
            reason=Reason.MODEL_NOT_FOUND,
            message=f"{what} does not exist in the ai-models catalog. {check}",
            **common,
        )
    if not result.ready:
        requeue = settings.aiModels.catalogLookup.notReadyRequeueSeconds
        return CatalogOutcome(
            reason=Reason.MODEL_NOT_READY,
            message=f"{what} is not ready in the ai-models catalog yet; "
            f"the order looks again in {requeue:g}s and proceeds once it is ready.",
            requeueAfterSeconds=requeue,
            **common,
        )
    return CatalogOutcome(
        resolved=ResolvedCatalogModel(
            kind=ref.kind,
            name=ref.name,
            # The kind of the reference decides the scope, whatever a lookup body claims.
            scope=model_scope(ref.kind),
            servedName=served_model_name(result.facts, ref),
            source=result.source if isinstance(result, CatalogLookupAnswer) else None,
            facts=result.facts,
        ),
        message=f"{what} resolved from the ai-models catalog.",
        **common,
    )


def model_resolution(outcome: CatalogOutcome, ref: ModelRef) -> ModelResolution:
    """The resolve-model activity's payload for the order workflow, from a catalog outcome."""
    if outcome.resolved is None:
        return ModelResolution(
            servedName=ref.name,
            refusal=outcome.reason,
            message=outcome.message,
            retryAfterSeconds=outcome.requeueAfterSeconds,
        )
    resolved = outcome.resolved
    return ModelResolution(
        facts=resolved.facts,
        scope=resolved.scope,
        servedName=resolved.servedName,
        source=resolved.source,
        message=outcome.message,
    )


def catalog_not_installed_outcome(
    ref: ModelRef, namespace: str | None, settings: ModuleSettings, rest_unavailable: str | None = None
) -> CatalogOutcome:
    """catalog.mode Enabled, and the ai-models module is not installed: the order looks again."""
    assert ref.kind is not None
    requeue = settings.aiModels.catalogLookup.notReadyRequeueSeconds
    return CatalogOutcome(
        reason=Reason.CATALOG_NOT_INSTALLED,
        message=f"the ai-models module is not installed: its Model and ClusterModel kinds are not served "
        f"({CATALOG_GROUP}/{CATALOG_VERSION}), so {describe_ref(ref.kind, ref.name, namespace)} cannot be "
        f"looked up. The order looks again in {requeue:g}s and proceeds once ai-models is installed; ask "
        "your administrator to install it, or order the model from a direct source (src: HuggingFace).",
        requeueAfterSeconds=requeue,
        answeredBy=CatalogPath.KUBERNETES,
        restUnavailable=rest_unavailable,
    )


def catalog_disabled_outcome(ref: ModelRef) -> CatalogOutcome:
    return CatalogOutcome(
        reason=Reason.CATALOG_DISABLED,
        message=f"Catalog integration is off in the module settings (catalog.mode: None) and this order "
        f'names a catalog model (src: ai-models, {ref.kind} "{ref.name}"). Use a direct source '
        "(src: HuggingFace) or ask the administrator to set catalog.mode: Enabled.",
        answeredBy=CatalogPath.NONE,
    )


# ----------------------------------------------------------------------------- REST


class _RestUnavailableError(Exception):
    """REST gave no usable answer; carries why, for the log line and the outcome."""


class _RestNotFoundError(Exception):
    """REST said the model does not exist."""


def rest_lookup_params(kind: ModelKind, name: str, namespace: str | None) -> dict[str, str]:
    params = {"kind": kind.value, "name": name}
    if namespace is not None:
        params["namespace"] = namespace
    return params


def default_http_client(settings: ModuleSettings) -> httpx.AsyncClient:
    """An httpx client for the lookup API: the service account's CA when in a pod, and the projected
    token bound to the catalog's audience when its file exists (outside a pod it does not).

    Raises ``TokenUnavailableError`` for a token bound to another audience (it is not sent)."""
    lookup = settings.aiModels.catalogLookup
    verify: ssl.SSLContext | bool = True
    headers: dict[str, str] = {}
    ca = SERVICE_ACCOUNT_DIR / "ca.crt"
    token_file = Path(lookup.tokenFile)
    if ca.is_file():
        context = ssl.create_default_context()
        # Keep the public roots too: an administrator may point baseURL at a publicly signed endpoint.
        context.load_verify_locations(cafile=str(ca))
        verify = context
    if token_file.is_file():
        # Sent as a header only; never logged (the client is not configured to log headers).
        headers["Authorization"] = "Bearer " + read_audience_token(token_file, lookup.audience, "catalog lookup")
    return httpx.AsyncClient(timeout=lookup.timeoutSeconds, verify=verify, headers=headers)


async def _rest_lookup(
    client: httpx.AsyncClient,
    settings: ModuleSettings,
    kind: ModelKind,
    name: str,
    namespace: str | None,
) -> CatalogLookupAnswer:
    lookup = settings.aiModels.catalogLookup
    try:
        require_https(
            lookup.baseURL,
            "aiModels.catalogLookup.baseURL",
            lookup.allowInsecureHttp,
            "aiModels.catalogLookup.allowInsecureHttp",
        )
    except InsecureTransportError as err:
        raise _RestUnavailableError(str(err)) from None
    url = lookup.baseURL.rstrip("/") + lookup.path
    try:
        # httpx times each phase separately; this bounds the whole exchange by timeoutSeconds.
        async with asyncio.timeout(lookup.timeoutSeconds):
            response = await client.get(url, params=rest_lookup_params(kind, name, namespace))
    except TimeoutError as err:
        raise _RestUnavailableError(f"timed out: no answer within {lookup.timeoutSeconds:g}s") from err
    except httpx.TimeoutException as err:
        raise _RestUnavailableError(f"timed out ({type(err).__name__}) within {lookup.timeoutSeconds:g}s") from err
    except httpx.HTTPError as err:
        raise _RestUnavailableError(f"{type(err).__name__}: {err}") from err

    if response.status_code == 404:
        # Only a 404 that is the lookup's own verdict counts as "not found". A bare 404 (a proxy,
        # or an ai-models without this API) says nothing about the model: let the objects decide.
        if _is_not_found_body(response):
            raise _RestNotFoundError
        raise _RestUnavailableError("HTTP 404 without a ModelNotFound body: is the lookup path served?")
    if response.status_code != 200:
        raise _RestUnavailableError(f"HTTP {response.status_code}")
    try:
        result = CatalogLookupAnswer.model_validate_json(response.content)
    except ValidationError as err:
        raise _RestUnavailableError(f"malformed lookup body ({err.error_count()} errors)") from err
    if result.kind != kind.value or result.name != name:
        # A wrong model's facts are worse than none: never let them judge the order.
        raise _RestUnavailableError(f"answer names {result.kind}/{result.name}, not {kind.value}/{name}")
    return result


def _is_not_found_body(response: httpx.Response) -> bool:
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("reason") == Reason.MODEL_NOT_FOUND.value


# ---------------------------------------------------------------------- the lookup


async def _read_objects(
    reader: CatalogObjectReader, kind: ModelKind, name: str, namespace: str | None
) -> CatalogLookupAnswer | None:
    try:
        obj = await asyncio.to_thread(reader.read_model, kind, name, namespace)
    except CatalogReadError as err:
        log.warning("catalog object read failed", error=str(err), kind=kind.value, name=name, namespace=namespace)
        raise CatalogUnavailableError(
            f"cannot read {describe_ref(kind, name, namespace)} from the API server: {err}"
        ) from err
    return None if obj is None else result_from_object(kind, obj)


async def lookup_model(
    ref: ModelRef,
    order_namespace: str,
    settings: ModuleSettings,
    reader: CatalogObjectReader | None,
    *,
    http_client: httpx.AsyncClient | None = None,
) -> CatalogOutcome:
    """Facts of a catalog model for an order in ``order_namespace``, or the Reason it has none.

    ``reader`` reads the Model / ClusterModel objects (the Kubernetes transport and the REST
    fallback); it may be None only with catalog.mode None. ``http_client`` is for tests and
    connection reuse; by default one is made per call.

    Raises CatalogUnavailableError when no path could answer (retry later), ValueError for a
    reference that is not a catalog one (a Hugging Face order must not come here).
    """
    if ref.kind is None:
        raise ValueError("lookup_model takes catalog references (kind Model or ClusterModel) only")
    if settings.catalog.mode is CatalogMode.NONE:
        # No client at all: no HTTP, no object read, no permissions needed.
        outcome = catalog_disabled_outcome(ref)
        log.info("catalog lookup refused", reason=outcome.reason, kind=ref.kind, name=ref.name)
        return outcome
    if reader is None:
        raise ValueError("catalog.mode Enabled needs an object reader (the Kubernetes transport and fallback)")

    kind = ref.kind
    namespace = lookup_namespace(ref, order_namespace)
    fields = {"kind": kind.value, "name": ref.name, "namespace": namespace}

    if settings.aiModels.catalogTransport is CatalogTransport.KUBERNETES:
        try:
            result = await _read_objects(reader, kind, ref.name, namespace)
        except CatalogNotInstalledError:
            outcome = catalog_not_installed_outcome(ref, namespace, settings)
        else:
            outcome = outcome_from_result(result, ref, namespace, settings, CatalogPath.KUBERNETES)
        log.info("catalog lookup answered", answered_by=CatalogPath.KUBERNETES, outcome=_summary(outcome), **fields)
        return outcome

    try:
        if http_client is None:
            try:
                own_client = default_http_client(settings)
            except OSError as err:  # an unreadable or invalid CA bundle: REST cannot be asked
                raise _RestUnavailableError(f"cannot set up the HTTP client: {type(err).__name__}: {err}") from err
            except TokenUnavailableError as err:  # names the file and audiences, never the token
                raise _RestUnavailableError(f"cannot set up the HTTP client: {err}") from None
            async with own_client as client:
                rest_result = await _rest_lookup(client, settings, kind, ref.name, namespace)
        else:
            rest_result = await _rest_lookup(http_client, settings, kind, ref.name, namespace)
    except _RestNotFoundError:
        outcome = outcome_from_result(None, ref, namespace, settings, CatalogPath.REST)
    except _RestUnavailableError as err:
        why = str(err)
        log.warning("catalog REST lookup unavailable; reading the catalog object instead", why=why, **fields)
        try:
            result = await _read_objects(reader, kind, ref.name, namespace)
        except CatalogNotInstalledError:
            outcome = catalog_not_installed_outcome(ref, namespace, settings, why)
        else:
            outcome = outcome_from_result(result, ref, namespace, settings, CatalogPath.KUBERNETES, why)
    else:
        outcome = outcome_from_result(rest_result, ref, namespace, settings, CatalogPath.REST)
    log.info(
        "catalog lookup answered",
        answered_by=outcome.answeredBy,
        rest_unavailable=outcome.restUnavailable,
        outcome=_summary(outcome),
        **fields,
    )
    return outcome


def _summary(outcome: CatalogOutcome) -> str:
    return "Resolved" if outcome.reason is None else outcome.reason.value


# ------------------------------------------------------------------ the real reader


class KubernetesCatalogReader:
    """CatalogObjectReader over the official ``kubernetes`` client (blocking)."""

    def __init__(self, api_client: Any, request_timeout_seconds: float = 10) -> None:
        from kubernetes.client import CustomObjectsApi

        self._api = CustomObjectsApi(api_client)
        self._timeout = request_timeout_seconds

    def read_model(self, kind: ModelKind, name: str, namespace: str | None) -> Mapping[str, Any] | None:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError as Urllib3Error

        plural = PLURALS[kind]
        try:
            if kind is ModelKind.CLUSTER_MODEL:
                obj = self._api.get_cluster_custom_object(
                    CATALOG_GROUP, CATALOG_VERSION, plural, name, _request_timeout=self._timeout
                )
            else:
                if namespace is None:
                    raise CatalogReadError("a Model is namespaced: no namespace given")
                obj = self._api.get_namespaced_custom_object(
                    CATALOG_GROUP, CATALOG_VERSION, namespace, plural, name, _request_timeout=self._timeout
                )
        except ApiException as err:
            if err.status == 404:
                # No such model, or no such kind at all: discovery tells which.
                if not self.kind_served(plural):
                    raise CatalogNotInstalledError(
                        f"{CATALOG_GROUP}/{CATALOG_VERSION} {plural} is not served"
                    ) from None
                return None
            # Status and reason only: the body and headers of an API error are not ours to log.
            raise CatalogReadError(f"HTTP {err.status} {err.reason}") from err
        except (Urllib3Error, OSError) as err:
            raise CatalogReadError(f"{type(err).__name__}: {err}") from err
        if not isinstance(obj, dict):
            raise CatalogReadError(f"unexpected answer type {type(obj).__name__}")
        return obj

    def kind_served(self, plural: str) -> bool:
        """Whether the API server serves ``plural`` of the catalog's group and version (discovery:
        ``GET /apis/ai-models.deckhouse.io/v1alpha1``, which every authenticated identity may read)."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError as Urllib3Error

        try:
            found = self._api.get_api_resources(CATALOG_GROUP, CATALOG_VERSION, _request_timeout=self._timeout)
        except ApiException as err:
            if err.status == 404:
                return False
            raise CatalogReadError(f"discovery of {CATALOG_GROUP}/{CATALOG_VERSION}: HTTP {err.status}") from err
        except (Urllib3Error, OSError) as err:
            raise CatalogReadError(f"discovery: {type(err).__name__}: {err}") from err
        return any(resource.name == plural for resource in found.resources or [])
