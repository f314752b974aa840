"""`ai-inference cluster build` without building anything: versions, cache layout, clear failures."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from devstack.cluster import build
from devstack.cluster.build import TOOLS, BuildError, SourcePatch, ensure_binaries, missing_binaries


def test_versions_come_from_the_wrapper_go_mods() -> None:
    assert {k: t.version for k, t in TOOLS.items()} == {
        "k8s": "v1.34.4",
        "etcd": "v3.6.16",
        "kwok": "v0.8.0",
        "helm": "v3.22.0",
        "kube-score": "v1.20.0",
        "prometheus": "v0.316.0",
        "prometheus-adapter": "v0.12.0",
    }
    assert "-X k8s.io/component-base/version.gitVersion=v1.34.4" in TOOLS["k8s"].ldflags()
    assert "-X k8s.io/client-go/pkg/version.gitMinor=34" in TOOLS["k8s"].ldflags()
    assert "-X main.version=v1.20.0" in TOOLS["kube-score"].ldflags()


def test_cache_is_relocatable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AI_INFERENCE_CACHE", str(tmp_path))
    assert TOOLS["etcd"].bin_dir == tmp_path / "bin" / "etcd-v3.6.16"
    assert build.Binaries.pinned().kwok == tmp_path / "bin" / "kwok-v0.8.0" / "kwok"
    assert [name for _, name in missing_binaries(["etcd"])] == ["etcd"]


def test_present_binaries_are_not_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AI_INFERENCE_CACHE", str(tmp_path))
    etcd = TOOLS["etcd"].bin_dir / "etcd"
    etcd.parent.mkdir(parents=True)
    etcd.write_text("#!/bin/sh\n")
    etcd.chmod(0o755)
    monkeypatch.setenv("PATH", "/nonexistent")  # would fail if it tried to run go
    assert ensure_binaries(["etcd"], progress=None).etcd == etcd


def test_a_patched_binary_without_its_stamp_counts_as_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AI_INFERENCE_CACHE", str(tmp_path))
    k8s = TOOLS["k8s"]
    k8s.bin_dir.mkdir(parents=True)
    for name in k8s.packages:
        (k8s.bin_dir / name).write_text("")
        (k8s.bin_dir / name).chmod(0o755)
    assert [name for _, name in missing_binaries(["k8s"])] == ["kube-scheduler"]
    (k8s.bin_dir / ".kube-scheduler.patches").write_text(k8s.recipe_id("kube-scheduler") + "\n")
    assert missing_binaries(["k8s"]) == []


def test_missing_go_is_explained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AI_INFERENCE_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BuildError, match="`go` is not on PATH"):
        ensure_binaries(["etcd"], progress=None)


@pytest.mark.skipif(shutil.which("go") is None, reason="needs the go toolchain to reach the proxy")
def test_unreachable_module_proxy_is_explained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AI_INFERENCE_CACHE", str(tmp_path / "cache"))
    # An empty module cache and a proxy nobody listens on: the download must fail, fast and clearly.
    monkeypatch.setenv("GOMODCACHE", str(tmp_path / "modcache"))
    monkeypatch.setenv("GOPROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("GOFLAGS", "-modcacherw")
    monkeypatch.setenv("GONOSUMDB", "*")
    monkeypatch.setenv("GOSUMDB", "off")
    # -modcacherw: what go downloads stays deletable, so pytest can clean tmp_path.
    with pytest.raises(BuildError, match="module proxy is unreachable"):
        ensure_binaries(["kwok"], progress=None)
    assert not any((tmp_path / "cache" / "bin").rglob("kwok"))


def test_source_patch_applies_exactly_once() -> None:
    patch = SourcePatch(module="m", file="f.go", old="a()", new="b()", append="\n// x\n", reason="r")
    assert patch.apply("x := a()\n") == "x := b()\n\n// x\n"
    with pytest.raises(BuildError, match="no longer applies"):
        patch.apply("x := b()\n")
