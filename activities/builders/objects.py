"""Every object of an order, in the order they are applied; and the standing-volume divergence.

Apply order, and why:
1. ``{order}-auth`` Secret (create-only) — the runtime's ``secretKeyRef`` must resolve, or the
   container sits in CreateContainerConfigError;
2. ``{order}-tls`` copy of a custom certificate — before the Ingress that names it;
3. NetworkPolicy — before any pod exists, so no replica is ever reachable from everywhere;
4. ResourceClaimTemplate — pods made without it cannot get their claims and stay unschedulable;
5. Service — the Ingress backend;
6. StatefulSet — the replicas;
7. HorizontalPodAutoscaler — its scale target now exists;
8. Ingress — last, so the endpoint is published only when everything behind it is in place.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from activities.builders.auth import build_auth_secret, requires_token
from activities.builders.autoscaling import build_autoscaler
from activities.builders.claim import RESOURCE_API_VERSION, build_claim_template
from activities.builders.common import (
    ANNOTATION_PRUNED_FOR,
    LABEL_MANAGED_BY,
    LABEL_ORDER,
    MANAGED_BY,
    MODEL_VOLUME,
    ObjectNames,
    WorkloadInputs,
)
from activities.builders.exposure import build_ingress, build_tls_secret_copy, custom_certificate_source
from activities.builders.network_policy import build_network_policy
from activities.builders.service import build_service
from activities.builders.statefulset import build_model_cache_claim, build_statefulset
from inference_api.types import InferenceServiceClass


@dataclass(frozen=True)
class DesiredObject:
    """One object to apply. ``create_only``: create when absent, never update (the auth Secret).

    ``body`` is left out of ``repr`` so logging a DesiredObject can never print a Secret's data.
    """

    api_version: str
    kind: str
    name: str
    namespace: str
    body: dict[str, Any] = field(repr=False)
    create_only: bool = False


def _desired(body: dict[str, Any], create_only: bool = False) -> DesiredObject:
    meta = body["metadata"]
    return DesiredObject(body["apiVersion"], body["kind"], meta["name"], meta["namespace"], body, create_only)


def desired_objects(
    inputs: WorkloadInputs,
    auth_token: str | None = None,
    custom_certificate: Mapping[str, Any] | None = None,
) -> list[DesiredObject]:
    """All objects of the order, in apply order.

    ``auth_token``: a fresh ``new_token()`` when the class asks for a token; the Secret comes
    back ``create_only``, so an existing one (and the token its clients hold) is kept. Pass None
    when the caller already knows the Secret exists; it is then left out.
    ``custom_certificate``: the administrator's Secret as read from
    ``custom_certificate_source(...)``, for a CustomCertificate class; without it the copy is
    left out and the Ingress still names ``{order}-tls``. A Secret the administrator did not
    mark for copying (``exposure.certificate_copy_allowed``) is a ValueError: the caller refuses
    the workload before it gets here.
    """
    objects: list[DesiredObject] = []
    if auth_token is not None:
        secret = build_auth_secret(inputs, auth_token)
        if secret is not None:
            objects.append(_desired(secret, create_only=True))
    if custom_certificate is not None and custom_certificate_source(inputs.service_class, inputs.settings):
        objects.append(_desired(build_tls_secret_copy(inputs, custom_certificate)))
    cache = build_model_cache_claim(inputs)
    if cache is not None:  # the namespace's, shared: made once, never changed or pruned by an order
        objects.append(_desired(cache, create_only=True))
    objects.append(_desired(build_network_policy(inputs)))
    objects.append(_desired(build_claim_template(inputs)))
    objects.append(_desired(build_service(inputs)))
    objects.append(_desired(build_statefulset(inputs)))
    autoscaler = build_autoscaler(inputs)
    if autoscaler is not None:
        objects.append(_desired(autoscaler))
    ingress = build_ingress(inputs)
    if ingress is not None:
        objects.append(_desired(ingress))
    return objects


# Every kind an order may own, as (apiVersion, kind): what the prune step lists by the order's label.
OWNED_KINDS: tuple[tuple[str, str], ...] = (
    ("v1", "Secret"),
    (RESOURCE_API_VERSION, "ResourceClaimTemplate"),
    ("v1", "Service"),
    ("apps/v1", "StatefulSet"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"),
    ("networking.k8s.io/v1", "Ingress"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
)


def wanted_names(
    desired: list[DesiredObject], service_class: InferenceServiceClass, names: ObjectNames
) -> set[tuple[str, str]]:
    """(kind, name) of everything the order should own now.

    The auth Secret is wanted while the class asks for a token even when it is left out of
    ``desired`` (it exists, and is never rewritten).
    """
    wanted = {(d.kind, d.name) for d in desired}
    if requires_token(service_class):
        wanted.add(("Secret", names.auth_secret))
    return wanted


def wanted_set_digest(wanted: set[tuple[str, str]], release: str) -> str:
    """What a prune leaves standing, as one value: the (kind, name) set and the release (an upgrade may
    name objects otherwise, so its first apply prunes)."""
    text = json.dumps([release, sorted(wanted)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def possible_names(names: ObjectNames) -> set[tuple[str, str]]:
    """(kind, name) of everything this release's builders can make for an order, wanted or not."""
    return {
        ("Secret", names.auth_secret),
        ("Secret", names.tls_secret),
        ("ResourceClaimTemplate", names.claim_template),
        ("Service", names.service),
        ("StatefulSet", names.statefulset),
        ("HorizontalPodAutoscaler", names.autoscaler),
        ("Ingress", names.ingress),
        ("NetworkPolicy", names.network_policy),
    }


def with_annotation(body: Mapping[str, Any], key: str, value: str) -> dict[str, Any]:
    """``body`` with one more annotation on its metadata (a copy: the built object is left as built)."""
    meta = dict(body.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), key: value}
    return {**body, "metadata": meta}


def pruned_set_digest(statefulset: Mapping[str, Any] | None) -> str | None:
    """The digest the last finished prune recorded on the order's StatefulSet (None: none recorded)."""
    value = (((statefulset or {}).get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_PRUNED_FOR)
    return str(value) if value else None


def unwanted_objects(
    standing: Sequence[Mapping[str, Any]], wanted: set[tuple[str, str]], order_name: str, order_uid: str
) -> list[tuple[str, str, str]]:
    """(apiVersion, kind, name) of standing objects the order owns and no longer wants.

    Only what this module made for this very order is ever pruned: the module's managed-by and
    order labels, and the order (by uid) as controller owner. A user's own Secret in the same
    namespace (the Hugging Face token) carries neither and is never touched.
    """
    out = []
    for obj in standing:
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        if labels.get(LABEL_MANAGED_BY) != MANAGED_BY or labels.get(LABEL_ORDER) != order_name:
            continue
        owners = meta.get("ownerReferences") or []
        if not any(o.get("uid") == order_uid and o.get("controller") for o in owners):
            continue
        if (obj.get("kind"), meta.get("name")) in wanted:
            continue
        out.append((str(obj.get("apiVersion")), str(obj.get("kind")), str(meta.get("name"))))
    return out


def standing_storage_class(standing_statefulset: Mapping[str, Any]) -> str | None:
    """The StorageClass the standing model volume template names (None: the cluster default)."""
    for template in (standing_statefulset.get("spec") or {}).get("volumeClaimTemplates") or []:
        if (template.get("metadata") or {}).get("name") == MODEL_VOLUME:
            value = (template.get("spec") or {}).get("storageClassName")
            return str(value) if value else None
    return None


def storage_class_kept(
    standing_statefulset: Mapping[str, Any] | None, service_class: InferenceServiceClass
) -> tuple[str | None, str] | None:
    """(standing, wanted) when the class names another StorageClass than the standing volume has.

    That is the SettledRegionKept event: the standing claim template is kept (the builders
    re-apply it verbatim) and the divergence is recorded on the order. A class that names no
    StorageClass has no opinion, so nothing diverges; neither does a workload not yet standing.
    """
    wanted = service_class.spec.modelStorageClassName
    if standing_statefulset is None or not wanted:
        return None
    standing = standing_storage_class(standing_statefulset)
    if standing == wanted:
        return None
    return standing, wanted


def settled_region_kept_message(standing: str | None, wanted: str) -> str:
    """The message of the SettledRegionKept event: what was kept, and how to move."""
    kept = f"StorageClass {standing!r}" if standing else "the cluster's default StorageClass"
    return (
        f"The model volume stays on {kept}: the class now names {wanted!r}, which reaches new volumes only. "
        "To move the order, delete its workload and the claim behind it; the model is then downloaded again."
    )
