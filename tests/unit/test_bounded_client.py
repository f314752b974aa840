"""``activities.kube.bounded``: one client bounded twice (two users of it) sends and counts each request
once — the requests an order costs (``ai_inference_kubernetes_requests_total``) are not doubled."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from kubernetes.client import ApiClient, Configuration
from prometheus_client import REGISTRY

from activities.kube import REQUEST_TIMEOUT, bounded, load_api_client, user_agent

LABELS = {"verb": "get", "resource": "statefulsets"}
URL = "https://127.0.0.1:1/apis/apps/v1/namespaces/ns/statefulsets/web"


def _count() -> float:
    return REGISTRY.get_sample_value("ai_inference_kubernetes_requests_total", LABELS) or 0


def test_a_client_bounded_twice_sends_and_counts_each_request_once() -> None:
    api = ApiClient(Configuration(host="https://127.0.0.1:1"))
    sent: list[dict[str, Any]] = []

    def request(method: str, url: str, **kwargs: Any) -> str:
        sent.append({"method": method, "url": url, **kwargs})
        return "answer"

    api.rest_client.request = request
    bounded(bounded(api))
    before = _count()
    assert api.rest_client.request("GET", URL) == "answer"
    assert len(sent) == 1
    assert sent[0]["_request_timeout"] == REQUEST_TIMEOUT  # the bound, where the caller named none
    assert _count() - before == 1


def test_each_module_process_names_itself_to_the_api_server(tmp_path: Path) -> None:
    """The User-Agent the API server's audit log (and the scale benchmark's count by client) reads."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    worker, watch = (load_api_client(str(kubeconfig), component) for component in ("worker", "watch"))
    assert worker.user_agent == user_agent("worker")
    assert re.fullmatch(r"ai-inference-worker/[^ /]+", worker.user_agent), worker.user_agent
    assert watch.user_agent.startswith("ai-inference-watch/")
    assert load_api_client(str(kubeconfig)).user_agent.startswith("ai-inference-cli/")
