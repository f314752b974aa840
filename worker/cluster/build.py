"""Build the control-plane binaries from the pinned Go wrapper modules in ``deploy/controlplane/``.

Nothing ships kube-apiserver, etcd or kwok on a package registry this project can reach, so they
are compiled with the Go toolchain from the Go module proxy. The versions come from the wrapper
``go.mod`` files (one source of truth); each binary lands in ``<cache>/bin/<tool>-<version>/`` and
is only rebuilt when missing. Builds write to a temporary name and rename, so a killed build
never leaves a half-written binary that a later run would trust.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from worker.cluster.paths import CONTROLPLANE_DIR, bin_root, build_logs_dir


class BuildError(RuntimeError):
    """A binary could not be built; the message says what to do about it."""


@dataclass(frozen=True)
class Tool:
    """One Go wrapper module and the binaries built from it."""

    key: str
    module: str  # the pinned upstream module whose version names the cache directory
    packages: dict[str, str]  # binary name -> Go package
    # None: the toolchain's default (matches the documented manual builds and their cache).
    cgo: bool | None = None
    tags: str = ""
    # Version ldflags need the version, so they are produced late from a template.
    ldflags_template: tuple[str, ...] = ("-s", "-w")
    env: dict[str, str] = field(default_factory=dict)

    @property
    def module_dir(self) -> Path:
        return CONTROLPLANE_DIR / self.key_dir

    @property
    def key_dir(self) -> str:
        return "kubernetes" if self.key == "k8s" else self.key

    @property
    def version(self) -> str:
        return pinned_version(self.module_dir / "go.mod", self.module)

    @property
    def bin_dir(self) -> Path:
        return bin_root() / f"{self.key}-{self.version}"

    def ldflags(self) -> str:
        version = self.version
        major, minor = version.lstrip("v").split(".")[:2]
        return " ".join(t.format(version=version, major=major, minor=minor) for t in self.ldflags_template)


_K8S_VERSION_FLAGS = tuple(
    f"-X {pkg}.{name}={value}"
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
    for name, value in (("gitVersion", "{version}"), ("gitMajor", "{major}"), ("gitMinor", "{minor}"))
)

TOOLS: dict[str, Tool] = {
    "k8s": Tool(
        key="k8s",
        module="k8s.io/kubernetes",
        packages={
            name: f"k8s.io/kubernetes/cmd/{name}"
            for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
        },
        cgo=False,
        # Upstream's release tags: no SELinux cgo, no test-only code, no gRPC tracing overhead.
        tags="selinux,notest,grpcnotrace",
        # Without the version stamps /version reports v0.0.0-master and clients warn about skew.
        ldflags_template=("-s", "-w", *_K8S_VERSION_FLAGS),
    ),
    "etcd": Tool(key="etcd", module="go.etcd.io/etcd/server/v3", packages={"etcd": "go.etcd.io/etcd/server/v3"}),
    "kwok": Tool(key="kwok", module="sigs.k8s.io/kwok", packages={"kwok": "sigs.k8s.io/kwok/cmd/kwok"}),
    "helm": Tool(key="helm", module="helm.sh/helm/v3", packages={"helm": "helm.sh/helm/v3/cmd/helm"}),
}

CONTROL_PLANE_TOOLS = ("k8s", "etcd", "kwok")


def pinned_version(go_mod: Path, module: str) -> str:
    """The version ``go.mod`` requires for ``module`` (the wrapper pins it, tool directives keep it)."""
    text = go_mod.read_text()
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", text, re.MULTILINE)
    if not match:
        raise BuildError(f"{go_mod} does not require {module}")
    return match.group(1)


@dataclass(frozen=True)
class Binaries:
    """Paths of the pinned binaries (they exist once ``ensure_binaries`` returned for their tool)."""

    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    etcd: Path
    kwok: Path
    helm: Path

    @classmethod
    def pinned(cls) -> Binaries:
        k8s, etcd, kwok, helm = (TOOLS[k].bin_dir for k in ("k8s", "etcd", "kwok", "helm"))
        return cls(
            kube_apiserver=k8s / "kube-apiserver",
            kube_controller_manager=k8s / "kube-controller-manager",
            kube_scheduler=k8s / "kube-scheduler",
            kubectl=k8s / "kubectl",
            etcd=etcd / "etcd",
            kwok=kwok / "kwok",
            helm=helm / "helm",
        )


Progress = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def missing_binaries(tools: Iterable[str] = TOOLS) -> list[tuple[Tool, str]]:
    """(tool, binary name) for every pinned binary not in the cache yet."""
    out = []
    for key in tools:
        tool = TOOLS[key]
        for name in tool.packages:
            if not os.access(tool.bin_dir / name, os.X_OK):
                out.append((tool, name))
    return out


def ensure_binaries(tools: Iterable[str] = TOOLS, progress: Progress | None = _stderr) -> Binaries:
    """Build whatever pinned binary of ``tools`` is missing, then return all the pinned paths.

    Cheap when everything is there (a few stat calls). Concurrent callers (two test sessions, a
    CLI and a fixture) serialize on a lock file instead of compiling the same thing twice.
    """
    tools = tuple(tools)
    unknown = set(tools) - set(TOOLS)
    if unknown:
        raise BuildError(f"unknown tools {sorted(unknown)}; known: {sorted(TOOLS)}")
    say = progress or (lambda _line: None)
    if missing_binaries(tools):
        with _build_lock(say):
            # Re-check under the lock: whoever held it may have built them meanwhile.
            todo = missing_binaries(tools)
            if todo:
                _check_go()
                total = time.monotonic()
                prepared: set[str] = set()
                for tool, name in todo:
                    if tool.key not in prepared:
                        _download_modules(tool, say)
                        prepared.add(tool.key)
                    _build_one(tool, name, say)
                say(f"built {len(todo)} binaries in {time.monotonic() - total:.0f}s")
    return Binaries.pinned()


@contextlib.contextmanager
def _build_lock(say: Progress) -> Iterator[None]:
    bin_root().mkdir(parents=True, exist_ok=True)
    with (bin_root() / ".build.lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say("another build of the control-plane binaries is running; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _check_go() -> None:
    if shutil.which("go") is None:
        raise BuildError(
            "`go` is not on PATH: the control-plane binaries are compiled from Go modules "
            "(see deploy/controlplane/). Install Go >= 1.24 and retry `ai-inference cluster build`."
        )


# Substrings of `go` errors that mean the module proxy (or the network to it) is the problem.
_NETWORK_ERRORS = (
    "dial tcp",
    "no such host",
    "connection refused",
    "i/o timeout",
    "TLS handshake timeout",
    "proxyconnect",
    "network is unreachable",
    "server misbehaving",
    "GOPROXY=off",
    "module lookup disabled",
)


def _go_env(tool: Tool) -> dict[str, str]:
    env = dict(os.environ)
    if tool.cgo is not None:
        env["CGO_ENABLED"] = "1" if tool.cgo else "0"
    # The wrapper go.mod files pin everything; never let a build edit them.
    env["GOFLAGS"] = (env.get("GOFLAGS", "") + " -mod=readonly").strip()
    env.update(tool.env)
    return env


def _download_modules(tool: Tool, say: Progress) -> None:
    """Fetch the module graph first so an unreachable proxy fails fast with a clear message."""
    started = time.monotonic()
    result = subprocess.run(
        ["go", "mod", "download"],
        cwd=tool.module_dir,
        env=_go_env(tool),
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise BuildError(_explain_go_failure(f"go mod download ({tool.key})", result.stderr))
    say(f"  {tool.key} {tool.version}: modules ready ({time.monotonic() - started:.0f}s)")


def _explain_go_failure(what: str, stderr: str) -> str:
    tail = "\n".join(stderr.strip().splitlines()[-15:])
    if any(marker in stderr for marker in _NETWORK_ERRORS):
        proxy = os.environ.get("GOPROXY") or _go_env_value("GOPROXY")
        return (
            f"{what} failed: the Go module proxy is unreachable (GOPROXY={proxy}). "
            f"Check the network or point GOPROXY at a reachable proxy; modules already in the "
            f"module cache are used without it.\n{tail}"
        )
    return f"{what} failed:\n{tail}"


def _go_env_value(name: str) -> str:
    try:
        return subprocess.run(["go", "env", name], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "?"


def _build_one(tool: Tool, name: str, say: Progress) -> None:
    tool.bin_dir.mkdir(parents=True, exist_ok=True)
    build_logs_dir().mkdir(parents=True, exist_ok=True)
    target = tool.bin_dir / name
    # Hidden, pid-unique temp name in the same directory: the rename below is atomic, and a
    # crashed build leaves only a dot-file that the existence check ignores.
    tmp = tool.bin_dir / f".{name}.tmp-{os.getpid()}"
    log = build_logs_dir() / f"{tool.key}-{tool.version}-{name}.log"
    # Same flags as the documented manual build, so the Go build cache is shared with it.
    cmd = ["go", "build", "-ldflags", tool.ldflags(), "-o", str(tmp)]
    if tool.tags:
        cmd[2:2] = ["-tags", tool.tags]
    cmd.append(tool.packages[name])
    say(f"  {name} {tool.version}: building (log {log})")
    started = time.monotonic()
    with log.open("w") as out:
        out.write(" ".join(cmd) + "\n")
        out.flush()
        result = subprocess.run(cmd, cwd=tool.module_dir, env=_go_env(tool), stdout=out, stderr=subprocess.STDOUT)
    elapsed = time.monotonic() - started
    if result.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError(_explain_go_failure(f"go build {name}", log.read_text()) + f"\n(full log: {log})")
    os.replace(tmp, target)
    say(f"  {name} {tool.version}: built in {elapsed:.0f}s -> {target}")


def describe(tools: Iterable[str] = TOOLS) -> list[tuple[str, str, Path, bool]]:
    """(binary, version, path, present) for each pinned binary, for `cluster build --check`."""
    rows = []
    for key in tools:
        tool = TOOLS[key]
        for name in tool.packages:
            path = tool.bin_dir / name
            rows.append((name, tool.version, path, os.access(path, os.X_OK)))
    return rows
