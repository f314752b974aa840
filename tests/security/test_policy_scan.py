"""A peer policy check: kube-score over the order workloads and the rendered chart, clean but for
the exceptions deploy/policy/kube-score.yaml lists with their reasons.

The workloads are the golden manifests of the builders (tests/builders/golden/<case>/: what the
worker applies for one order), each case scanned as one set so that cross-object checks (a
NetworkPolicy selecting the pods, a Service for the StatefulSet) see the order's own objects. The
chart is rendered by the pinned helm with the monitoring APIs served, so every template a cluster
can get is scanned. A finding no exception matches fails; so does an exception nothing matches
any more (fixed, or the check renamed): the list says exactly what stands and why.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.helm import MONITORING_APIS, REPO_ROOT, Helm

CONFIG = REPO_ROOT / "deploy" / "policy" / "kube-score.yaml"
GOLDEN = REPO_ROOT / "tests" / "builders" / "golden"
ADMIN_GUIDE = REPO_ROOT / "docs" / "admin-guide.md"


@dataclass(frozen=True)
class Finding:
    source: str  # workload | chart
    kind: str
    name: str
    check: str
    container: str
    summary: str

    def __str__(self) -> str:
        where = f"{self.kind}/{self.name}" + (f" [{self.container}]" if self.container else "")
        return f"{self.source}: {where}: {self.check}: {self.summary}"


def config() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(CONFIG.read_text())
    return loaded


def scan(kube_score: Path, source: str, manifests: list[Path]) -> list[Finding]:
    scanner = config()["scanner"]
    command = [
        str(kube_score),
        "score",
        "--output-format",
        "json",
        "--kubernetes-version",
        scanner["kubernetesVersion"],
        # An annotation on an object cannot hide a finding from this check.
        "--disable-ignore-checks-annotations",
        *[arg for check in scanner["enableOptional"] for arg in ("--enable-optional-test", check)],
        *map(str, manifests),
    ]
    # Exit status 1 means "findings", which are judged below; anything else is a broken run.
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode in (0, 1), result.stderr
    findings = []
    for obj in json.loads(result.stdout):
        for check in obj["checks"]:
            if check.get("skipped") or check["grade"] >= 10:
                continue
            for comment in check.get("comments") or [{}]:
                findings.append(
                    Finding(
                        source=source,
                        kind=obj["type_meta"]["kind"],
                        name=obj["object_meta"]["name"],
                        check=check["check"]["id"],
                        container=comment.get("path") or "",
                        summary=comment.get("summary") or "",
                    )
                )
    return findings


def matches(exception: dict[str, Any], finding: Finding) -> bool:
    return (
        exception["check"] == finding.check
        and exception["source"] == finding.source
        and exception.get("kind", finding.kind) == finding.kind
        and (not exception.get("containers") or finding.container in exception["containers"])
        and exception.get("summary", finding.summary) == finding.summary
    )


def judge(findings: list[Finding]) -> tuple[list[Finding], list[dict[str, Any]]]:
    """(findings no exception explains, exceptions that explain no finding)."""
    exceptions = config()["exceptions"]
    unexplained = [f for f in findings if not any(matches(e, f) for e in exceptions)]
    unused = [e for e in exceptions if not any(matches(e, f) for f in findings)]
    return unexplained, unused


def write_chart(helm: Helm, path: Path) -> Path:
    rendered = helm.render(api_versions=MONITORING_APIS)
    path.write_text(yaml.safe_dump_all(rendered))
    return path


@pytest.fixture(scope="module")
def findings(kube_score: Path, helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> list[Finding]:
    out: list[Finding] = []
    cases = sorted(p for p in GOLDEN.iterdir() if p.is_dir() and not p.name.startswith("_"))
    assert cases, GOLDEN
    for case in cases:
        out += scan(kube_score, "workload", sorted(case.glob("*.yaml")))
    out += scan(kube_score, "chart", [write_chart(helm, tmp_path_factory.mktemp("chart") / "chart.yaml")])
    return out


def test_the_config_gives_every_exception_a_reason() -> None:
    for exception in config()["exceptions"]:
        assert exception["source"] in ("workload", "chart"), exception
        assert len(exception.get("reason", "").split()) >= 8, exception
        assert set(exception) <= {"check", "source", "kind", "containers", "summary", "owner", "reason"}, exception


def test_workloads_and_chart_are_clean_but_for_the_listed_exceptions(findings: list[Finding]) -> None:
    unexplained, unused = judge(findings)
    assert not unexplained, "kube-score findings with no exception in deploy/policy/kube-score.yaml:\n" + "\n".join(
        map(str, unexplained)
    )
    stale = [(e["source"], e["check"]) for e in unused]
    assert not stale, f"exceptions no finding needs any more (remove them): {stale}"


def test_the_scan_sees_what_it_must(kube_score: Path, tmp_path: Path) -> None:
    """The scanner is not blind: a privileged, root, unlimited pod is reported, and an exception of
    the config does not cover it (exceptions are per source, kind and container)."""
    bad = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "bad", "namespace": "d8-ai-inference"},
        "spec": {
            "selector": {"matchLabels": {"app": "bad"}},
            "template": {
                "metadata": {"labels": {"app": "bad"}},
                "spec": {
                    "containers": [{"name": "bad", "image": "busybox:latest", "securityContext": {"privileged": True}}]
                },
            },
        },
    }
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    found = scan(kube_score, "chart", [path])
    checks = {f.check for f in found}
    assert {"container-security-context-privileged", "container-image-tag", "pod-networkpolicy"} <= checks, checks
    unexplained, _ = judge(found)
    assert {"container-security-context-privileged", "container-image-tag"} <= {f.check for f in unexplained}


def test_the_admin_guide_explains_each_check_that_stands() -> None:
    guide = ADMIN_GUIDE.read_text()
    section = guide[guide.index("### Policy scan") :]
    for exception in config()["exceptions"]:
        assert f"`{exception['check']}`" in section, exception["check"]
