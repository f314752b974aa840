"""The span of a Kubernetes request names its verb and resource, never a value of the request."""

from __future__ import annotations

import pytest

from activities.kube import request_span_name

APPLY = {"Content-Type": "application/apply-patch+yaml", "Authorization": "Bearer secret-token"}


@pytest.mark.parametrize(
    ("method", "url", "headers", "name"),
    [
        ("PATCH", "https://k/apis/apps/v1/namespaces/a/statefulsets/s?fieldManager=x", APPLY,
         "kubernetes apply statefulsets"),
        ("PATCH", "https://k/apis/ai.deckhouse.io/v1alpha1/namespaces/n/inferenceservices/o/status", None,
         "kubernetes patch inferenceservices/status"),
        ("GET", "https://k/api/v1/namespaces/a/pods/p", None, "kubernetes get pods"),
        ("GET", "https://k/apis/ai.deckhouse.io/v1alpha1/inferenceserviceclasses/c", None,
         "kubernetes get inferenceserviceclasses"),
        ("GET", "https://k/api/v1/namespaces/n", None, "kubernetes get namespaces"),
        ("GET", "https://k/api/v1", None, "kubernetes get discovery"),
        ("GET", "https://k/apis/apps/v1", None, "kubernetes get discovery"),
        ("GET", "https://k/version", None, "kubernetes get version"),
    ],
)  # fmt: skip
def test_span_names(method: str, url: str, headers: dict[str, str] | None, name: str) -> None:
    got, attributes = request_span_name(method, url, headers)
    assert got == name
    assert "?" not in attributes["url.path"]
    assert "secret-token" not in repr(attributes)
