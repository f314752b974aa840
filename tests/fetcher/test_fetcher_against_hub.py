"""The model-fetcher init container, as the StatefulSet builder writes it, run against the hub stand-in.

The container's own script and environment (built for an order by ``build_statefulset``) run as a
kubelet would run them (``devstack.standins.model_fetcher``): ``/bin/sh`` with the real Hugging Face
CLI of this Python environment, ``HF_ENDPOINT`` at the stand-in hub (``devstack.standins.hub``),
and a temporary folder for the model volume. A failure is read as the order reads it: the log's tail
the kubelet keeps (``FallbackToLogsOnError``) through the observer's ``pod_trouble``.

Fast path: Python and the venv only; each run is a few seconds (the CLI's start).
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from activities.builders import ModelArtifact
from activities.builders.fetcher import FETCH_MARKER, PARTIAL_DIR
from activities.builders.statefulset import build_statefulset
from devstack import tiny_model
from devstack.cluster.paths import cache_root
from devstack.standins.hub import DEV_TOKEN, DEV_USER, OTHER_TOKEN, OTHER_USER, Hub, HubServer, standard_hub
from devstack.standins.model_fetcher import FetcherRun, kill, run_fetcher, start_fetcher
from inference_api.reasons import Reason
from tests import factories as f
from tests.polling import wait_until
from worker.observer import decisions
from workflows.order_state import ReplicaTrouble

TINY = tiny_model.REPOSITORY
GATED = tiny_model.GATED_REPOSITORY
# A repository with one large (LFS) file of 30 MiB: three of the client's 10 MiB chunks.
WEIGHTS_REPO = "acme/weights"
WEIGHTS = "model.safetensors"
WEIGHTS_SIZE = 30 * 1024 * 1024
CHUNK = 10 * 1024 * 1024  # huggingface_hub's DOWNLOAD_CHUNK_SIZE: what a cut download keeps is whole chunks
SECRET = ("hf-token", "token")


@cache
def weights(seed: int = 1) -> bytes:
    return random.Random(seed).randbytes(WEIGHTS_SIZE)


@pytest.fixture
def server() -> Iterator[HubServer]:
    hub = Hub()
    hub.add_user(DEV_USER, DEV_TOKEN)
    hub.add_user(OTHER_USER, OTHER_TOKEN)
    tiny = tiny_model.install_model(cache_root() / "models" / TINY)
    hub.create_from_folder(TINY, tiny)
    hub.create_from_folder(GATED, tiny, gated="manual")
    hub.grant(GATED, DEV_USER)
    hub.create(WEIGHTS_REPO, {"config.json": b'{"model_type": "llama"}\n', WEIGHTS: weights()})
    with HubServer(hub) as running:
        yield running


def fetcher(repository: str, revision: str | None = None, secret: bool = False) -> dict[str, Any]:
    """The model-fetcher container the builder writes for an order of ``repository``."""
    auth = {"name": SECRET[0], "key": SECRET[1]} if secret else None
    order = f.order(model=repository, auth_secret=auth)
    artifact = ModelArtifact(repository=repository, served_name=repository, revision=revision)
    return f.fetcher_container(build_statefulset(f.inputs(the_order=order, artifact=artifact)))


def fetch(
    server: HubServer,
    volume: Path,
    repository: str,
    revision: str | None = None,
    token: str | None = None,
    **kwargs: Any,
) -> FetcherRun:
    container = fetcher(repository, revision, secret=token is not None)
    secrets = {SECRET: token} if token is not None else None
    return run_fetcher(container, volume, volume.parent / "home", server.url, secrets, **kwargs)


def order_sees(run: FetcherRun) -> ReplicaTrouble:
    """The order's trouble for a pod whose fetcher ended so (the observer's reading of the pod)."""
    pod = {
        "metadata": {"name": "chat-0", "namespace": "support"},
        "spec": {"nodeName": "gpu-node-1", "containers": [{"name": "runtime"}]},
        "status": {
            "initContainerStatuses": [
                {"name": "model-fetcher", "ready": False, "restartCount": 0, "state": {"terminated": run.terminated()}}
            ],
            "containerStatuses": [
                {
                    "name": "runtime",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"waiting": {"reason": "PodInitializing"}},
                }
            ],
        },
    }
    found = decisions.pod_trouble(pod, None)
    assert found is not None
    return found


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def assert_intact(server: HubServer, volume: Path, repository: str, revision: str = "main") -> None:
    """Every file of the revision's commit in the volume, byte for byte, and the fetcher's marker."""
    folder = volume / repository
    for path, entry in server.hub.files(repository, revision).items():
        assert (folder / path).is_file(), path
        assert sha256(folder / path) == entry.blob.sha256, path


def assert_nothing_trusted(volume: Path, repository: str) -> None:
    folder = volume / repository
    assert not (folder / FETCH_MARKER).exists()
    assert not (folder / "config.json").exists()
    assert not (folder / WEIGHTS).exists()


# ------------------------------------------------------------------------------ downloads


def test_the_model_arrives_intact_and_a_restart_skips_the_network(server: HubServer, tmp_path: Path) -> None:
    volume = tmp_path / "models"
    run = fetch(server, volume, TINY)
    assert run.exit_code == 0, run.log
    assert_intact(server, volume, TINY)
    assert (volume / TINY / FETCH_MARKER).read_text() == f"{TINY}@main"
    assert f"commit {server.hub.sha(TINY)}" in run.log
    # Nothing of the fetcher's own is left beside the model.
    assert not (volume / TINY / PARTIAL_DIR).exists()
    assert not (volume / TINY / ".ai-inference-fetching").exists()

    served = len(server.hub.served)
    again = fetch(server, volume, TINY)
    assert again.exit_code == 0
    assert "already present" in again.log
    assert len(server.hub.served) == served


def test_a_gated_model_arrives_with_a_granted_token(server: HubServer, tmp_path: Path) -> None:
    volume = tmp_path / "models"
    run = fetch(server, volume, GATED, token=DEV_TOKEN)
    assert run.exit_code == 0, run.log
    assert_intact(server, volume, GATED)


@pytest.mark.parametrize(
    ("token", "status", "hub_says"),
    [
        pytest.param(
            None,
            "401 GatedRepo",
            f"Access to model {GATED} is restricted. You must have access to it and be authenticated to access it. "
            "Please log in.",
            id="no-token",
        ),
        pytest.param(
            OTHER_TOKEN,
            "403 GatedRepo",
            f"Access to model {GATED} is restricted and you are not in the authorized list.",
            id="token-not-granted",
        ),
        pytest.param(
            "hf_notAToken0000000000000000", "401", "Invalid credentials in Authorization header", id="bad-token"
        ),
    ],
)
def test_a_gated_model_refused_names_the_hubs_words_on_the_order(
    server: HubServer, tmp_path: Path, token: str | None, status: str, hub_says: str
) -> None:
    volume = tmp_path / "models"
    run = fetch(server, volume, GATED, token=token)
    assert run.exit_code == 1, run.log
    assert f"model-fetcher error: {GATED}@main: the hub answered {status}: {hub_says}" in run.termination_message
    seen = order_sees(run)
    assert seen.reason == Reason.MODEL_DOWNLOAD_FAILED
    assert f"{GATED}@main: the hub answered {status}: {hub_says}" in seen.message
    assert "hf_" not in seen.message  # a token never reaches the order
    assert_nothing_trusted(volume, GATED)


def test_a_missing_repository_and_a_missing_revision_are_named(server: HubServer, tmp_path: Path) -> None:
    missing = fetch(server, tmp_path / "a", "ai-inference-dev/no-such-model")
    assert missing.exit_code == 1, missing.log
    seen = order_sees(missing)
    assert seen.reason == Reason.MODEL_DOWNLOAD_FAILED
    assert (
        "ai-inference-dev/no-such-model@main: the hub answered 401 RepoNotFound: Repository not found" in seen.message
    )
    assert_nothing_trusted(tmp_path / "a", "ai-inference-dev/no-such-model")

    no_revision = fetch(server, tmp_path / "b", TINY, revision="v9")
    assert no_revision.exit_code == 1, no_revision.log
    seen = order_sees(no_revision)
    assert f"{TINY}@v9: the hub answered 404 RevisionNotFound: Invalid rev id: v9" in seen.message
    assert_nothing_trusted(tmp_path / "b", TINY)


# ------------------------------------------------------------------------------ cuts and resumes


def test_a_cut_download_resumes_in_the_same_attempt(server: HubServer, tmp_path: Path) -> None:
    hub = server.hub
    hub.cut(WEIGHTS_REPO, WEIGHTS, after=25_000_000)
    volume = tmp_path / "models"
    run = fetch(server, volume, WEIGHTS_REPO)
    assert run.exit_code == 0, run.log
    assert_intact(server, volume, WEIGHTS_REPO)
    first, second = hub.downloads(WEIGHTS_REPO, WEIGHTS)
    assert (first.cut, first.range_start, first.body_bytes) == (True, None, 25_000_000)
    # Resumed from the last whole chunk the client kept, not from 0.
    assert (second.status, second.range_start, second.body_bytes) == (206, 2 * CHUNK, WEIGHTS_SIZE - 2 * CHUNK)


def test_a_fetcher_killed_mid_file_leaves_nothing_trusted_and_the_next_attempt_resumes(
    server: HubServer, tmp_path: Path
) -> None:
    hub = server.hub
    release = hub.stall(WEIGHTS_REPO, WEIGHTS, after=25_000_000)
    volume, home = tmp_path / "models", tmp_path / "home"
    process = start_fetcher(fetcher(WEIGHTS_REPO), volume, home, server.url)
    try:
        wait_until(lambda: hub.bytes_served(WEIGHTS_REPO, WEIGHTS) >= 25_000_000, timeout=60)
        # The client writes what it receives in whole chunks: wait for the second one on disk.
        partial = volume / WEIGHTS_REPO / PARTIAL_DIR / hub.files(WEIGHTS_REPO)[WEIGHTS].blob.sha256
        wait_until(lambda: partial.is_file() and partial.stat().st_size == 2 * CHUNK, timeout=30)
    finally:
        kill(process)  # the pod is gone (a node lost, an eviction): no clean-up of its own
        release.set()
    assert_nothing_trusted(volume, WEIGHTS_REPO)
    assert partial.stat().st_size == 2 * CHUNK

    wait_until(lambda: hub.downloads(WEIGHTS_REPO, WEIGHTS))  # the stalled response has ended
    before = hub.bytes_served(WEIGHTS_REPO, WEIGHTS)
    run = fetch(server, volume, WEIGHTS_REPO)
    assert run.exit_code == 0, run.log
    assert_intact(server, volume, WEIGHTS_REPO)
    assert f"resumed after the {2 * CHUNK} an earlier attempt left" in run.log
    last = hub.downloads(WEIGHTS_REPO, WEIGHTS)[-1]
    assert (last.status, last.range_start) == (206, 2 * CHUNK)
    # The second attempt fetched only what was missing.
    assert hub.bytes_served(WEIGHTS_REPO, WEIGHTS) - before == WEIGHTS_SIZE - 2 * CHUNK
    assert not partial.exists()


def test_a_hub_that_goes_down_mid_file_is_named_and_the_download_resumes_when_it_is_back(
    server: HubServer, tmp_path: Path
) -> None:
    hub = server.hub
    release = hub.stall(WEIGHTS_REPO, WEIGHTS, after=25_000_000)
    volume, home = tmp_path / "models", tmp_path / "home"
    process = start_fetcher(fetcher(WEIGHTS_REPO), volume, home, server.url)
    try:
        wait_until(lambda: hub.bytes_served(WEIGHTS_REPO, WEIGHTS) >= 25_000_000, timeout=60)
        server.stop()  # connections dropped, then refused: the client's own retries give up
        output, _ = process.communicate(timeout=120)
    finally:
        kill(process)
        release.set()
    down = FetcherRun(exit_code=process.returncode, log=output)
    assert down.exit_code == 1, down.log
    seen = order_sees(down)
    assert seen.reason == Reason.MODEL_DOWNLOAD_FAILED
    assert f"{WEIGHTS_REPO}@main: the hub at {server.url} cannot be reached" in seen.message
    assert "what arrived is kept for the next attempt" in seen.message
    assert_nothing_trusted(volume, WEIGHTS_REPO)

    server.start()  # the same address, back
    wait_until(lambda: hub.downloads(WEIGHTS_REPO, WEIGHTS))  # the stalled response has ended
    before = hub.bytes_served(WEIGHTS_REPO, WEIGHTS)
    run = fetch(server, volume, WEIGHTS_REPO)
    assert run.exit_code == 0, run.log
    assert_intact(server, volume, WEIGHTS_REPO)
    assert hub.downloads(WEIGHTS_REPO, WEIGHTS)[-1].range_start == 2 * CHUNK
    assert hub.bytes_served(WEIGHTS_REPO, WEIGHTS) - before == WEIGHTS_SIZE - 2 * CHUNK


def test_a_whole_sized_file_of_other_bytes_is_not_trusted(server: HubServer, tmp_path: Path) -> None:
    """A file in place that the CLI has no record of is hashed before it is taken: wrong bytes are fetched again."""
    volume = tmp_path / "models"
    planted = volume / WEIGHTS_REPO / WEIGHTS
    planted.parent.mkdir(parents=True)
    planted.write_bytes(weights(seed=2))
    run = fetch(server, volume, WEIGHTS_REPO)
    assert run.exit_code == 0, run.log
    assert_intact(server, volume, WEIGHTS_REPO)
    assert server.hub.bytes_served(WEIGHTS_REPO, WEIGHTS) == WEIGHTS_SIZE


# ------------------------------------------------------------------------------ revisions


def test_a_pinned_commit_stays_pinned_after_a_push_and_main_moves(server: HubServer, tmp_path: Path) -> None:
    hub = server.hub
    first = hub.sha(WEIGHTS_REPO)
    second = hub.push(WEIGHTS_REPO, {WEIGHTS: weights(seed=3)}, message="new weights")
    assert hub.sha(WEIGHTS_REPO) == second != first

    pinned = fetch(server, tmp_path / "pinned", WEIGHTS_REPO, revision=first)
    assert pinned.exit_code == 0, pinned.log
    assert_intact(server, tmp_path / "pinned", WEIGHTS_REPO, revision=first)
    assert (tmp_path / "pinned" / WEIGHTS_REPO / FETCH_MARKER).read_text() == f"{WEIGHTS_REPO}@{first}"

    latest = fetch(server, tmp_path / "latest", WEIGHTS_REPO)
    assert latest.exit_code == 0, latest.log
    assert_intact(server, tmp_path / "latest", WEIGHTS_REPO, revision=second)
    assert f"{WEIGHTS_REPO}@main is commit {second}" in latest.log


# ------------------------------------------------------------------------------ the CLI alone


def test_a_cli_that_is_no_python_script_still_never_marks_an_empty_folder(server: HubServer, tmp_path: Path) -> None:
    """Without the CLI's Python, the script runs ``hf download`` alone. That CLI answers success when
    the hub refuses a bad token and the folder is not empty (it returns the folder as it is): the
    script refuses a folder with nothing fetched in it instead of marking it."""
    tools = tmp_path / "tools"
    tools.mkdir()
    real = Path(sys.executable).parent / "hf"
    (tools / "hf").write_text(f'#!/bin/sh\nexec "{real}" "$@"\n')
    (tools / "hf").chmod(0o755)

    ok = fetch(server, tmp_path / "ok", TINY, path_first=[tools])
    assert ok.exit_code == 0, ok.log
    assert "is commit" not in ok.log  # the CLI alone ran
    assert_intact(server, tmp_path / "ok", TINY)

    refused = fetch(server, tmp_path / "refused", GATED, token="hf_notAToken0000000000000000", path_first=[tools])
    assert refused.exit_code == 1, refused.log
    assert f"model-fetcher error: {GATED}@main: hf download left no file in" in refused.termination_message
    assert order_sees(refused).reason == Reason.MODEL_DOWNLOAD_FAILED
    assert_nothing_trusted(tmp_path / "refused", GATED)


# ------------------------------------------------------------------------------ the local stack's hub


def test_the_standard_hub_serves_the_200_mib_model_intact(tmp_path: Path) -> None:
    """The larger model (two shards, about 200 MiB, made once into the cache) through the real CLI."""
    volume = tmp_path / "models"
    try:
        with HubServer(standard_hub(large=True)) as running:
            run = fetch(running, volume, tiny_model.LARGE_REPOSITORY)
            assert run.exit_code == 0, run.log
            assert_intact(running, volume, tiny_model.LARGE_REPOSITORY)
            files = running.hub.files(tiny_model.LARGE_REPOSITORY)
            assert sum(e.blob.size for e in files.values()) > 200 * 1024 * 1024
            assert sum(e.lfs for e in files.values()) == tiny_model.LARGE_SHARDS
    finally:
        shutil.rmtree(volume, ignore_errors=True)  # 200 MiB that pytest would keep for three runs


# ------------------------------------------------------------------------------ room and progress


@contextlib.contextmanager
def volume_of(size: str, where: Path) -> Iterator[Path]:
    """A model volume of ``size`` (a tmpfs, as small as a claim sized from a wrong parameterCount).
    Mounting needs root, which the CI machine has; elsewhere the test fails, saying so."""
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if mounted.returncode != 0:
        pytest.fail(f"a tmpfs volume could not be mounted (root is needed): {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_volume_too_small_is_named_before_a_byte_of_the_weights_is_fetched(server: HubServer, tmp_path: Path) -> None:
    with volume_of("4m", tmp_path / "models") as volume:
        run = fetch(server, volume, WEIGHTS_REPO)
        assert run.exit_code == 1, run.log
        commit = server.hub.sha(WEIGHTS_REPO)
        assert f"the model volume has 4.0 MiB free and commit {commit} needs 30.0 MiB more (30.0 MiB in all)" in (
            run.termination_message
        )
        seen = order_sees(run)
        assert seen.reason == Reason.MODEL_DOWNLOAD_FAILED
        assert "spec.model.parameterCount" in seen.message  # what to do, on the order
        assert server.hub.bytes_served(WEIGHTS_REPO, WEIGHTS) == 0
        assert_nothing_trusted(volume, WEIGHTS_REPO)


def test_a_volume_that_fills_during_the_download_is_named_as_full(server: HubServer, tmp_path: Path) -> None:
    hub = server.hub
    release = hub.stall(WEIGHTS_REPO, WEIGHTS, after=12_000_000)
    with volume_of("40m", tmp_path / "models") as volume:
        process = start_fetcher(fetcher(WEIGHTS_REPO), volume, tmp_path / "home", server.url)
        try:
            wait_until(lambda: hub.bytes_served(WEIGHTS_REPO, WEIGHTS) >= 12_000_000, timeout=60)
            # Something else takes the room the check found (another writer of the volume): all of it.
            with contextlib.suppress(OSError), (volume / "filler").open("wb") as filler:
                while True:
                    filler.write(b"\0" * 1024 * 1024)
                    filler.flush()
            release.set()
            output, _ = process.communicate(timeout=120)
        finally:
            kill(process)
            release.set()
        run = FetcherRun(exit_code=process.returncode, log=output)
        assert run.exit_code == 1, run.log
        assert "the model volume is full (" in run.termination_message, run.log
        seen = order_sees(run)
        assert seen.reason == Reason.MODEL_DOWNLOAD_FAILED
        assert "the model volume is full" in seen.message
        assert "spec.model.parameterCount" in seen.message
        assert_nothing_trusted(volume, WEIGHTS_REPO)


def test_the_fetcher_tells_its_progress_while_the_weights_arrive(server: HubServer, tmp_path: Path) -> None:
    server.hub.rate = 10 * 1024 * 1024  # 30 MiB in about three seconds
    container = fetcher(WEIGHTS_REPO)
    container["env"].append({"name": "MODEL_FETCH_PROGRESS_SECONDS", "value": "0.5"})
    run = run_fetcher(container, tmp_path / "models", tmp_path / "home", server.url)
    assert run.exit_code == 0, run.log
    total = sum(e.blob.size for e in server.hub.files(WEIGHTS_REPO).values())
    said = [
        (int(m.group(1)), int(m.group(2)), m.group(3))
        for m in re.finditer(r"model-fetcher: progress: (\d+) of (\d+) bytes \(([\d.]+)%\)", run.log)
    ]
    assert len(said) >= 4, run.log
    assert all(of == total for _, of, _ in said)
    arrived = [count for count, _, _ in said]
    assert arrived == sorted(arrived)  # it only grows
    assert any(0 < count < total for count in arrived), said  # seen part way
    assert said[-1] == (total, total, "100.0")
