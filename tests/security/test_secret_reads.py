"""The worker's first probe reads the order's own auth Secret, whatever Secret name it is handed.

The name comes with the probe's request, out of the workflow's state, which whoever can start or
terminate a workflow could edit (issue 22): a request naming another Secret of the namespace (the
Hugging Face token, a user's database password) must not make the worker read it and send it as a
Bearer token to the order's Service. Against the real API server.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from kubernetes.client import ApiClient, CoreV1Api

from activities.order import OrderActivities
from inference_api.payloads import OrderRef
from inference_api.settings import ModuleSettings

pytestmark = pytest.mark.cluster


def _no_planner(*_: Any) -> Any:
    raise AssertionError("no plan here")


def test_the_probe_token_is_read_from_the_orders_own_auth_secret_only(kube_admin: ApiClient, namespace: str) -> None:
    core = CoreV1Api(kube_admin)
    for name, value in (("chat-auth", b"the-endpoint-token"), ("hf-token", b"hf_user_secret")):
        core.create_namespaced_secret(
            namespace, {"metadata": {"name": name}, "data": {"token": base64.b64encode(value).decode()}}
        )
    activities = OrderActivities(kube_admin, ModuleSettings(), planner=_no_planner)
    ref = OrderRef(namespace=namespace, name="chat", uid="u-chat")
    assert activities._token(ref, "chat-auth") == "the-endpoint-token"
    # A forged state naming another Secret of the namespace: nothing is read, no token is sent.
    assert activities._token(ref, "hf-token") is None
    assert activities._token(ref, None) is None
