"""``ai-inference crds --apply``: the module's CRDs, generated from the installed package, applied to
the cluster — what the chart's pre-upgrade hook runs (Helm installs ``crds/`` but never upgrades it).

Per CRD: read it; when it already is the generated one, nothing. Otherwise server-side apply it (the
module's field manager, forcing conflicts). Server-side apply only removes what its own manager set
before, so a field that an earlier install wrote (``helm install`` creates ``crds/`` as manager
``helm``) and the generated CRD no longer has would stay: when the applied object still differs, its
spec is replaced with the generated one (an update, with the resourceVersion just read).

Verbs: ``get``, ``patch`` and ``update`` on the two CRDs (``create`` too when one is missing).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

from inference_api.crd import MODULE_CRDS, build_crd

CRD_API_VERSION = "apiextensions.k8s.io/v1"
CRD_KIND = "CustomResourceDefinition"
CRD_RESOURCE = "customresourcedefinitions.apiextensions.k8s.io"
# What the API server fills into every CRD spec it stores (apiextensions v1 defaulting).
SERVER_DEFAULTS: dict[str, Any] = {"conversion": {"strategy": "None"}}


def module_crds() -> list[dict[str, Any]]:
    """The module's two CRDs, built from the API types of the installed package (no files read)."""
    return [build_crd(spec) for spec in MODULE_CRDS]


def as_stored(crd: dict[str, Any]) -> dict[str, Any]:
    """The spec of ``crd`` as the API server stores it (its defaults filled in)."""
    spec = copy.deepcopy(crd["spec"])
    for key, value in SERVER_DEFAULTS.items():
        spec.setdefault(key, copy.deepcopy(value))
    return spec


def is_current(server: dict[str, Any] | None, generated: dict[str, Any]) -> bool:
    """Whether the CRD read from the server is the generated one: the same spec (server defaults
    aside) and the generated labels."""
    if server is None:
        return False
    labels = (server.get("metadata") or {}).get("labels") or {}
    wanted = generated["metadata"].get("labels") or {}
    return server.get("spec") == as_stored(generated) and all(labels.get(k) == v for k, v in wanted.items())


class RefusedError(Exception):
    """The API server answered 403: the message names the verb and the CRD the caller may not touch."""


def server_message(status_body: str | bytes | None) -> str:
    """The ``message`` of a Status body (never the request, never credentials)."""
    if not status_body:
        return ""
    try:
        message = json.loads(status_body).get("message")
    except (ValueError, AttributeError):
        return ""
    return str(message or "")


def refusal(verb: str, name: str, status_body: str | bytes | None) -> str:
    """One line for a 403: which verb on which CRD is missing, and who asked (from the server's Status).

    The server names the verb it refused ("cannot create resource ..." when a patch would have
    created a missing CRD); that wins over the verb the request was sent as.
    """
    message = server_message(status_body)
    refused = re.search(r"cannot (\w+) resource", message)
    user = re.search(r'User "([^"]+)"', message)
    who = user.group(1) if user else "the caller"
    return (
        f"refused (403 Forbidden): {who} may not {refused.group(1) if refused else verb} "
        f"{CRD_RESOURCE} {name!r}; the CRD upgrade needs get, patch and update on {CRD_RESOURCE} "
        f"named {', '.join(repr(c['metadata']['name']) for c in module_crds())}"
    )


@dataclass(frozen=True)
class CrdClient:
    """The three calls the upgrade makes; each raises the client's exception with ``status`` on an error
    answer (kept abstract so the decision logic is testable without a server)."""

    get: Callable[[str], dict[str, Any] | None]
    apply: Callable[[dict[str, Any]], dict[str, Any]]
    replace: Callable[[dict[str, Any]], dict[str, Any]]


def upgrade(client: CrdClient, crds: Iterable[dict[str, Any]]) -> list[str]:
    """Bring each CRD to its generated form; returns one line per CRD saying what was done.

    Raises :class:`RefusedError` on a 403 (with the verb and name), the client's exception otherwise.
    """
    done = []
    for crd in crds:
        name = crd["metadata"]["name"]
        current = _call("get", name, partial(client.get, name))
        if is_current(current, crd):
            done.append(f"{name}: up to date")
            continue
        applied = _call("patch", name, partial(client.apply, crd))
        if is_current(applied, crd):
            done.append(f"{name}: applied (server-side)")
            continue
        # Fields set by another manager that the generated CRD no longer has: replace the spec.
        # The managed fields are left to the server (it drops the removed fields from every manager's set).
        replacement = {k: copy.deepcopy(v) for k, v in applied.items() if k != "status"}
        replacement["metadata"] = {k: v for k, v in replacement["metadata"].items() if k != "managedFields"}
        replacement["spec"] = copy.deepcopy(crd["spec"])
        replaced = _call("update", name, partial(client.replace, replacement))
        if not is_current(replaced, crd):
            raise RuntimeError(f"{name}: the server keeps a spec other than the generated one after an update")
        done.append(f"{name}: applied (server-side), spec replaced (fields the generated CRD no longer has)")
    return done


def _call(verb: str, name: str, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except Exception as err:
        if int(getattr(err, "status", 0) or 0) == 403:
            raise RefusedError(refusal(verb, name, getattr(err, "body", None))) from None
        raise


def kube_client(api: Any, field_manager: str) -> CrdClient:
    """A :class:`CrdClient` over a ``kubernetes`` ApiClient (server-side apply as ``field_manager``)."""
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import NotFoundError

    from activities.kube import discovered_resource, server_side_apply

    dynamic = DynamicClient(api)
    resource = discovered_resource(dynamic, CRD_API_VERSION, CRD_KIND)

    def get(name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = resource.get(name=name).to_dict()
        except NotFoundError:
            return None
        return found

    def apply(crd: dict[str, Any]) -> dict[str, Any]:
        applied: dict[str, Any] = server_side_apply(dynamic, crd, field_manager).to_dict()
        return applied

    def replace(crd: dict[str, Any]) -> dict[str, Any]:
        replaced: dict[str, Any] = resource.replace(body=crd, field_manager=field_manager).to_dict()
        return replaced

    return CrdClient(get=get, apply=apply, replace=replace)
