"""The metrics parts are built like the control plane: pinned by wrapper go.mod files, cached per version."""

from __future__ import annotations

from devstack.cluster.build import METRICS_TOOLS, TOOLS
from tests.metrics.promtool import Promtool


def test_versions_come_from_the_wrapper_go_mods() -> None:
    assert {key: TOOLS[key].version for key in METRICS_TOOLS} == {
        "prometheus": "v0.316.0",
        "prometheus-adapter": "v0.12.0",
    }
    assert TOOLS["prometheus"].packages == {
        "prometheus": "github.com/prometheus/prometheus/cmd/prometheus",
        "promtool": "github.com/prometheus/prometheus/cmd/promtool",
    }
    assert TOOLS["prometheus-adapter"].packages == {"prometheus-adapter": "sigs.k8s.io/prometheus-adapter/cmd/adapter"}
    assert "-X github.com/prometheus/common/version.Version=v0.316.0" in TOOLS["prometheus"].ldflags()
    # No web UI assets, no cloud service discoveries: only what the local stack uses.
    assert set(TOOLS["prometheus"].tags.split(",")) == {"netgo", "remove_all_sd"}


def test_promtool_is_the_pinned_build(promtool: Promtool) -> None:
    result = promtool("--version")
    assert result.returncode == 0, result.stderr
    assert "version v0.316.0" in result.stdout + result.stderr
    assert promtool.binary.parent == TOOLS["prometheus"].bin_dir
