"""One replica's engine without a cluster: a command line the engine refuses crashes the container,
and the crash carries the engine's own error line, as a kubelet reports a crashed container.

No flag a user can set reaches the command line (recipes and the builder make it), so the refused
flag is put into the replica's built command here; ``tests/engine/test_real_engine.py`` runs the
rest end to end. A refusal costs the engine's import and argument parsing only (seconds, no model load).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from activities.builders.common import ModelArtifact
from activities.builders.statefulset import build_statefulset
from devstack import tiny_model
from devstack.standins import engine as eng
from devstack.standins.hub import HubServer, standard_hub
from devstack.standins.model_fetcher import run_fetcher
from devstack.vllm_cpu_env import VllmCpuEnv
from tests import factories as f

pytestmark = pytest.mark.engine


def test_a_flag_the_engine_refuses_crashes_the_container_with_the_engines_error_line(
    engine_env: VllmCpuEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AI_INFERENCE_CACHE", str(tmp_path / "cache"))
    artifact = ModelArtifact(repository=tiny_model.REPOSITORY, served_name=tiny_model.SERVED_NAME)
    sts = build_statefulset(
        f.inputs(artifact=artifact, the_plan=f.plan(args=["--max-model-len", "256", "--no-such-flag"]))
    )
    runtime = f.runtime_container(sts)
    volume = tmp_path / "volume"
    with HubServer(standard_hub()) as hub:  # the pod's own fetcher puts the model in its volume
        fetched = run_fetcher(f.fetcher_container(sts), volume, tmp_path / "fetcher-home", hub.url)
    assert fetched.exit_code == 0, fetched.log
    env = eng.resolve_env(runtime["env"], lambda name, key: "s3cret")
    paths = eng.HostPaths(volume, tmp_path / "home")
    argv, launch_env = eng.cpu_host_launch(
        runtime["command"], env, python=engine_env.python, paths=paths, port=eng.free_port()
    )
    views: list[eng.ContainerView] = []
    crashed = threading.Event()

    def sink(_replica: eng.EngineReplica, view: eng.ContainerView) -> None:
        views.append(view)
        if view.reason == "CrashLoopBackOff":
            crashed.set()

    replica = eng.EngineReplica(
        pod_key="ns/refused-0",
        pod_uid="uid-1",
        argv=argv,
        env=launch_env,
        port=int(argv[argv.index("--port") + 1]),
        log_path=tmp_path / "engine.log",
        token="s3cret",
        on_status=sink,
    ).start()
    started = time.monotonic()
    try:
        assert crashed.wait(120), f"no crash reported: {views}\n{eng.log_tail(tmp_path / 'engine.log')}"
    finally:
        replica.stop()
    seconds = time.monotonic() - started
    first, crash = views[0], views[-1]
    assert (first.state, first.started, first.ready) == ("running", False, False)
    assert crash.restart_count == 1
    assert crash.last_exit_code == 2  # argparse's refusal
    assert crash.last_message is not None
    assert "unrecognized arguments: --no-such-flag" in crash.last_message
    assert not any(view.ready for view in views)
    print(f"\nthe engine refused its command line in {seconds:.1f}s: {crash.last_message.splitlines()[-1]}")
