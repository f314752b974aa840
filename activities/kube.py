"""Kubernetes access for activities: one ApiClient, server-side apply with one field manager."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Generator, Iterator
from typing import Any
from urllib.parse import urlsplit

import urllib3
from kubernetes import client, config
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import DynamicApiError, ResourceNotFoundError
from kubernetes.watch.watch import iter_resp_lines
from opentelemetry import trace
from prometheus_client import Counter
from temporalio.exceptions import ApplicationError

from activities.builders.common import FIELD_MANAGER
from inference_api import DISTRIBUTION, package_version
from inference_api.reasons import Reason

KUBERNETES_REQUESTS = Counter(
    "ai_inference_kubernetes_requests",
    "Requests this process sent the Kubernetes API server, by verb (apply: a server-side apply) and resource.",
    ["verb", "resource"],
)

# Every request is bounded (connect, read; seconds): an API server, or a proxy in front of it, that never
# answers fails the call, instead of holding an activity's thread (the worker has 16) or the observer's
# forever. The read bound is under the activities' 30 s start-to-close. A call that passes its own
# _request_timeout (a watch) keeps it.
REQUEST_TIMEOUT = (10.0, 20.0)
# A refused or reset connection is tried again; a request that was sent and not answered is not (the
# activity's retry policy decides, and a write may have landed).
RETRIES = urllib3.Retry(total=3, read=0)


def user_agent(component: str) -> str:
    """What this process calls itself to the API server (``ai-inference-worker/0.9.0``): an audit log,
    or an API server's per-client throttling, tells the module's processes apart, as kube-controller-
    manager's controllers are told apart by theirs."""
    return f"{DISTRIBUTION}-{component}/{package_version()}"


def load_api_client(kubeconfig: str | None = None, component: str = "cli") -> ApiClient:
    """In-cluster config inside a pod, else the kubeconfig (KUBECONFIG or the given path); requests
    name ``component`` in their User-Agent (``user_agent``)."""
    configuration = client.Configuration()
    loaded = False
    if kubeconfig is None:
        try:
            config.load_incluster_config(client_configuration=configuration)
            loaded = True
        except config.ConfigException:
            pass
    if not loaded:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    configuration.retries = RETRIES
    api = ApiClient(configuration)
    api.user_agent = user_agent(component)
    return bounded(api)


def request_span_name(method: str, url: str, headers: Any = None) -> tuple[str, dict[str, Any]]:
    """The span of one API request: ``kubernetes <verb> <resource>`` (``apply`` for a server-side
    apply) and its attributes: the method, the path (no query: a selector is no secret, but keep it
    short), the namespace. Never a body or a header's value."""
    path = urlsplit(url).path
    parts = [part for part in path.split("/") if part]
    verb = method.upper()
    content_type = str((headers or {}).get("Content-Type", ""))
    if verb == "PATCH" and "apply-patch" in content_type:
        verb = "apply"
    namespace = None
    resource = parts[-1] if parts else ""
    # /api/v1/..., /apis/<group>/<version>/...: the resource is the plural after the version, or after
    # namespaces/<namespace>; a name (and a subresource) may follow it.
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if len(rest) >= 2 and rest[0] == "namespaces":
        namespace = rest[1]
        rest = rest[2:] or ["namespaces"]
    if parts[:1] not in (["api"], ["apis"]) or (parts[:1] == ["apis"] and len(parts) <= 3 and not namespace):
        resource = "version" if parts == ["version"] else "discovery"
    elif parts[:1] == ["api"] and len(parts) <= 2:
        resource = "discovery"
    elif rest:
        resource = rest[0] if len(rest) < 3 else f"{rest[0]}/{rest[2]}"
    attributes: dict[str, Any] = {"http.request.method": method.upper(), "url.path": path, "k8s.resource": resource}
    if namespace:
        attributes["k8s.namespace.name"] = namespace
    return f"kubernetes {verb.lower()} {resource}", attributes


def bounded(api: ApiClient, timeout: tuple[float, float] = REQUEST_TIMEOUT) -> ApiClient:
    """``api`` with ``timeout`` on every request that names none (the client's own default is none),
    and a span around each request made within a traced operation (an activity, the observer's
    delivery: docs/tracing.md); outside one, no span (the observer's watches would be traces of their own)."""
    rest = api.rest_client
    request = rest.request
    if getattr(request, "bounded", False):
        # Already bounded (two users of one client): wrapped twice, each request would count twice.
        return api
    tracer = trace.get_tracer("ai-inference.kubernetes")

    def timed(
        method: str,
        url: str,
        headers: Any = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> Any:
        def send() -> Any:
            return request(
                method,
                url,
                headers=headers,
                body=body,
                post_params=post_params,
                _request_timeout=_request_timeout or timeout,
            )

        name, attributes = request_span_name(method, url, headers)
        # What each module process asks of the API server (controller-runtime's rest_client_requests_total):
        # the requests an order costs, by verb and resource, on the process's /metrics.
        KUBERNETES_REQUESTS.labels(name.split(" ", 2)[1], attributes["k8s.resource"]).inc()
        if not trace.get_current_span().is_recording():
            return send()
        with tracer.start_as_current_span(name, kind=trace.SpanKind.CLIENT, attributes=attributes) as span:
            try:
                response = send()
            except ApiException as err:
                span.set_attribute("http.response.status_code", int(err.status or 0))
                raise
            span.set_attribute("http.response.status_code", int(getattr(response, "status", 0) or 0))
            return response

    timed.bounded = True  # type: ignore[attr-defined]
    rest.request = timed
    return api


def discovered_resource(dynamic: DynamicClient, api_version: str, kind: str) -> Any:
    """The dynamic client's resource for a kind; discovery is refreshed once on a miss."""
    try:
        return dynamic.resources.get(api_version=api_version, kind=kind)
    except ResourceNotFoundError:
        # A CRD created a moment ago may not be in the discovery cache yet.
        dynamic.resources.invalidate_cache()
        return dynamic.resources.get(api_version=api_version, kind=kind)


def server_side_apply(
    dynamic: DynamicClient, obj: dict[str, Any], field_manager: str, subresource: str | None = None
) -> Any:
    """Server-side apply one plain dict, forcing conflicts: this manager owns what it sets."""
    resource = discovered_resource(dynamic, obj["apiVersion"], obj["kind"])
    if subresource:
        resource = resource.subresources[subresource]
    return dynamic.server_side_apply(
        resource,
        body=obj,
        name=obj["metadata"]["name"],
        namespace=obj["metadata"].get("namespace"),
        field_manager=field_manager,
        force_conflicts=True,
    )


# Answers retrying cannot change: the object is invalid, or a policy forbids it.
FINAL_STATUSES = {403: "Forbidden", 422: "Invalid"}
# A condition message has room for 32 KiB; the server's answer is cut well before that.
MAX_REFUSAL_MESSAGE = 1024


@contextlib.contextmanager
def refusals_are_final() -> Iterator[None]:
    """Turn a 403/422 from the API server into a non-retryable activity error carrying its message.

    The workflow shows it as WorkloadReady=False/WorkloadRefused and waits for a change instead of
    retrying an answer that cannot change.
    """
    try:
        yield
    except (ApiException, DynamicApiError) as err:
        status = int(getattr(err, "status", 0) or 0)
        if status not in FINAL_STATUSES:
            raise
        raise ApplicationError(
            f"the API server refused the workload ({status} {FINAL_STATUSES[status]}): {_server_message(err)}",
            type=str(Reason.WORKLOAD_REFUSED),
            non_retryable=True,
        ) from None


def _server_message(err: Exception) -> str:
    """The ``message`` of the server's Status (never the request: it may carry a Secret's data)."""
    body = getattr(err, "body", None)
    message = ""
    if body:
        try:
            message = str(json.loads(body).get("message") or "")
        except (ValueError, AttributeError):
            message = ""
    message = message or str(getattr(err, "reason", "") or type(err).__name__)
    return message if len(message) <= MAX_REFUSAL_MESSAGE else message[: MAX_REFUSAL_MESSAGE - 1] + "…"


class Applier:
    """Server-side apply of plain dicts; discovery is cached and refreshed once on a miss."""

    def __init__(self, api: ApiClient, field_manager: str = FIELD_MANAGER) -> None:
        self._api = api
        self._field_manager = field_manager
        self._dynamic: DynamicClient | None = None
        self._lock = threading.Lock()

    @property
    def dynamic(self) -> DynamicClient:
        with self._lock:
            if self._dynamic is None:
                self._dynamic = DynamicClient(self._api)
            return self._dynamic

    def resource(self, api_version: str, kind: str) -> Any:
        return discovered_resource(self.dynamic, api_version, kind)

    def apply(self, obj: dict[str, Any], subresource: str | None = None) -> Any:
        return server_side_apply(self.dynamic, obj, self._field_manager, subresource)

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        from kubernetes.dynamic.exceptions import NotFoundError

        try:
            found = self.resource(api_version, kind).get(name=name, namespace=namespace)
        except NotFoundError:
            return None
        result: dict[str, Any] = found.to_dict()
        return result

    def delete(
        self, api_version: str, kind: str, name: str, namespace: str | None = None, uid: str | None = None
    ) -> bool:
        """Delete one object; with ``uid``, only that very object (``preconditions.uid``): one made again
        under the same name meanwhile is left alone. False when nothing was deleted."""
        from kubernetes.dynamic.exceptions import ConflictError, NotFoundError

        body = {"preconditions": {"uid": uid}} if uid else None
        try:
            self.resource(api_version, kind).delete(name=name, namespace=namespace, body=body)
        except NotFoundError:
            return False
        except ConflictError:
            if uid is None:
                raise
            return False  # the precondition failed: another object stands under that name now
        return True


def watch_events(response: Any) -> Generator[dict[str, Any]]:
    """The events of a watch response (a list call with ``watch=True, _preload_content=False``), as
    plain JSON; the connection is closed and given back when the iteration ends, however it ends."""
    try:
        for line in iter_resp_lines(response):
            if line:
                yield json.loads(line)
    finally:
        response.close()
        response.release_conn()
