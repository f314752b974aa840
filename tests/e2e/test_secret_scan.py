"""One full run, scanned for secrets: orders created, replanned, their token rotated, deleted.

No endpoint token (before or after rotation), no Hugging Face token and no service-account token may
appear in a workflow history, a search attribute, a memo, the worker's or observer's log lines, an
Event, a condition message or an error text — neither as written nor base64-encoded.
"""

from __future__ import annotations

import base64
import logging
import uuid

import pytest
from kubernetes.client import ApiClient, AuthenticationV1TokenRequest, CoreV1Api, V1TokenRequestSpec

from tests.e2e.stand import Stand, replan_once_settled
from tests.security.leaks import assert_clean, needles

pytestmark = [pytest.mark.cluster, pytest.mark.temporal]

GATED = "meta-llama/Llama-3.2-1B-Instruct"


def _token(stand: Stand, name: str) -> str:
    data = stand.core.read_namespaced_secret(name, stand.namespace).data
    return base64.b64decode(data["token"]).decode()


def _service_account_token(api: ApiClient, namespace: str) -> str:
    spec = V1TokenRequestSpec(audiences=["ai-inference-planner"], expiration_seconds=600)
    request = AuthenticationV1TokenRequest(spec=spec)
    answer = CoreV1Api(api).create_namespaced_service_account_token("default", namespace, request)
    return str(answer.status.token)


async def _everything_said(stand: Stand, names: list[str]) -> dict[str, str]:
    """Where a secret could surface, as text: histories, search attributes and memos, Events, statuses."""
    said: dict[str, str] = {}
    for name in names:
        handle = stand.workflow(name)
        said[f"history of {name}"] = await stand.history_text(name)
        description = await handle.describe()
        said[f"search attributes of {name}"] = repr(description.typed_search_attributes)
        said[f"memo of {name}"] = repr(await description.memo())
        said[f"status of {name}"] = repr(stand.status(name))
    events = stand.core.list_namespaced_event(stand.namespace).items
    said["events"] = "\n".join(f"{e.reason} {e.message}" for e in events)
    return said


async def test_a_full_run_leaves_no_secret_anywhere(
    stand: Stand, kube_admin: ApiClient, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    hf_token = f"hf_scan_{uuid.uuid4().hex}"
    stand.core.create_namespaced_secret(
        stand.namespace,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "hf-token"},
            "data": {"token": base64.b64encode(hf_token.encode()).decode()},
        },
    )
    sa_token = _service_account_token(kube_admin, stand.namespace)
    gated = {"src": "HuggingFace", "ref": {"name": GATED}, "authSecretRef": {"name": "hf-token", "key": "token"}}
    stand.create_order("scanned", {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}})
    stand.create_order("gated", gated)
    for name in ("scanned", "gated"):
        await stand.until_phase(name, "Ready")
    first = _token(stand, "scanned-auth")

    # Replanned by hand, then the endpoint token rotated the documented way.
    outcome = await replan_once_settled(stand.workflow("scanned"))
    assert outcome.planned
    said = await _everything_said(stand, ["scanned", "gated"])
    stand.core.delete_namespaced_secret("scanned-auth", stand.namespace)

    def rotated() -> bool:
        try:
            return _token(stand, "scanned-auth") != first
        except Exception:
            return False

    await stand.until(rotated, what="a new endpoint token")
    await stand.until_phase("scanned", "Ready")
    second = _token(stand, "scanned-auth")
    said |= {f"{k} (after rotation)": v for k, v in (await _everything_said(stand, ["scanned", "gated"])).items()}

    secrets = needles(tokens=[first, second, hf_token, sa_token])
    stand.delete_orders()
    await stand.until(lambda: not stand.order_names(), timeout=60, what="orders deleted")

    out, err = capfd.readouterr()
    said["log lines"] = "\n".join([out, err, *(r.getMessage() for r in caplog.records)])
    said["error texts"] = "\n".join(str(r.exc_info[1]) for r in caplog.records if r.exc_info)
    for where, text in said.items():
        assert_clean(text, secrets, where)
    # The scans read what they claim to: the histories name the Secrets by reference.
    assert "hf-token" in said["history of gated"]
    assert "scanned-auth" in said["history of scanned"]
