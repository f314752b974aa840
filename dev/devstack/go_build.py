"""A Go program of a published module, built once from the Go module proxy into the cache.

Nothing serves these programs' binaries on a registry this project can reach, so each is compiled
with the Go toolchain from its module, once, into ``<cache>/<name>-<version>/``::

    bin/<name>      the program
    built.json      written last (version, go, seconds): a build cut short is never taken for done
    .lock           concurrent callers wait, the first builds

``go install <package>@<version>`` refuses a module whose go.mod has ``replace`` directives (only a
main module may have them), so the module is downloaded (``go mod download``: verified against the
Go checksum database like any module) and built as the main module, in the module cache, with its
own go.mod and go.sum (``-mod=readonly``, Go's default: its go.sum verifies every dependency).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devstack.cluster.paths import build_logs_dir, cache_root
from devstack.vllm_env import install_lock

Progress = Callable[[str], None]


class GoBuildError(RuntimeError):
    """The program could not be built; the message says what failed and where its log is."""


@dataclass(frozen=True)
class GoProgram:
    """One program of one module at one version: where it is built and what builds it."""

    name: str  # the binary's name, and the cache folder's prefix
    module: str
    version: str
    package: str  # relative to the module's root, e.g. ./cmd/traefik
    cold_build_minutes: int  # for the progress line (the docs carry the measured figure)

    @property
    def root(self) -> Path:
        return cache_root() / f"{self.name}-{self.version}"

    @property
    def path(self) -> Path:
        return self.root / "bin" / self.name

    @property
    def marker(self) -> Path:
        return self.root / "built.json"

    def is_built(self) -> bool:
        return built(self.marker, self.version, self.path)

    def build_record(self) -> dict[str, Any]:
        """What ``built.json`` says: the version, the Go toolchain, the build's wall time."""
        return build_record(self.marker)


def built(marker: Path, version: str, *binaries: Path) -> bool:
    """Whether every binary is there and executable and ``marker`` (``built.json``) records ``version``."""
    if not (all(os.access(b, os.X_OK) for b in binaries) and marker.is_file()):
        return False
    with contextlib.suppress(ValueError, OSError):
        return bool(json.loads(marker.read_text()).get("version") == version)
    return False


def build_record(marker: Path) -> dict[str, Any]:
    """What a ``built.json`` says: the version, the Go toolchain, the build's wall time."""
    record: dict[str, Any] = json.loads(marker.read_text())
    return record


def go_command(why: str) -> str:
    found = shutil.which("go") or shutil.which("go", path="/usr/local/go/bin")
    if found is None:
        raise GoBuildError(
            f"`go` is not on PATH: {why} is compiled from its Go module. Install Go >= 1.25 (it is also "
            "what the local control plane is built with) and retry."
        )
    return found


def ensure_built(program: GoProgram, progress: Progress | None = None) -> GoProgram:
    """Build ``program`` unless the cache has it; cheap when it does."""
    say = progress or (lambda _line: None)
    if program.is_built():
        return program
    with install_lock(program.root, f"{program.name} {program.version}", say):
        if not program.is_built():  # whoever held the lock may have built it meanwhile
            _build(program, say)
    return program


def module_dir(go: str, module: str, version: str, log: Path) -> Path:
    """The module's source in the module cache (downloaded and verified when missing)."""
    result = subprocess.run(
        [go, "mod", "download", "-json", f"{module}@{version}"], capture_output=True, text=True, check=False
    )
    with log.open("a") as out:
        out.write(result.stdout + result.stderr)
    if result.returncode != 0:
        raise GoBuildError(f"go mod download {module}@{version} failed; log {log}\n{result.stderr[-2000:]}")
    directory = json.loads(result.stdout).get("Dir")
    if not directory:
        raise GoBuildError(f"go mod download {module}@{version} named no directory; log {log}")
    return Path(directory)


def _build(program: GoProgram, say: Progress) -> None:
    go = go_command(f"{program.name} ({program.module})")
    logs = build_logs_dir()
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{program.name}-{program.version}.log"
    log.write_text("")
    say(
        f"building {program.name} {program.version} from its Go module "
        f"(cold: ~{program.cold_build_minutes} min; log {log})"
    )
    started = time.monotonic()
    source = module_dir(go, program.module, program.version, log)
    (program.root / "bin").mkdir(parents=True, exist_ok=True)
    partial = program.root / "bin" / f".{program.name}-{os.getpid()}"
    # -buildvcs=false: nothing to stamp (the module comes from the proxy).
    env = {**os.environ, "GOFLAGS": "-buildvcs=false"}
    command = [go, "build", "-trimpath", "-ldflags=-s -w", "-o", str(partial), program.package]
    with log.open("a") as out:
        out.write(f"$ (cd {source} && {' '.join(command)})\n")
        out.flush()
        result = subprocess.run(command, cwd=source, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    seconds = time.monotonic() - started
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        tail = "".join(log.read_text().splitlines(keepends=True)[-15:])
        raise GoBuildError(f"go build of {program.name} failed (exit {result.returncode}); log {log}\n{tail}")
    os.replace(partial, program.path)
    go_version = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True).stdout.strip()
    record = {"version": program.version, "go": go_version, "seconds": round(seconds, 1)}
    program.marker.write_text(json.dumps(record) + "\n")
    say(f"  {program.name} {program.version}: built in {seconds:.0f}s -> {program.path}")
