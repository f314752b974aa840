"""The install notes (templates/NOTES.txt) say what catalog.mode Enabled needs: without the ai-models
module the watcher is Ready and Hugging Face orders are served, and catalog orders wait with
CatalogNotInstalled until it is installed. ``helm template`` does not render NOTES.txt: a copy of the
chart carries one more template that includes it, into a ConfigMap that is rendered alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from tests.chart.helm import CHART_DIR, KUBE_VERSION, NAMESPACE, RELEASE, Helm, set_args

NOTES_PROBE = """apiVersion: v1
kind: ConfigMap
metadata:
  name: notes-rendered
data:
  notes: |
{{ include (print $.Template.BasePath "/NOTES.txt") . | indent 4 }}
"""


def notes(helm: Helm, tmp_path: Path, mode: str) -> str:
    chart = tmp_path / "chart"
    shutil.copytree(CHART_DIR, chart)
    (chart / "templates" / "notes-rendered.yaml").write_text(NOTES_PROBE)
    args = ["template", RELEASE, str(chart), "--namespace", NAMESPACE, "--kube-version", KUBE_VERSION]
    out = helm(*args, "--show-only", "templates/notes-rendered.yaml", *set_args({"aiInference.catalog.mode": mode}))
    text: str = yaml.safe_load(out.stdout)["data"]["notes"]
    return " ".join(text.split())


def test_the_notes_say_what_catalog_mode_enabled_does_without_ai_models(helm: Helm, tmp_path: Path) -> None:
    said = notes(helm, tmp_path / "enabled", "Enabled")
    assert "Catalog integration: Enabled" in said
    assert "Without it the watcher is Ready and serves Hugging Face orders" in said
    assert "reason CatalogNotInstalled" in said
    assert '"the ai-models module is not installed"' in said
    assert "go on by themselves once it is installed" in said
    # With the catalog off, ai-models is nothing to the module: the notes say nothing of it.
    off = notes(helm, tmp_path / "off", "None")
    assert "Catalog integration: None" in off
    assert "CatalogNotInstalled" not in off
