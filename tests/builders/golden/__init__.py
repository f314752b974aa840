"""Golden manifests of the builders: a few representative orders, every object they own.

Each case writes ``tests/builders/golden/<case>/<kind>.yaml`` (``<kind>`` lower-cased; the
custom certificate copy is ``secret-tls.yaml`` and the auth Secret ``secret-auth.yaml``). The
inputs are fixed (uid, token, certificate), so the files are byte-for-byte reproducible.

Regenerate after an intended change to a builder::

    .venv/bin/python -m tests.builders.golden --update

and review the diff like any other code change.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from activities.builders import WorkloadInputs, artifact_from_resolution, desired_objects
from inference_api.payloads import ModelResolution
from inference_api.plan import LaunchPlan, Recipe, RecipeSource
from inference_api.types import EndpointType, PlacementType, SharingMode
from tests import factories as f

GOLDEN_DIR = Path(__file__).parent
REGENERATE = ".venv/bin/python -m tests.builders.golden --update"

# A fixed stand-in for an administrator's certificate Secret (base64 of "CERT" and "KEY"), marked
# for copying as the admin guide says.
CUSTOM_CERTIFICATE: dict[str, Any] = {
    "metadata": {
        "name": "wildcard",
        "namespace": "d8-ai-inference",
        "labels": {"ai.deckhouse.io/custom-certificate": "true"},
    },
    "type": "kubernetes.io/tls",
    "data": {"tls.crt": "Q0VSVA==", "tls.key": "S0VZ"},
}


@dataclass(frozen=True)
class Case:
    name: str
    inputs: Callable[[], WorkloadInputs]
    custom_certificate: Mapping[str, Any] | None = field(default=None)


def _default_llm() -> WorkloadInputs:
    """default-llm: External + Token + CertManager, a 30% share on a hopper device."""
    return f.inputs(the_order=f.order(name="default-llm"), the_plan=f.plan(share=30, memory_request_mib=24576))


def _t4_plan() -> LaunchPlan:
    return LaunchPlan(
        deviceClass="nvidia-tesla-t4",
        acceleratorProductName="Tesla T4",
        acceleratorMemoryGiB=16,
        placementMode=PlacementType.WHOLE_DEVICE,
        sharingMode=SharingMode.DEDICATED,
        deviceCount=1,
        sharePercent=100,
        cpu="2",
        memory="16Gi",
        modelVolumeGiB=20,
        recipe=Recipe(
            source=RecipeSource.COMPILED,
            runtimeVersion="0.33.0",
            image="vllm/vllm-openai:v0.33.0",
            args=["--max-model-len", "4096", "--dtype", "half"],
            env={},
            hardwareFamily="turing",
            vramMinimumGiB=8,
        ),
        # One replica: the plan's node and device are pinned (node affinity, a uuid selector).
        nodeName="gpu-t4-0",
        deviceNames=["gpu-1"],
        deviceSelector='device.attributes["gpu.deckhouse.io"].uuid == "GPU-sim-gpu-t4-0-gpu-1"',
    )


def _cluster_local_t4() -> WorkloadInputs:
    """ClusterLocal + None, no scalingPolicy (one replica: pinned to the planned node and device), a whole T4."""
    return f.inputs(
        the_order=f.order(name="internal-llm", model="Qwen/Qwen2.5-1.5B-Instruct"),
        the_class=f.cluster_local_none(),
        the_plan=_t4_plan(),
    )


def _catalog_embeddings() -> WorkloadInputs:
    """A catalog model served as Embeddings, on a class that allows Embeddings only."""
    the_order = f.order(name="embedder", catalog={"kind": "ClusterModel", "name": "e5-large"})
    resolution = ModelResolution(servedName="intfloat/multilingual-e5-large", source="hf://intfloat/e5-large@abc123")
    the_class = f.service_class(
        modelPolicy={"allowedEndpointTypes": ["Embeddings"]},
        exposurePolicy={"type": "ClusterLocal", "authentication": "Token"},
        scalingPolicy={"minReplicas": 1, "maxReplicas": 2},
        updatePolicy={"strategy": "RollingUpdate"},
    )
    return f.inputs(
        the_order=the_order,
        the_class=the_class,
        the_plan=f.plan(share=50, volume_gib=10),
        endpoint_type=EndpointType.EMBEDDINGS,
        artifact=artifact_from_resolution(the_order, resolution),
    )


def _gated_hf() -> WorkloadInputs:
    """A gated Hugging Face model whose token comes from the user's Secret (authSecretRef)."""
    return f.inputs(
        the_order=f.order(name="gated-llm", model="meta-llama/Llama-3.1-8B-Instruct", auth_secret={"name": "hf-token"}),
    )


def _custom_certificate() -> WorkloadInputs:
    """External + None with the administrator's own certificate (CustomCertificate)."""
    the_class = f.service_class(
        exposurePolicy={
            "type": "External",
            "authentication": "None",
            "https": {"mode": "CustomCertificate", "customCertificate": {"secretName": "wildcard"}},
        },
        scalingPolicy={"minReplicas": 1, "maxReplicas": 3},
        updatePolicy={"strategy": "RollingUpdate"},
    )
    return f.inputs(the_order=f.order(name="public-llm"), the_class=the_class)


CASES: list[Case] = [
    Case("default-llm-external-token-certmanager-share30", _default_llm),
    Case("cluster-local-none-t4-whole-device", _cluster_local_t4),
    Case("catalog-embeddings", _catalog_embeddings),
    Case("gated-hf-auth-secret-ref", _gated_hf),
    Case("custom-certificate", _custom_certificate, CUSTOM_CERTIFICATE),
]


def _file_name(kind: str, name: str, order: str) -> str:
    stem = kind.lower()
    if kind == "Secret":
        stem += "-" + name.removeprefix(order + "-")
    return stem + ".yaml"


def render(case: Case) -> dict[str, str]:
    """File name -> YAML text of every object of ``case``, in apply order."""
    inputs = case.inputs()
    objects = desired_objects(inputs, auth_token=f.TOKEN, custom_certificate=case.custom_certificate)
    files: dict[str, str] = {}
    for obj in objects:
        file_name = _file_name(obj.kind, obj.name, inputs.name)
        assert file_name not in files, f"two objects map to {file_name} in {case.name}"
        files[file_name] = yaml.safe_dump(obj.body, sort_keys=True, default_flow_style=False, width=120)
    return files


def update() -> None:
    for case in CASES:
        directory = GOLDEN_DIR / case.name
        directory.mkdir(parents=True, exist_ok=True)
        files = render(case)
        for stale in directory.glob("*.yaml"):
            if stale.name not in files:
                stale.unlink()
        for file_name, text in files.items():
            (directory / file_name).write_text(text)
        print(f"{case.name}: {', '.join(sorted(files))}")
