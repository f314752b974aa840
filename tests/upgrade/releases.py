"""Two builds of the module for the upgrade and rollback case: the working tree, and a previous release.

The previous release is a commit of this repository (``AI_INFERENCE_PREVIOUS_RELEASE``, or by default
the release before the newest change to the code the worker and the observer run — see
``previous_release_ref``), extracted with ``git archive`` into the shared cache
(``~/.cache/ai-inference/releases/<commit>/tree``, made once). It runs on this environment's Python
when its dependencies are the working tree's (``PYTHONPATH`` puts its packages first: the editable
install's finder comes after the path); otherwise on a virtual environment of its own, installed once
from its own pyproject into the same cache.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from devstack.cluster.paths import cache_root
from tests.e2e.stand import REPO_ROOT

PREVIOUS_RELEASE_ENV = "AI_INFERENCE_PREVIOUS_RELEASE"
# What the worker and the observer run: a change here is what an upgrade carries.
RUNTIME_PATHS = ("workflows", "activities", "worker", "inference_api", "planner")


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=REPO_ROOT, check=True, capture_output=True, text=True, timeout=120
    ).stdout.strip()


def previous_release_ref() -> str:
    """``$AI_INFERENCE_PREVIOUS_RELEASE``; else, when the working tree changes the runtime code, the
    commit it stands on; else the first parent of the newest commit (first-parent history: main's own
    line) that changed it. Either way a build whose runtime code differs from the working tree's when
    any commit ever changed it."""
    chosen = os.environ.get(PREVIOUS_RELEASE_ENV)
    if chosen:
        return _git("rev-parse", "--verify", f"{chosen}^{{commit}}")
    if _git("status", "--porcelain", "--", *RUNTIME_PATHS):
        return _git("rev-parse", "HEAD")
    newest = _git("log", "--first-parent", "-n", "1", "--format=%H", "HEAD", "--", *RUNTIME_PATHS)
    parent = _git("rev-parse", "--verify", "--quiet", f"{newest}^") if newest else ""
    assert parent, (
        "no previous release in this checkout's history (a shallow clone?): fetch the history "
        f"(`git fetch --unshallow`) or name one with {PREVIOUS_RELEASE_ENV}=<commit>"
    )
    return parent


def _dependencies(pyproject: Path) -> object:
    if not pyproject.is_file():
        return None
    project = tomllib.loads(pyproject.read_text()).get("project", {})
    return [project.get("dependencies"), project.get("optional-dependencies")]


@dataclass(frozen=True)
class Release:
    """A build of the module: its source tree and the Python that runs it."""

    commit: str
    tree: Path
    python: Path

    @property
    def short(self) -> str:
        return self.commit[:9] if self.commit != "working-tree" else "the working tree"

    def env(self, base: dict[str, str]) -> dict[str, str]:
        return {**base, "PYTHONPATH": str(self.tree)}

    def run_python(self, code: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """``code`` run by this build (its packages first on the path), from its own tree."""
        return subprocess.run(
            [str(self.python), "-c", code, *args],
            cwd=self.tree,
            env=self.env(dict(os.environ)),
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def working_tree() -> Release:
    return Release(commit="working-tree", tree=REPO_ROOT, python=Path(sys.executable))


def release(commit: str) -> Release:
    """The build of ``commit``: extracted (and, when its dependencies differ, installed) once."""
    home = cache_root() / "releases" / commit
    tree = home / "tree"
    if not (home / "tree.done").is_file():
        shutil.rmtree(tree, ignore_errors=True)
        tree.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "archive", "--format=tar", commit], cwd=REPO_ROOT, check=True, capture_output=True, timeout=300
        ).stdout
        with tempfile.NamedTemporaryFile(suffix=".tar") as tar:
            tar.write(archive)
            tar.flush()
            subprocess.run(["tar", "-xf", tar.name, "-C", str(tree)], check=True, timeout=300)
        (home / "tree.done").write_text(commit + "\n")
    same = all(
        _dependencies(tree / part / "pyproject.toml") == _dependencies(REPO_ROOT / part / "pyproject.toml")
        for part in (".", "dev")
    )
    if same:
        return Release(commit=commit, tree=tree, python=Path(sys.executable))
    venv = home / "venv"
    if not (home / "venv.done").is_file():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, str(tree)], check=True, timeout=1800)
        if (tree / "dev" / "pyproject.toml").is_file():
            subprocess.run([*pip, str(tree / "dev")], check=True, timeout=1800)
        (home / "venv.done").write_text(json.dumps({"commit": commit}) + "\n")
    return Release(commit=commit, tree=tree, python=venv / "bin" / "python")


def previous_release() -> Release:
    return release(previous_release_ref())
