"""The ``model-fetcher`` init container of a built pod, run on this machine as a kubelet would run it.

The container's own ``command`` (the builder's script) and ``env`` are used as they are, with three
changes a node makes for them: the paths of the pod's volumes (``/models``, ``HOME``) point at
folders of this machine, a ``secretKeyRef`` reads the Secret's value from ``secrets``, and ``PATH``
leads to the Python environment that carries the Hugging Face CLI (this process's, as the runtime
image carries it). ``HF_ENDPOINT`` names the hub (the stand-in of ``devstack.standins.hub``) as a
mirror setting would, unless the container's own environment sets it (the module's mirror setting).

What the kubelet keeps of a container that fails with ``terminationMessagePolicy:
FallbackToLogsOnError`` is its log's tail: the last 80 lines, at most 2048 bytes
(``termination_message``): what the observer reads from ``lastState.terminated.message``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from activities.builders.common import MODEL_MOUNT_PATH
from activities.builders.statefulset import HOME_PATH

# The kubelet's tail of a failed container's log (kubecontainer.MaxContainerTerminationMessageLogLines/Length).
TERMINATION_LOG_LINES = 80
TERMINATION_LOG_BYTES = 2048


def termination_message(log: str) -> str:
    """What ``FallbackToLogsOnError`` leaves in the terminated state: the log's last 80 lines, last 2048 bytes."""
    tail = "".join(log.splitlines(keepends=True)[-TERMINATION_LOG_LINES:]).encode()
    return tail[-TERMINATION_LOG_BYTES:].decode(errors="replace")


@dataclass(frozen=True)
class FetcherRun:
    exit_code: int
    log: str

    @property
    def termination_message(self) -> str:
        return termination_message(self.log) if self.exit_code else ""

    def terminated(self) -> dict[str, Any]:
        """The container's ``state.terminated`` as the kubelet reports it."""
        reason = "Completed" if self.exit_code == 0 else "Error"
        out: dict[str, Any] = {"exitCode": self.exit_code, "reason": reason}
        if self.exit_code:
            out["message"] = self.termination_message
        return out


def container_env(
    container: Mapping[str, Any],
    volume: Path,
    home: Path,
    secrets: Mapping[tuple[str, str], str],
    mounts: Mapping[str, Path] | None = None,
) -> dict[str, str]:
    """The container's environment on this machine: its volumes' paths mapped (the model volume, HOME,
    and ``mounts``: mount path -> folder here), its Secrets read."""
    env: dict[str, str] = {}
    paths = {MODEL_MOUNT_PATH: volume, HOME_PATH: home, **(mounts or {})}
    for item in container.get("env") or []:
        if "value" in item:
            value = str(item["value"])
            for mount, here in paths.items():
                if value == mount or value.startswith(mount + "/"):
                    value = str(here) + value[len(mount) :]
            env[item["name"]] = value
            continue
        ref = (item.get("valueFrom") or {}).get("secretKeyRef") or {}
        key = (str(ref.get("name")), str(ref.get("key")))
        if key in secrets:
            env[item["name"]] = secrets[key]
        elif not ref.get("optional"):
            # The kubelet would not start the container (CreateContainerConfigError).
            raise KeyError(f"secret {key[0]} has no key {key[1]}")
    return env


def start_fetcher(
    container: Mapping[str, Any],
    volume: Path,
    home: Path,
    hub_url: str,
    secrets: Mapping[tuple[str, str], str] | None = None,
    log: Path | None = None,
    path_first: Sequence[Path] = (),
    mounts: Mapping[str, Path] | None = None,
) -> subprocess.Popen[str]:
    """Start the container's command; its output (stdout and stderr, as one log) to ``log`` or a pipe.
    ``path_first``: folders searched before the Python environment's (another CLI, say); ``mounts``:
    the container's other volumes (mount path -> folder here: the namespace's model cache)."""
    env = container_env(container, volume, home, secrets or {}, mounts)
    venv_bin = str(Path(sys.executable).parent)
    path = [*map(str, path_first), venv_bin, "/usr/local/bin", "/usr/bin", "/bin"]
    # The hub unless the container names one itself (workload.modelSource.huggingFace.endpoint).
    env = {"HF_ENDPOINT": hub_url} | env | {"PATH": os.pathsep.join(path)}
    volume.mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    out = log.open("a") if log is not None else subprocess.PIPE
    try:
        return subprocess.Popen(
            list(container["command"]),
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own process group: a kill takes the CLI with it, as a container's end does
        )
    finally:
        if log is not None and not isinstance(out, int):
            out.close()


def run_fetcher(
    container: Mapping[str, Any],
    volume: Path,
    home: Path,
    hub_url: str,
    secrets: Mapping[tuple[str, str], str] | None = None,
    timeout: float = 300,
    path_first: Sequence[Path] = (),
    mounts: Mapping[str, Path] | None = None,
) -> FetcherRun:
    """Run the container to its end: its exit code and its log."""
    process = start_fetcher(container, volume, home, hub_url, secrets, path_first=path_first, mounts=mounts)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill(process)
        output, _ = process.communicate()
    return FetcherRun(exit_code=process.returncode, log=output or "")


def kill(process: subprocess.Popen[str]) -> None:
    """SIGKILL the container's whole process group, as a node that loses the pod does."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
