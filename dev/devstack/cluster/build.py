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
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from devstack.cluster.paths import CONTROLPLANE_DIR, bin_root, build_logs_dir, cache_root


class BuildError(RuntimeError):
    """A binary could not be built; the message says what to do about it."""


@dataclass(frozen=True)
class SourcePatch:
    """An upstream fix the pinned release lacks, applied at build time (see ``_patched_modfile``).

    No fork and no vendored copy in the repo: the patched file is produced from the module
    cache's original by one exact text substitution (the build fails loudly when the text is not there exactly once,
    e.g. after a version bump that already carries the fix) plus an optional appended snippet.
    """

    module: str
    file: str  # path inside the module
    old: str
    new: str
    append: str = ""
    reason: str = ""

    def apply(self, original: str) -> str:
        if original.count(self.old) != 1:
            raise BuildError(
                f"patch for {self.module}/{self.file} no longer applies ({self.reason}); "
                f"drop or update it in dev/devstack/cluster/build.py"
            )
        return original.replace(self.old, self.new) + self.append


# kubernetes/kubernetes#133705, fixed upstream by #133706 (1.35), not in any 1.34.x (checked up to
# v0.34.13): with DRAConsumableCapacity the experimental allocator checks the capacity of
# slice.Spec.Devices[<n-th device of the request>] instead of the candidate device. With several
# devices in one ResourceSlice, a claim then fails whenever the slice's FIRST device is consumed
# ("cannot allocate all claims"), or overcommits a device when the first one is free.
DRA_CONSUMABLE_CAPACITY_FIX = SourcePatch(
    module="k8s.io/dynamic-resource-allocation",
    file="structured/internal/experimental/allocator_experimental.go",
    old="success, err := alloc.CmpRequestOverCapacity(requestData.request, device.slice, r.deviceIndex)",
    new="success, err := alloc.cmpDeviceRequestOverCapacity(requestData.request, device)",
    append="""
// cmpDeviceRequestOverCapacity checks the capacity of the candidate device itself.
// Backport of kubernetes/kubernetes#133706 applied by ai-inference's control-plane build.
func (alloc *allocator) cmpDeviceRequestOverCapacity(request requestAccessor, device deviceWithID) (bool, error) {
	consumed := NewConsumedCapacity()
	if allocated, found := alloc.allocatedState.AggregatedCapacity[device.id]; found {
		consumed = allocated
	}
	return CmpRequestOverCapacity(consumed, request.capacities(), device.AllowMultipleAllocations,
		device.Capacity, alloc.allocatingCapacity[device.id])
}
""",
    reason="kubernetes/kubernetes#133705: consumable capacity checked on the wrong device",
)


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
    # binary name -> source patches its build needs (see SourcePatch).
    patches: dict[str, tuple[SourcePatch, ...]] = field(default_factory=dict)
    # Stamp every binary with its build recipe, so a recipe change (ldflags) rebuilds it.
    # Patched binaries are always stamped; the others only where the recipe changed after the
    # first hand-made builds (their unstamped binaries would otherwise be trusted forever).
    stamp_recipe: bool = False

    def patch_id(self, name: str) -> str:
        """Identity of the patch set of ``name`` ("" when unpatched), stamped beside the binary."""
        patches = self.patches.get(name, ())
        if not patches:
            return ""
        return hashlib.sha256(repr(patches).encode()).hexdigest()[:16]

    def recipe_id(self, name: str) -> str:
        """What the stamp beside the binary must say ("" = no stamp needed)."""
        if not self.patches.get(name) and not self.stamp_recipe:
            return ""
        recipe = repr((self.patches.get(name, ()), self.ldflags(), self.tags, self.cgo))
        return hashlib.sha256(recipe.encode()).hexdigest()[:16]

    def is_built(self, name: str) -> bool:
        path = self.bin_dir / name
        if not os.access(path, os.X_OK):
            return False
        wanted = self.recipe_id(name)
        stamp = _patch_stamp(path)
        return (stamp.read_text().strip() if stamp.is_file() else "") == wanted

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
        fields = {"version": version, "major": major, "minor": minor}
        if any("{k8s_" in t for t in self.ldflags_template):
            # Kubernetes version of the client-go the tool is built with (helm's Makefile rule:
            # client-go v0.X.Y is Kubernetes 1.X).
            client_go = pinned_version(self.module_dir / "go.mod", "k8s.io/client-go").lstrip("v").split(".")
            fields |= {"k8s_major": str(int(client_go[0]) + 1), "k8s_minor": client_go[1]}
        return " ".join(t.format(**fields) for t in self.ldflags_template)


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
        patches={"kube-scheduler": (DRA_CONSUMABLE_CAPACITY_FIX,)},
    ),
    "etcd": Tool(key="etcd", module="go.etcd.io/etcd/server/v3", packages={"etcd": "go.etcd.io/etcd/server/v3"}),
    "kwok": Tool(key="kwok", module="sigs.k8s.io/kwok", packages={"kwok": "sigs.k8s.io/kwok/cmd/kwok"}),
    "helm": Tool(
        key="helm",
        module="helm.sh/helm/v3",
        packages={"helm": "helm.sh/helm/v3/cmd/helm"},
        # helm's Makefile stamps these; without them `helm version` is empty and `helm template`
        # / `helm lint` assume Kubernetes v1.20, so charts with a kubeVersion constraint fail.
        ldflags_template=(
            "-s",
            "-w",
            "-X helm.sh/helm/v3/internal/version.version={version}",
            "-X helm.sh/helm/v3/internal/version.gitTreeState=clean",
            *(
                f"-X helm.sh/helm/v3/pkg/{pkg}.k8sVersion{part}={{k8s_{part.lower()}}}"
                for pkg in ("lint/rules", "chartutil")
                for part in ("Major", "Minor")
            ),
        ),
        stamp_recipe=True,
    ),
    # The policy scanner of the chart and the workload manifests (tests/security/test_policy_scan.py,
    # exceptions in deploy/policy/kube-score.yaml). kube-linter's vanity import path is not served by
    # the Go module proxy; kube-score is.
    "kube-score": Tool(
        key="kube-score",
        module="github.com/zegl/kube-score",
        packages={"kube-score": "github.com/zegl/kube-score/cmd/kube-score"},
        cgo=False,
        ldflags_template=("-s", "-w", "-X main.version={version}"),
        stamp_recipe=True,
    ),
    # The metrics parts of the local stack (dev/devstack/metrics/): Prometheus scrapes the stand-in
    # runtimes and the module, the adapter serves custom.metrics.k8s.io to the HPA controller.
    "prometheus": Tool(
        key="prometheus",
        module="github.com/prometheus/prometheus",
        packages={name: f"github.com/prometheus/prometheus/cmd/{name}" for name in ("prometheus", "promtool")},
        cgo=False,
        # Upstream's release tags minus builtinassets (no web UI); remove_all_sd keeps only the
        # file and HTTP discoveries the local stack uses and halves the build.
        tags="netgo,remove_all_sd",
        ldflags_template=("-s", "-w", "-X github.com/prometheus/common/version.Version={version}"),
        stamp_recipe=True,
    ),
    "prometheus-adapter": Tool(
        key="prometheus-adapter",
        module="sigs.k8s.io/prometheus-adapter",
        packages={"prometheus-adapter": "sigs.k8s.io/prometheus-adapter/cmd/adapter"},
        cgo=False,
        stamp_recipe=True,
    ),
}

CONTROL_PLANE_TOOLS = ("k8s", "etcd", "kwok")
METRICS_TOOLS = ("prometheus", "prometheus-adapter")


def _patch_stamp(binary: Path) -> Path:
    return binary.with_name(f".{binary.name}.patches")


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
    kube_score: Path
    prometheus: Path
    promtool: Path
    prometheus_adapter: Path

    @classmethod
    def pinned(cls) -> Binaries:
        k8s, etcd, kwok, helm = (TOOLS[k].bin_dir for k in ("k8s", "etcd", "kwok", "helm"))
        prometheus, adapter = (TOOLS[k].bin_dir for k in METRICS_TOOLS)
        return cls(
            prometheus=prometheus / "prometheus",
            promtool=prometheus / "promtool",
            prometheus_adapter=adapter / "prometheus-adapter",
            kube_apiserver=k8s / "kube-apiserver",
            kube_controller_manager=k8s / "kube-controller-manager",
            kube_scheduler=k8s / "kube-scheduler",
            kubectl=k8s / "kubectl",
            etcd=etcd / "etcd",
            kwok=kwok / "kwok",
            helm=helm / "helm",
            kube_score=TOOLS["kube-score"].bin_dir / "kube-score",
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
            if not tool.is_built(name):
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
    patches = tool.patches.get(name, ())
    say(f"  {name} {tool.version}: building{' with source patches' if patches else ''} (log {log})")
    started = time.monotonic()
    if patches:
        cmd[2:2] = [f"-modfile={_patched_modfile(tool, name)}"]
    cmd.append(tool.packages[name])
    with log.open("w") as out:
        out.write(" ".join(cmd) + "\n")
        out.flush()
        result = subprocess.run(cmd, cwd=tool.module_dir, env=_go_env(tool), stdout=out, stderr=subprocess.STDOUT)
    elapsed = time.monotonic() - started
    if result.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError(_explain_go_failure(f"go build {name}", log.read_text()) + f"\n(full log: {log})")
    stamp = _patch_stamp(target)
    if tool.recipe_id(name):
        stamp.write_text(tool.recipe_id(name) + "\n")
    else:
        stamp.unlink(missing_ok=True)
    os.replace(tmp, target)
    say(f"  {name} {tool.version}: built in {elapsed:.0f}s -> {target}")


def _patched_modfile(tool: Tool, name: str) -> Path:
    """A go.mod twin whose replace directives point at patched copies of the patched modules.

    ``go build -overlay`` refuses files under GOMODCACHE, so each patched module is copied out of
    the module cache once (into ``<cache>/src/``, under a name carrying the patch id, so the paths
    - and with them the Go build cache - stay stable across rebuilds) and the build uses
    ``-modfile`` with a go.mod/go.sum pair that replaces the module by that directory. The
    committed wrapper go.mod stays untouched.
    """
    patch_id = tool.patch_id(name)
    src_root = cache_root() / "src"
    src_root.mkdir(parents=True, exist_ok=True)
    by_module: dict[str, list[SourcePatch]] = {}
    for patch in tool.patches[name]:
        by_module.setdefault(patch.module, []).append(patch)
    modfile = src_root / f"{tool.key}-{tool.version}-{name}-{patch_id}.mod"
    shutil.copyfile(tool.module_dir / "go.mod", modfile)
    shutil.copyfile(tool.module_dir / "go.sum", modfile.with_suffix(".sum"))
    for module, patches in by_module.items():
        listed = subprocess.run(
            ["go", "list", "-m", "-json", module],
            cwd=tool.module_dir,
            env=_go_env(tool),
            capture_output=True,
            text=True,
        )
        if listed.returncode != 0:
            raise BuildError(_explain_go_failure(f"go list -m {module}", listed.stderr))
        info = json.loads(listed.stdout)
        effective = info.get("Replace") or info
        dest = src_root / f"{module.replace('/', '_')}@{effective['Version']}-patched-{patch_id}"
        if not dest.is_dir():
            staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=src_root))
            shutil.copytree(effective["Dir"], staging / "m")
            for path in (staging / "m").rglob("*"):
                # The module cache is read-only; the copy must be writable (and removable).
                path.chmod(path.stat().st_mode | 0o200)
            (staging / "m").chmod(0o755)
            for patch in patches:
                target = staging / "m" / patch.file
                target.write_text(patch.apply(target.read_text()))
            os.replace(staging / "m", dest)
            shutil.rmtree(staging, ignore_errors=True)
        edit = subprocess.run(
            ["go", "mod", "edit", f"-replace={module}={dest}", str(modfile)],
            env=_go_env(tool),
            capture_output=True,
            text=True,
        )
        if edit.returncode != 0:
            raise BuildError(f"go mod edit failed: {edit.stderr.strip()}")
    return modfile


def describe(tools: Iterable[str] = TOOLS) -> list[tuple[str, str, Path, bool]]:
    """(binary, version, path, present) for each pinned binary, for `cluster build --check`."""
    rows = []
    for key in tools:
        tool = TOOLS[key]
        for name in tool.packages:
            path = tool.bin_dir / name
            rows.append((name, tool.version, path, tool.is_built(name)))
    return rows
