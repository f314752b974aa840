"""A cached vLLM environment: the runtime release the recipes ship, installed once, checked against.

The compatibility tests (``tests/vllm/``) run vLLM's own argument parser and read its own metric
names, so they need the real package, not a copy of its flags. Like the control-plane binaries it
is installed once into the cache and reused::

    <cache>/vllm-<version>/venv/         python3.11 -m venv; pip install vllm==<version>
    <cache>/vllm-<version>/installed.json  written last: the install finished (version, seconds)
    <cache>/vllm-<version>/.lock           concurrent callers wait instead of installing twice

``<cache>`` is ``$AI_INFERENCE_CACHE`` or ``~/.cache/ai-inference``. The version is the one the
shipped recipe table names (``recipes/runtime-recipes.compiled.yaml``), so moving the recipes
to a new release moves the checked environment with them. An install interrupted halfway leaves
no marker: the next call removes the venv and installs again. A cold install downloads torch and
the CUDA libraries (about 3 minutes and 9.4 GB here); no GPU is needed to install it or to build
its argument parser.

``python -m devstack.vllm_env`` installs it (if missing) and prints the venv's python.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from devstack.cluster.paths import build_logs_dir, cache_root
from planner.recipes import load_recipe_book

Progress = Callable[[str], None]

PYTHON = "python3.11"  # the newest Python every pinned vLLM release publishes wheels for
MARKER = "installed.json"
LOCK = ".lock"


class VllmEnvError(RuntimeError):
    """The vLLM environment could not be created; the message says what failed and where its log is."""


def shipped_vllm_version() -> str:
    """The vLLM release the shipped recipe table targets."""
    runtime = load_recipe_book().compiled.runtime
    if runtime.name != "vllm":
        raise VllmEnvError(f"the shipped recipes target runtime {runtime.name!r}, not vllm")
    return runtime.version


@dataclass(frozen=True)
class VllmEnv:
    version: str
    root: Path

    @property
    def venv(self) -> Path:
        return self.root / "venv"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def marker(self) -> Path:
        return self.root / MARKER

    def is_installed(self) -> bool:
        if not (self.marker.is_file() and self.python.exists()):
            return False
        try:
            recorded = json.loads(self.marker.read_text())
        except ValueError:
            return False
        return isinstance(recorded, dict) and recorded.get("version") == self.version


def vllm_env(version: str | None = None) -> VllmEnv:
    version = version or shipped_vllm_version()
    return VllmEnv(version, cache_root() / f"vllm-{version}")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@contextlib.contextmanager
def install_lock(root: Path, what: str, say: Progress) -> Iterator[None]:
    """One install of an environment under ``root`` at a time: a second caller waits for the first."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / LOCK).open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"another install of {what} is running; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def run_logged(command: list[str], log: Path, what: str, error: type[Exception] = VllmEnvError) -> None:
    """Run ``command`` with its output appended to ``log``; a failure raises ``error`` with the log's tail."""
    with log.open("a") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        result = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False)
    if result.returncode != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-15:])
        raise error(f"{what} failed (exit {result.returncode}); full log: {log}\n{tail}")


def _install(env: VllmEnv, say: Progress) -> None:
    python = shutil.which(PYTHON)
    if python is None:
        raise VllmEnvError(f"{PYTHON} is not on PATH; the vLLM environment is made with `{PYTHON} -m venv`")
    if env.venv.exists():
        say(f"removing an unfinished vLLM {env.version} environment at {env.venv}")
        shutil.rmtree(env.venv)
    env.marker.unlink(missing_ok=True)
    logs = build_logs_dir()
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"vllm-{env.version}.log"
    log.write_text("")
    say(f"installing vLLM {env.version} into {env.venv} (a few minutes, about 10 GB; log: {log})")
    started = time.monotonic()
    run_logged([python, "-m", "venv", str(env.venv)], log, f"{PYTHON} -m venv {env.venv}")
    run_logged(
        [str(env.python), "-m", "pip", "install", "--disable-pip-version-check", f"vllm=={env.version}"],
        log,
        f"pip install vllm=={env.version}",
    )
    seconds = round(time.monotonic() - started, 1)
    # Last: only a finished install leaves the marker.
    env.marker.write_text(json.dumps({"version": env.version, "python": PYTHON, "installSeconds": seconds}) + "\n")
    say(f"installed vLLM {env.version} in {seconds:.0f}s")


def ensure_vllm_env(version: str | None = None, progress: Progress | None = _stderr) -> VllmEnv:
    """The cached environment of ``version`` (default: the shipped one), installed if missing.

    Cheap when it is there (two stat calls and a small read). Concurrent callers serialize on a
    lock file; whoever waited re-checks and finds it installed.
    """
    env = vllm_env(version)
    if env.is_installed():
        return env
    say = progress or (lambda _line: None)
    with install_lock(env.root, f"vLLM {env.version}", say):
        if not env.is_installed():
            _install(env, say)
    return env


def main() -> None:
    env = ensure_vllm_env()
    print(env.python)


if __name__ == "__main__":
    main()
