"""workload.modelSource.huggingFace in the pod template: the fetcher's HF_ENDPOINT, proxy and CA
bundle when set, and, unset, the pod template exactly as before (no replica rolls on upgrade)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from activities.builders.statefulset import (
    ANNOTATION_MODEL_SOURCE_CA,
    MODEL_SOURCE_CA_DIR,
    MODEL_SOURCE_CA_FILE,
    MODEL_SOURCE_CA_VOLUME,
    build_statefulset,
)
from activities.release import release_fingerprint
from inference_api.settings import HuggingFaceSource, ModuleSettings
from tests import factories as f

PEM = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----"
MIRROR = "https://hf-mirror.example.com/hf"
PROXY = "http://proxy.example.com:3128"


def template(**huggingface: Any) -> dict[str, Any]:
    settings = ModuleSettings(workload={"modelSource": {"huggingFace": huggingface}})
    return dict(build_statefulset(f.inputs(settings=settings))["spec"]["template"])


def fetcher(pod: dict[str, Any]) -> dict[str, Any]:
    (init,) = pod["spec"]["initContainers"]
    return dict(init)


def test_unset_or_empty_leaves_the_pod_template_as_it_was() -> None:
    before = build_statefulset(f.inputs(settings=ModuleSettings()))["spec"]["template"]
    assert template() == before
    assert template(endpoint="", httpsProxy=" ", noProxy=[], caBundle="") == before
    names = {item["name"] for item in fetcher(before)["env"]}
    assert not names & {"HF_ENDPOINT", "HTTPS_PROXY", "NO_PROXY", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"}
    assert ANNOTATION_MODEL_SOURCE_CA not in before["metadata"]["annotations"]
    assert MODEL_SOURCE_CA_VOLUME not in {v["name"] for v in before["spec"]["volumes"]}


def test_the_fetcher_gets_the_mirror_the_proxy_and_the_bundle_and_the_engine_nothing() -> None:
    pod = template(endpoint=MIRROR + "/", httpsProxy=PROXY, noProxy=[".svc", "10.0.0.0/8"], caBundle=PEM)
    env = f.env_map(fetcher(pod))
    assert env["HF_ENDPOINT"] == MIRROR
    assert env["HTTPS_PROXY"] == env["https_proxy"] == PROXY
    assert env["NO_PROXY"] == env["no_proxy"] == ".svc,10.0.0.0/8"
    for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        assert env[name] == MODEL_SOURCE_CA_FILE
    assert {"name": MODEL_SOURCE_CA_VOLUME, "mountPath": MODEL_SOURCE_CA_DIR, "readOnly": True} in fetcher(pod)[
        "volumeMounts"
    ]
    # The bundle: a pod annotation projected as a file (downward API), read-only, nothing in the namespace.
    assert pod["metadata"]["annotations"][ANNOTATION_MODEL_SOURCE_CA] == PEM + "\n"
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == MODEL_SOURCE_CA_VOLUME]
    assert volume["downwardAPI"] == {
        "defaultMode": 0o444,
        "items": [
            {"path": "ca.crt", "fieldRef": {"fieldPath": f"metadata.annotations['{ANNOTATION_MODEL_SOURCE_CA}']"}}
        ],
    }
    # The engine runs offline and gets none of it.
    for container in pod["spec"]["containers"]:
        names = {item["name"] for item in container.get("env", [])}
        assert not names & {"HF_ENDPOINT", "HTTPS_PROXY", "https_proxy", "SSL_CERT_FILE"}
        assert MODEL_SOURCE_CA_VOLUME not in {m["name"] for m in container.get("volumeMounts", [])}


def test_only_what_is_set_is_added() -> None:
    env = f.env_map(fetcher(template(endpoint=MIRROR)))
    assert env["HF_ENDPOINT"] == MIRROR
    assert not {"HTTPS_PROXY", "NO_PROXY", "SSL_CERT_FILE"} & set(env)
    assert MODEL_SOURCE_CA_VOLUME not in {v["name"] for v in template(endpoint=MIRROR)["spec"]["volumes"]}


def test_a_change_is_a_new_release_fingerprint() -> None:
    plain = ModuleSettings()
    mirrored = ModuleSettings(workload={"modelSource": {"huggingFace": {"endpoint": MIRROR}}})
    assert release_fingerprint(plain) != release_fingerprint(mirrored)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ({"endpoint": "hf-mirror.example.com"}, "must be an http:// or https:// URL"),
        ({"endpoint": "https://m.example.com/?x=1"}, "without a query"),
        ({"httpsProxy": "http://user:secret@proxy:3128"}, "must not carry credentials"),
        ({"httpsProxy": "socks5://proxy:1080"}, "must be an http:// or https:// URL"),
        ({"noProxy": ["a.example.com,b.example.com"]}, "one host per item"),
        ({"caBundle": "not a certificate"}, "must hold PEM certificates"),
        ({"caBundle": PEM + "\n-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----"}, "private key"),
    ],
)
def test_what_the_fetcher_could_not_use_is_refused(value: dict[str, Any], error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        HuggingFaceSource(**value)


def test_the_module_environment_sets_them_as_the_chart_does(monkeypatch: pytest.MonkeyPatch) -> None:
    chart_value = {"endpoint": MIRROR, "httpsProxy": "", "noProxy": [".svc"], "caBundle": PEM}
    monkeypatch.setenv("AI_INFERENCE_WORKLOAD__MODELSOURCE__HUGGINGFACE", json.dumps(chart_value))
    source = ModuleSettings().workload.modelSource.huggingFace
    assert source == HuggingFaceSource(endpoint=MIRROR, noProxy=[".svc"], caBundle=PEM)
