"""Every image of the chart is pinned by digest with its tag kept readable (repository:tag@sha256:…).

Each image value of values.yaml (an object with a ``repository``) takes a ``digest``; with every one
set, every container the chart renders (all templates, the monitoring ones and the upgrade hook
included) runs a ``repo:tag@sha256:<64 hex>`` image, so an image added later without the mechanism
fails here. The third-party images the release ships (Temporal, the terminator's nginx) are pinned by
default from the chart's list of their digests (``ai-inference.shippedDigests`` in _helpers.tpl), by
repository:tag, so a changed tag runs by its tag and never pulls the old build. The module's own image
is the one exception: its digest exists only once it is built and pushed (``image.digest``, or
Deckhouse's published one).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.chart.helm import CHART_DIR, MONITORING_APIS, Helm, template_args

VALUES = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
SCHEMA = json.loads((CHART_DIR / "values.schema.json").read_text())
OPENAPI = yaml.safe_load((CHART_DIR / "openapi" / "values.yaml").read_text())
PINNED = re.compile(r"[^@\s]+:[^@\s/:]+@sha256:[0-9a-f]{64}")


def image_values(node: Any = VALUES, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """(dotted path, value) of every image object of values.yaml."""
    if isinstance(node, dict):
        if "repository" in node:
            yield path, node
            return
        for key, value in node.items():
            yield from image_values(value, f"{path}.{key}" if path else key)


def rendered_images(docs: list[dict[str, Any]]) -> dict[str, str]:
    """{"Kind/name/container": image} of every container, init container and ephemeral container."""
    out: dict[str, str] = {}

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("containers", "initContainers", "ephemeralContainers") and isinstance(value, list):
                    for container in value:
                        out[f"{where}/{container['name']}"] = container["image"]
                else:
                    walk(value, where)
        elif isinstance(node, list):
            for item in node:
                walk(item, where)

    for doc in docs:
        walk(doc, f"{doc['kind']}/{doc['metadata']['name']}")
    return out


def digest_of(path: str) -> str:
    return "sha256:" + hashlib.sha256(path.encode()).hexdigest()


def render_all(helm: Helm, values: dict[str, Any]) -> dict[str, str]:
    docs = helm.render({"crdUpgrade.enabled": True, **values}, api_versions=MONITORING_APIS)
    images = rendered_images(docs)
    assert images
    return images


def test_values_list_the_three_images() -> None:
    assert [path for path, _ in image_values()] == [
        "aiInference.temporal.embedded.image",
        "aiInference.temporal.embedded.tlsProxy.image",
        "image",
    ]


def test_every_image_value_takes_a_digest_in_both_schemas() -> None:
    for path, _ in image_values():
        node: dict[str, Any] = SCHEMA
        for key in path.split("."):
            node = node["properties"][key]
        assert node["properties"]["digest"]["pattern"] == "^(sha256:[0-9a-f]{64})?$", path
        if path.startswith("aiInference."):
            node = OPENAPI
            for key in path.split(".")[1:]:
                node = node["properties"][key]
            assert node["properties"]["digest"]["pattern"] == "^(sha256:[0-9a-f]{64})?$", path


def test_with_every_digest_set_every_container_is_pinned_and_keeps_its_tag(helm: Helm) -> None:
    digests = {f"{path}.digest": digest_of(path) for path, _ in image_values()}
    images = render_all(helm, digests)
    unpinned = {where: image for where, image in images.items() if not PINNED.fullmatch(image)}
    assert not unpinned, f"images without a digest: {unpinned}"
    expected = {f"{value['repository']}:{value['tag'] or '0.1.0'}@{digest_of(path)}" for path, value in image_values()}
    assert set(images.values()) == expected


def shipped_digests() -> dict[str, str]:
    """The chart's list of the shipped third-party images' digests, read from the helper itself."""
    helpers = (CHART_DIR / "templates" / "_helpers.tpl").read_text()
    block = re.search(r'define "ai-inference.shippedDigests" -}}\n(.*?)\n{{- end', helpers, re.S)
    assert block, "no shippedDigests block in _helpers.tpl"
    listed = yaml.safe_load(block.group(1))
    assert isinstance(listed, dict)
    return listed


def test_the_shipped_list_names_every_third_party_default_with_a_well_formed_digest() -> None:
    listed = shipped_digests()
    third_party = {f"{v['repository']}:{v['tag']}" for path, v in image_values() if path != "image"}
    assert third_party == set(listed)
    for ref, digest in listed.items():
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), ref


def test_by_default_the_shipped_images_are_pinned_and_the_module_image_runs_by_its_tag(helm: Helm) -> None:
    listed = shipped_digests()
    images = set(render_all(helm, {}).values())
    expected = {f"{ref}@{digest}" for ref, digest in listed.items()} | {"ai-inference:0.1.0"}
    assert images == expected


def test_a_changed_tag_runs_by_its_tag_never_by_the_old_builds_digest(helm: Helm) -> None:
    images = render_all(helm, {"aiInference.temporal.embedded.tlsProxy.image.tag": "1.29-alpine"})
    proxies = {image for where, image in images.items() if where.endswith("/tls-proxy")}
    assert proxies == {"nginxinc/nginx-unprivileged:1.29-alpine"}
    pinned = render_all(
        helm,
        {
            "aiInference.temporal.embedded.tlsProxy.image.tag": "1.29-alpine",
            "aiInference.temporal.embedded.tlsProxy.image.digest": digest_of("1.29"),
        },
    )
    assert {image for where, image in pinned.items() if where.endswith("/tls-proxy")} == {
        f"nginxinc/nginx-unprivileged:1.29-alpine@{digest_of('1.29')}"
    }


def test_deckhouse_pins_the_module_image_by_its_published_digest_over_the_value(helm: Helm) -> None:
    published = digest_of("deckhouse")
    docs = helm.render(
        {
            "image.digest": digest_of("image"),
            "global.modulesImages": {
                "registry": {"base": "registry.example.com/modules/ai-inference"},
                "digests": {"aiInference": {"aiInference": published}},
            },
        }
    )
    images = rendered_images(docs)
    assert images["Deployment/ai-inference-worker/worker"] == f"registry.example.com/modules/ai-inference@{published}"


@pytest.mark.parametrize("digest", ["latest", "sha256:abc", "sha512:" + "0" * 128, "sha256:" + "A" * 64])
def test_a_malformed_digest_is_refused(helm: Helm, digest: str) -> None:
    result = helm(*template_args({"aiInference.temporal.embedded.tlsProxy.image.digest": digest}), check=False)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
