"""Service, Ingress, TLS and status.endpoint."""

from __future__ import annotations

import base64

import pytest

from activities.builders import (
    build_ingress,
    build_service,
    build_tls_secret_copy,
    certificate_copy_allowed,
    custom_certificate_source,
    endpoint_status,
    external_host,
)
from activities.builders.common import LABEL_ENDPOINT_HOST
from activities.builders.exposure import CUSTOM_CERTIFICATE_LABEL, host_digest, host_taken, public_domain_label
from inference_api.settings import ExposureSettings, ModuleSettings
from inference_api.types import ExposureType
from tests import factories as f


def test_service_is_cluster_ip_port_80_to_the_runtime_port_by_name() -> None:
    service = build_service(f.inputs())
    assert service["metadata"]["name"] == "support-llm"
    assert service["spec"] == {
        "type": "ClusterIP",
        "selector": {"ai.deckhouse.io/inference-service": "support-llm"},
        "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": "http", "appProtocol": "http"}],
    }


def test_external_cert_manager_ingress() -> None:
    ingress = build_ingress(f.inputs())
    assert ingress is not None
    assert ingress["apiVersion"] == "networking.k8s.io/v1"
    assert ingress["metadata"]["name"] == "support-llm"
    assert ingress["metadata"]["annotations"]["cert-manager.io/cluster-issuer"] == "letsencrypt"
    host = "support-llm.support.ai.example.com"
    assert ingress["spec"]["tls"] == [{"hosts": [host], "secretName": "support-llm-tls"}]
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] == host
    (path,) = rule["http"]["paths"]
    # Only /v1, the prefix vLLM's API key guards: /rerank, /score, /pause, ... stay unreachable.
    assert path["path"] == "/v1"
    assert path["pathType"] == "Prefix"
    assert path["backend"] == {"service": {"name": "support-llm", "port": {"name": "http"}}}
    assert "ingressClassName" not in ingress["spec"]


def test_ingress_allows_long_streaming_answers() -> None:
    annotations = build_ingress(f.inputs())["metadata"]["annotations"]  # type: ignore[index]
    assert annotations["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
    assert int(annotations["nginx.ingress.kubernetes.io/proxy-read-timeout"]) >= 600


def test_custom_certificate_is_copied_into_the_orders_namespace() -> None:
    the_class = f.service_class(
        exposurePolicy={
            "type": "External",
            "authentication": "Token",
            "https": {"mode": "CustomCertificate", "customCertificate": {"secretName": "wildcard-tls"}},
        }
    )
    settings = ModuleSettings(moduleNamespace="d8-ai-inference")
    the_inputs = f.inputs(the_class=the_class, settings=settings)
    ingress = build_ingress(the_inputs)
    assert ingress is not None
    assert ingress["spec"]["tls"][0]["secretName"] == "support-llm-tls"
    assert "cert-manager.io/cluster-issuer" not in ingress["metadata"]["annotations"]
    assert custom_certificate_source(the_class, settings) == ("d8-ai-inference", "wildcard-tls")

    crt, key = base64.b64encode(b"CERT").decode(), base64.b64encode(b"KEY").decode()
    marked = {"name": "wildcard-tls", "namespace": "d8-ai-inference", "labels": {CUSTOM_CERTIFICATE_LABEL: "true"}}
    source = {"data": {"tls.crt": crt, "tls.key": key, "other": "eA=="}, "metadata": marked}
    copy = build_tls_secret_copy(the_inputs, source)
    assert copy["metadata"]["name"] == "support-llm-tls"
    assert copy["metadata"]["namespace"] == "support"
    assert copy["type"] == "kubernetes.io/tls"
    assert copy["data"] == {"tls.crt": crt, "tls.key": key}
    assert CUSTOM_CERTIFICATE_LABEL not in copy["metadata"]["labels"]
    with pytest.raises(ValueError, match=r"tls\.key"):
        build_tls_secret_copy(the_inputs, {"data": {"tls.crt": crt}, "metadata": marked})


@pytest.mark.parametrize(
    "labels",
    [None, {}, {CUSTOM_CERTIFICATE_LABEL: "false"}, {CUSTOM_CERTIFICATE_LABEL: "True"}, {"app": "temporal"}],
    ids=["no-labels", "empty", "false", "not-exactly-true", "other-label"],
)
def test_only_a_secret_the_administrator_marked_is_copied(labels: dict[str, str] | None) -> None:
    the_class = f.service_class(
        exposurePolicy={
            "type": "External",
            "authentication": "Token",
            "https": {"mode": "CustomCertificate", "customCertificate": {"secretName": "temporal-client-tls"}},
        }
    )
    meta: dict[str, object] = {"name": "temporal-client-tls", "namespace": "d8-ai-inference"}
    if labels is not None:
        meta["labels"] = labels
    secret = {"data": {"tls.crt": "Qw==", "tls.key": "Sw=="}, "metadata": meta}
    refusal = certificate_copy_allowed(secret)
    assert refusal is not None
    assert "d8-ai-inference/temporal-client-tls" in refusal
    assert f'{CUSTOM_CERTIFICATE_LABEL}="true"' in refusal
    # The refusal names the Secret, never its data.
    assert "Qw==" not in refusal
    assert "Sw==" not in refusal
    # The builder refuses too, so no caller can copy it by skipping the check.
    with pytest.raises(ValueError, match="not marked"):
        build_tls_secret_copy(f.inputs(the_class=the_class), secret)


def test_a_marked_secret_is_allowed_and_a_missing_one_is_no_refusal() -> None:
    marked = {"metadata": {"name": "wildcard", "labels": {CUSTOM_CERTIFICATE_LABEL: "true"}}}
    assert certificate_copy_allowed(marked) is None
    assert certificate_copy_allowed(None) is None


def test_cert_manager_and_cluster_local_need_no_certificate_copy() -> None:
    settings = ModuleSettings()
    assert custom_certificate_source(f.external_token_certmanager(), settings) is None
    assert custom_certificate_source(f.cluster_local_none(), settings) is None


def test_external_without_https_block_uses_the_controllers_default_certificate() -> None:
    the_class = f.service_class(exposurePolicy={"type": "External", "authentication": "Token"})
    ingress = build_ingress(f.inputs(the_class=the_class))
    assert ingress is not None
    assert ingress["spec"]["tls"] == [{"hosts": ["support-llm.support.ai.example.com"]}]


def test_cluster_local_has_no_ingress() -> None:
    assert build_ingress(f.inputs(the_class=f.cluster_local_none())) is None


def test_ingress_class_and_domain_from_settings() -> None:
    settings = ModuleSettings(
        exposure=ExposureSettings(domainTemplate="{namespace}-{name}.Inference.Corp", ingressClassName="nginx")
    )
    ingress = build_ingress(f.inputs(settings=settings))
    assert ingress is not None
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["rules"][0]["host"] == "support-support-llm.inference.corp"


def test_endpoint_external_is_https_on_the_host() -> None:
    status = endpoint_status(f.order(), f.external_token_certmanager(), ModuleSettings())
    assert status.url == "https://support-llm.support.ai.example.com"
    assert status.type == ExposureType.EXTERNAL


def test_endpoint_cluster_local_is_the_service_over_http() -> None:
    status = endpoint_status(f.order(), f.cluster_local_none(), ModuleSettings())
    assert status.url == "http://support-llm.support.svc"
    assert status.type == ExposureType.CLUSTER_LOCAL


def test_domain_template_with_unknown_placeholders_is_an_error() -> None:
    settings = ModuleSettings(exposure=ExposureSettings(domainTemplate="{name}.{cluster}.example.com"))
    with pytest.raises(ValueError, match="domainTemplate"):
        external_host(f.order(), settings)


# ------------------------------------------------------------- the platform's public domain template


def test_the_public_domain_template_gives_the_host_and_domain_template_is_not_used() -> None:
    settings = ModuleSettings(
        exposure=ExposureSettings(domainTemplate="{name}.{namespace}.unused", publicDomainTemplate="%s.Apps.Corp")
    )
    ingress = build_ingress(f.inputs(settings=settings))
    assert ingress is not None
    assert ingress["spec"]["rules"][0]["host"] == "support-llm-support.apps.corp"
    status = endpoint_status(f.order(), f.external_token_certmanager(), settings)
    assert status.url == "https://support-llm-support.apps.corp"


def test_without_a_public_domain_template_domain_template_stands() -> None:
    for unset in (None, ""):
        settings = ModuleSettings(exposure=ExposureSettings(publicDomainTemplate=unset))
        assert settings.exposure.publicDomainTemplate is None
        assert endpoint_status(f.order(), f.external_token_certmanager(), settings).url == (
            "https://support-llm.support.ai.example.com"
        )


def test_a_label_too_long_for_dns_is_shortened_with_a_digest() -> None:
    name, namespace = "n" * 52, "s" * 63
    label = public_domain_label(name, namespace)
    assert len(label) == 63
    assert label.startswith("n" * 52 + "-s-")
    assert label != public_domain_label(name, "s" * 62 + "t")
    assert public_domain_label("support-llm", "support") == "support-llm-support"


@pytest.mark.parametrize("template", ["example.com", "%s.%s.example.com", "%d.example.com", "%s.%v.example.com"])
def test_a_public_domain_template_without_exactly_one_placeholder_is_refused(template: str) -> None:
    with pytest.raises(ValueError, match=r"exposure\.publicDomainTemplate must contain %s exactly once"):
        ExposureSettings(publicDomainTemplate=template)


# ---------------------------------------------------------------- hosts that cannot collide (issue 33)


def _ingress(owner_uid: str, host: str, created: str, namespace: str = "ns") -> dict[str, object]:
    return {
        "metadata": {
            "name": "chat",
            "namespace": namespace,
            "creationTimestamp": created,
            "ownerReferences": [{"kind": "InferenceService", "uid": owner_uid, "controller": True}],
        },
        "spec": {"rules": [{"host": host}]},
    }


def test_the_public_domain_label_is_not_injective_so_the_apply_checks_hosts() -> None:
    # a-b in c and a in b-c: one label. The check (host_taken) is what keeps them apart.
    assert public_domain_label("a-b", "c") == public_domain_label("a", "b-c")


def test_an_ingress_carries_its_hosts_digest() -> None:
    built = build_ingress(f.inputs(the_class=f.external_token_certmanager()))
    assert built is not None
    host = built["spec"]["rules"][0]["host"]
    assert built["metadata"]["labels"][LABEL_ENDPOINT_HOST] == host_digest(host)
    assert len(host_digest(host)) == 32
    assert host_digest(host.upper()) == host_digest(host)


def test_a_free_host_is_the_orders() -> None:
    assert host_taken("chat.example.com", "me", [], []) is None
    mine = _ingress("me", "chat.example.com", "2026-12-01T00:00:00Z")
    assert host_taken("chat.example.com", "me", [mine], []) is None


def test_an_older_orders_host_is_taken_and_the_other_is_not_named() -> None:
    theirs = _ingress("other", "chat.example.com", "2026-12-01T00:00:00Z", namespace="tenant-b")
    why = host_taken("chat.example.com", "me", [theirs], [])
    assert why == "the host chat.example.com is already the endpoint of another order"
    assert "tenant-b" not in why
    # Both published in a race: the older keeps it, the newer is refused.
    mine = _ingress("me", "chat.example.com", "2026-12-02T00:00:00Z")
    assert host_taken("chat.example.com", "me", [theirs, mine], []) is not None
    assert host_taken("chat.example.com", "other", [theirs, mine], []) is None
    # Created in the same second: the smaller uid keeps it, so exactly one of the two is refused.
    same = _ingress("me", "chat.example.com", "2026-12-01T00:00:00Z")
    assert (host_taken("chat.example.com", "me", [theirs, same], []) is None) != (
        host_taken("chat.example.com", "other", [theirs, same], []) is None
    )


def test_a_digest_match_with_another_host_takes_nothing() -> None:
    other_host = _ingress("other", "elsewhere.example.com", "2026-12-01T00:00:00Z")
    assert host_taken("chat.example.com", "me", [other_host], []) is None


def test_a_reserved_platform_host_is_refused() -> None:
    why = host_taken("console.example.com", "me", [], ["console.example.com"])
    assert why == "the host console.example.com is reserved for the platform (exposure.reservedHosts)"


def test_reserved_hosts_are_read_lowercase_without_a_trailing_dot() -> None:
    assert ExposureSettings(reservedHosts=["Console.Example.com.", " ", "api.example.com"]).reservedHosts == [
        "api.example.com",
        "console.example.com",
    ]
