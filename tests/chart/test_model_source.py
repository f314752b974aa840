"""aiInference.workload.modelSource.huggingFace from the chart's values to the worker's settings and the
order pods' fetcher (docs/admin-guide.md, "Air-gapped clusters")."""

from __future__ import annotations

import os

import pytest

from activities.builders.statefulset import ANNOTATION_MODEL_SOURCE_CA, build_statefulset
from inference_api.settings import HuggingFaceSource, ModuleSettings
from tests import factories as f
from tests.chart.helm import Doc, Helm, container_env, find, template_args

PEM = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----\n"
AIR_GAPPED = {
    "endpoint": "https://hf-mirror.example.com",
    "httpsProxy": "http://proxy.example.com:3128",
    "noProxy": [".svc", ".cluster.local", "10.0.0.0/8"],
    "caBundle": PEM,
}
PREFIX = "aiInference.workload.modelSource.huggingFace"


def _settings_of(deployment: Doc, monkeypatch: pytest.MonkeyPatch) -> ModuleSettings:
    for key in list(os.environ):
        if key.upper().startswith("AI_INFERENCE_"):
            monkeypatch.delenv(key)
    for key, value in container_env(deployment).items():
        monkeypatch.setenv(key, value)
    return ModuleSettings()


def test_the_air_gapped_values_reach_the_worker_and_the_fetcher(helm: Helm, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = helm.render({f"{PREFIX}.{k}": v for k, v in AIR_GAPPED.items()})
    settings = _settings_of(find(docs, "Deployment", "ai-inference-worker"), monkeypatch)
    assert settings.workload.modelSource.huggingFace == HuggingFaceSource(**AIR_GAPPED)
    template = build_statefulset(f.inputs(settings=settings))["spec"]["template"]
    assert template["metadata"]["annotations"][ANNOTATION_MODEL_SOURCE_CA] == PEM
    env = f.env_map(f.fetcher_container({"spec": {"template": template}}))
    assert env["HF_ENDPOINT"] == AIR_GAPPED["endpoint"]
    assert env["HTTPS_PROXY"] == AIR_GAPPED["httpsProxy"]


def test_unset_values_set_nothing(helm: Helm) -> None:
    worker = find(helm.render(), "Deployment", "ai-inference-worker")
    assert not any("MODELSOURCE" in key for key in container_env(worker))


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ({f"{PREFIX}.endpoint": "hf-mirror.example.com"}, "endpoint"),
        ({f"{PREFIX}.httpsProxy": "http://user:secret@proxy:3128"}, "httpsProxy"),
        ({f"{PREFIX}.caBundle": "not a certificate"}, "caBundle"),
        ({f"{PREFIX}.mirror": "https://hf-mirror.example.com"}, "additional properties 'mirror' not allowed"),
    ],
)
def test_values_the_fetcher_could_not_use_are_refused_by_helm(
    helm: Helm, values: dict[str, object], error: str
) -> None:
    result = helm(*template_args(values), check=False)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert error in result.stderr
