"""How an order is reached: the Ingress of an External class, and ``status.endpoint``.

External → an Ingress ``{order}`` for the host of ``external_host`` (the platform domain or ``domainTemplate``), always
with TLS (the user guide promises an HTTPS URL), that publishes the path prefix ``/v1`` only.
The user guide promises ``/v1/models``, ``/v1/chat/completions``, ``/v1/embeddings`` and
``/v1/rerank``; ``/v1`` is exactly what vLLM's API key guards, while vLLM serves much more
without the key (``/rerank``, ``/score``, ``/tokenize``, ``/pooling``, ``/classify``, ``/pause``,
``/sleep``, ``/collective_rpc``, ``/metrics``, ...). Publishing ``/`` would put all of that on
the internet, token or not. Kubernetes ``Prefix`` matches whole path elements: ``/v1`` and
``/v1/...``, never ``/v1x``. TLS:

* ``https.mode: CertManager`` → annotation ``cert-manager.io/cluster-issuer`` and the Secret
  ``{order}-tls`` that cert-manager's ingress-shim fills;
* ``https.mode: CustomCertificate`` → the administrator's Secret lives in the module's namespace,
  and an Ingress can only name a Secret of its own namespace, so the apply step reads that
  Secret (``custom_certificate_source``) and ``build_tls_secret_copy`` makes the order's own
  copy ``{order}-tls``, owned by the order like everything else. Only a Secret the
  administrator labelled ``ai.deckhouse.io/custom-certificate: "true"`` is copied
  (``certificate_copy_allowed``): a class author may name any Secret, and the module namespace
  holds the module's own (Temporal's client certificate, say), which must never travel into a
  user's namespace;
* no ``https`` block → a TLS entry for the host without a Secret: the ingress controller's
  default certificate serves it.

ClusterLocal → no Ingress; the endpoint is the Service, over plain HTTP, because a ClusterLocal
class may not carry ``https`` (the CRD refuses it) and nothing in-cluster terminates TLS.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from activities.builders.common import HTTP_PORT_NAME, LABEL_ENDPOINT_HOST, SERVICE_PORT, WorkloadInputs, object_meta
from inference_api.settings import ModuleSettings
from inference_api.types import (
    EndpointStatus,
    ExposureType,
    HttpsMode,
    InferenceService,
    InferenceServiceClass,
)

CLUSTER_ISSUER_ANNOTATION = "cert-manager.io/cluster-issuer"
TLS_DATA_KEYS = ("tls.crt", "tls.key", "ca.crt")
# The administrator's mark on a Secret of the module namespace that classes may copy.
CUSTOM_CERTIFICATE_LABEL = "ai.deckhouse.io/custom-certificate"
# What the Ingress publishes: the prefix vLLM's API key guards, and every documented API path.
EXPOSED_PATH_PREFIX = "/v1"

# ingress-nginx (the Deckhouse ingress controller) defaults are made for web pages, not for
# a model that streams tokens for minutes or takes a long prompt: raise the timeouts, lift the
# 1m body limit and stop buffering so server-sent events reach the client as they are produced.
# Other controllers ignore these annotations.
INGRESS_NGINX_ANNOTATIONS = {
    "nginx.ingress.kubernetes.io/proxy-body-size": "64m",
    "nginx.ingress.kubernetes.io/proxy-buffering": "off",
    "nginx.ingress.kubernetes.io/proxy-read-timeout": "3600",
    "nginx.ingress.kubernetes.io/proxy-send-timeout": "3600",
}


# A DNS label: at most 63 characters.
DNS_LABEL_MAX = 63


def public_domain_label(name: str, namespace: str) -> str:
    """The label an order takes under the platform's public domain: ``{name}-{namespace}``; when that
    is longer than a DNS label may be, its first 54 characters, ``-`` and 8 hex digits of a digest
    of ``namespace/name`` (distinct orders keep distinct hosts)."""
    label = f"{name}-{namespace}".lower()
    if len(label) <= DNS_LABEL_MAX:
        return label
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:8]
    return f"{label[: DNS_LABEL_MAX - 9].rstrip('-')}-{digest}"


def host_digest(host: str) -> str:
    """The value of an Ingress's ``LABEL_ENDPOINT_HOST``: 32 hex digits of the host's SHA-256."""
    return hashlib.sha256(host.lower().encode()).hexdigest()[:32]


def host_taken(host: str, ref_uid: str, ingresses: list[dict[str, Any]], reserved: list[str]) -> str | None:
    """Why ``host`` cannot be the order's (None: it can). ``ingresses``: the module's Ingresses that carry
    the host's digest, in any namespace. The first order to publish a host keeps it: another order's
    Ingress with that host that is older than the order's own (or the order has none yet) takes it,
    and so does a platform host (``exposure.reservedHosts``). The other order is not named: it may be
    another tenant's."""
    if host in reserved:
        return f"the host {host} is reserved for the platform (exposure.reservedHosts)"
    ours = [i for i in ingresses if _owner_uid(i) == ref_uid]
    own_since = min((_created(i) for i in ours), default=None)
    for other in ingresses:
        if _owner_uid(other) == ref_uid or host not in _hosts(other):
            continue
        if own_since is None or (_created(other), _owner_uid(other)) < (own_since, ref_uid):
            return f"the host {host} is already the endpoint of another order"
    return None


def _owner_uid(obj: dict[str, Any]) -> str:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return next((str(r.get("uid")) for r in refs if r.get("controller") and r.get("kind") == "InferenceService"), "")


def _created(obj: dict[str, Any]) -> str:
    # RFC 3339 in UTC with a Z, as the API server writes it: ordered as text.
    return str((obj.get("metadata") or {}).get("creationTimestamp") or "")


def _hosts(obj: dict[str, Any]) -> set[str]:
    return {str(r.get("host", "")).lower() for r in (obj.get("spec") or {}).get("rules") or []}


def external_host(order: InferenceService, settings: ModuleSettings) -> str:
    """The host of an External endpoint: under the platform's public domain when
    ``exposure.publicDomainTemplate`` is set (``%s`` → :func:`public_domain_label`), else
    ``exposure.domainTemplate`` with the order's name and namespace."""
    public = settings.exposure.publicDomainTemplate
    if public:
        label = public_domain_label(order.metadata.name, order.metadata.namespace or "")
        return public.replace("%s", label).lower()
    try:
        host = settings.exposure.domainTemplate.format(name=order.metadata.name, namespace=order.metadata.namespace)
    except (KeyError, IndexError) as err:
        raise ValueError(
            f"exposure.domainTemplate {settings.exposure.domainTemplate!r} may use only {{name}} and {{namespace}}"
        ) from err
    return host.lower()


def endpoint_status(
    order: InferenceService, service_class: InferenceServiceClass, settings: ModuleSettings
) -> EndpointStatus:
    """``status.endpoint``: where the OpenAI-compatible API answers, and the exposure type."""
    exposure = service_class.spec.exposurePolicy.type
    if exposure == ExposureType.EXTERNAL:
        return EndpointStatus(url=f"https://{external_host(order, settings)}", type=exposure)
    return EndpointStatus(url=cluster_local_url(order), type=exposure)


def cluster_local_url(order: InferenceService) -> str:
    """The in-cluster URL of the order's Service."""
    # `<svc>.<ns>.svc` resolves from any pod through the cluster's DNS search path, without
    # hard-coding the cluster domain; port 80 needs no port in the URL.
    url = f"http://{order.metadata.name}.{order.metadata.namespace}.svc"
    if SERVICE_PORT != 80:
        url = f"{url}:{SERVICE_PORT}"
    return url


def custom_certificate_source(service_class: InferenceServiceClass, settings: ModuleSettings) -> tuple[str, str] | None:
    """(namespace, name) of the administrator's TLS Secret the apply step must read, if any."""
    policy = service_class.spec.exposurePolicy
    if policy.type != ExposureType.EXTERNAL or policy.https is None:
        return None
    if policy.https.mode != HttpsMode.CUSTOM_CERTIFICATE or policy.https.customCertificate is None:
        return None
    return settings.moduleNamespace, policy.https.customCertificate.secretName


def certificate_copy_allowed(secret: Mapping[str, Any] | None) -> str | None:
    """Why the certificate Secret (as read) may not be copied into an order's namespace, or None.

    Only a Secret the administrator marked with ``ai.deckhouse.io/custom-certificate: "true"``
    may be copied. None (no Secret) is not refused here: there is nothing to copy, and the
    Ingress names ``{order}-tls`` until the Secret exists.
    """
    if secret is None:
        return None
    meta = secret.get("metadata") or {}
    if (meta.get("labels") or {}).get(CUSTOM_CERTIFICATE_LABEL) == "true":
        return None
    where = f"{meta.get('namespace') or '?'}/{meta.get('name') or '?'}"
    return (
        f"the class names certificate Secret {where}, which is not marked for copying into orders' namespaces; "
        f'an administrator labels it {CUSTOM_CERTIFICATE_LABEL}="true" to allow it'
    )


def build_tls_secret_copy(inputs: WorkloadInputs, source: Mapping[str, Any]) -> dict[str, Any]:
    """The order's copy ``{order}-tls`` of the administrator's certificate Secret (as read).

    Only the certificate keys are copied, still base64 as the server returned them, so no
    other data of the source Secret travels into the user's namespace. A Secret not marked for
    copying (``certificate_copy_allowed``) is a ValueError.
    """
    refusal = certificate_copy_allowed(source)
    if refusal is not None:
        raise ValueError(refusal)
    data = source.get("data") or {}
    copied = {key: data[key] for key in TLS_DATA_KEYS if key in data}
    if "tls.crt" not in copied or "tls.key" not in copied:
        raise ValueError("the custom certificate Secret must hold tls.crt and tls.key")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": object_meta(inputs, inputs.names.tls_secret, "tls"),
        "type": "kubernetes.io/tls",
        "data": copied,
    }


def build_ingress(inputs: WorkloadInputs) -> dict[str, Any] | None:
    """The Ingress of an External class, or None for ClusterLocal."""
    policy = inputs.service_class.spec.exposurePolicy
    if policy.type != ExposureType.EXTERNAL:
        return None
    host = external_host(inputs.order, inputs.settings)
    annotations = dict(INGRESS_NGINX_ANNOTATIONS)
    tls: dict[str, Any] = {"hosts": [host]}
    https = policy.https
    if https is not None and https.mode == HttpsMode.CERT_MANAGER and https.certManager is not None:
        annotations[CLUSTER_ISSUER_ANNOTATION] = https.certManager.clusterIssuerName
        tls["secretName"] = inputs.names.tls_secret
    elif https is not None and https.mode == HttpsMode.CUSTOM_CERTIFICATE:
        tls["secretName"] = inputs.names.tls_secret
    meta = object_meta(inputs, inputs.names.ingress, "endpoint", annotations)
    meta["labels"][LABEL_ENDPOINT_HOST] = host_digest(host)
    spec: dict[str, Any] = {}
    if inputs.settings.exposure.ingressClassName:
        spec["ingressClassName"] = inputs.settings.exposure.ingressClassName
    spec["tls"] = [tls]
    spec["rules"] = [
        {
            "host": host,
            "http": {
                "paths": [
                    {
                        "path": EXPOSED_PATH_PREFIX,
                        "pathType": "Prefix",
                        "backend": {"service": {"name": inputs.names.service, "port": {"name": HTTP_PORT_NAME}}},
                    }
                ]
            },
        }
    ]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": meta,
        "spec": spec,
    }
