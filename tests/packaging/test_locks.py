"""The hash-pinned locks agree with the pyprojects, are complete, and are what the installs use.

requirements/module.lock pins the production wheel's runtime dependencies (the image installs it,
Dockerfile); requirements/dev.lock pins those, the test extras and the local stack's (dev/) ones
(deploy/dev/bootstrap.sh installs it, so CI runs on it). requirements/lock.sh regenerates both. No
network: the pins are read from the files, and each package's own requirements from its installed
metadata (the venv is installed from dev.lock, so those are the pinned versions' requirements).
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name

REPO_ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = REPO_ROOT / "requirements"
MODULE_LOCK = REQUIREMENTS / "module.lock"
DEV_LOCK = REQUIREMENTS / "dev.lock"
BOOTSTRAP = REPO_ROOT / "deploy" / "dev" / "bootstrap.sh"
# The two distributions of this repository: installed from the tree (editable, --no-deps), never locked.
OWN = {canonicalize_name("ai-inference"), canonicalize_name("ai-inference-dev")}


@dataclass(frozen=True)
class Pin:
    requirement: Requirement
    hashes: tuple[str, ...]

    @property
    def version(self) -> str:
        (spec,) = self.requirement.specifier
        return spec.version

    def applies(self) -> bool:
        """Its environment marker holds on this machine (colorama is Windows'; most pins have none)."""
        marker = self.requirement.marker
        return marker is None or marker.evaluate()


def read_lock(path: Path) -> dict[NormalizedName, Pin]:
    text = re.sub(r"\\\n", " ", path.read_text())
    pins: dict[NormalizedName, Pin] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        requirement, *hashes = line.split(" --hash=")
        pin = Pin(Requirement(requirement.strip()), tuple(h.strip() for h in hashes))
        name = canonicalize_name(pin.requirement.name)
        assert name not in pins, f"{path.name}: {name} pinned twice"
        pins[name] = pin
    return pins


def pyproject(path: Path) -> dict[str, object]:
    project: dict[str, object] = tomllib.loads(path.read_text())["project"]
    return project


def module_requirements() -> list[Requirement]:
    deps = pyproject(REPO_ROOT / "pyproject.toml")["dependencies"]
    assert isinstance(deps, list)
    return [Requirement(d) for d in deps]


def dev_requirements() -> list[Requirement]:
    extras = pyproject(REPO_ROOT / "pyproject.toml")["optional-dependencies"]
    assert isinstance(extras, dict)
    local_stack = pyproject(REPO_ROOT / "dev" / "pyproject.toml")["dependencies"]
    assert isinstance(local_stack, list)
    return [
        *module_requirements(),
        *(Requirement(d) for d in extras["dev"]),
        *(r for r in map(Requirement, local_stack) if canonicalize_name(r.name) not in OWN),
    ]


LOCKS = {"module.lock": (MODULE_LOCK, module_requirements), "dev.lock": (DEV_LOCK, dev_requirements)}


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_every_direct_dependency_is_pinned_at_a_version_its_specifier_allows(lock: str) -> None:
    path, requirements = LOCKS[lock]
    pins = read_lock(path)
    wrong = []
    for requirement in requirements():
        pin = pins.get(canonicalize_name(requirement.name))
        if pin is None:
            wrong.append(f"{requirement}: not in {lock}")
        elif not requirement.specifier.contains(pin.version, prereleases=True):
            wrong.append(f"{requirement}: {lock} pins {pin.version}")
    assert not wrong, "pyproject and the lock disagree (regenerate: bash requirements/lock.sh):\n" + "\n".join(wrong)


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_every_pin_is_one_exact_version_with_its_hashes(lock: str) -> None:
    pins = read_lock(LOCKS[lock][0])
    assert pins
    for name, pin in pins.items():
        assert len(pin.requirement.specifier) == 1, pin.requirement
        (spec,) = pin.requirement.specifier
        assert spec.operator == "==", pin.requirement
        assert not pin.requirement.extras, pin.requirement
        assert pin.requirement.url is None, pin.requirement
        assert pin.hashes, f"{name}: no hash"
        assert all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in pin.hashes), pin.hashes
    # The repository's own distributions come from the tree, not from the index.
    assert not OWN & set(pins)


def test_the_image_runs_the_versions_the_tests_ran() -> None:
    """module.lock is dev.lock's pins for the production dependencies: the same versions and files."""
    dev = read_lock(DEV_LOCK)
    for name, pin in read_lock(MODULE_LOCK).items():
        assert name in dev, f"{name}: in module.lock, not in dev.lock"
        assert (pin.version, set(pin.hashes)) == (dev[name].version, set(dev[name].hashes)), name


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_the_lock_holds_every_requirement_of_what_it_pins(lock: str) -> None:
    """Installed with --no-deps on top of the lock, nothing may be missing: every requirement of every
    pinned package (as its metadata says, on this machine) is pinned too, at an allowed version."""
    pins = read_lock(LOCKS[lock][0])
    environment = {k: str(v) for k, v in default_environment().items()}
    missing = []
    for name, pin in pins.items():
        if not pin.applies():
            continue
        installed = importlib.metadata.version(name)
        assert installed == pin.version, (
            f"{name} {installed} is installed, {lock} pins {pin.version}: run bash deploy/dev/bootstrap.sh"
        )
        for raw in importlib.metadata.requires(name) or []:
            requirement = Requirement(raw)
            if requirement.marker is not None and not requirement.marker.evaluate({**environment, "extra": ""}):
                continue
            needed = pins.get(canonicalize_name(requirement.name))
            if needed is None or not requirement.specifier.contains(needed.version, prereleases=True):
                missing.append(f"{name} {pin.version} requires {requirement}: {lock} has {needed and needed.version}")
    assert not missing, "\n".join(missing)


def test_bootstrap_installs_the_dev_lock_with_hashes_and_the_projects_without_dependencies() -> None:
    script = BOOTSTRAP.read_text()
    locked = script.index("pip install --quiet --require-hashes -r requirements/dev.lock")
    projects = script.index("pip install --quiet --no-deps -e . -e ./dev")
    assert locked < projects
    assert "pip check" in script[projects:]
    # The stamp changes, and the venv is installed again, when a pyproject or a lock changes.
    (stamp,) = [line for line in script.splitlines() if line.startswith("stamp=")]
    for path in ("pyproject.toml", "dev/pyproject.toml", "requirements/dev.lock", "requirements/module.lock"):
        assert f" {path}" in stamp, path


def test_the_locks_say_how_they_are_made_and_the_readme_says_how_to_remake_them() -> None:
    for path in (MODULE_LOCK, DEV_LOCK):
        assert "bash requirements/lock.sh" in path.read_text().splitlines()[1], path
    script = (REQUIREMENTS / "lock.sh").read_text()
    assert "--generate-hashes" in script
    assert "-o requirements/dev.lock" in script
    assert "-o requirements/module.lock" in script
    assert "bash requirements/lock.sh" in (REPO_ROOT / "README.md").read_text()
