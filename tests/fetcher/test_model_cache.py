"""The namespace's model cache (``workload.modelCache``), as the fetcher the builder writes uses it,
against the hub stand-in with the real Hugging Face CLI (``devstack.standins.model_fetcher``).

* A second replica (its own volume) of a commit the cache holds copies it from the cache: the hub
  sends the weights once, the model arrives intact, and the log says where it came from.
* The cache opens nothing: a gated model cached with one order's granted token is refused to an order
  whose token the hub refuses, before a byte is copied.
* The cache is never trusted over the commit: a cached weights file of other bytes is not taken (the
  model is downloaded), and a commit in the cache without its mark (a copy cut short) is not either.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from activities.builders import ModelArtifact
from activities.builders.fetcher import CACHE_MARK, FETCH_MARKER
from activities.builders.statefulset import MODEL_CACHE_PATH, build_statefulset
from devstack import tiny_model
from devstack.cluster.paths import cache_root
from devstack.standins.hub import DEV_TOKEN, DEV_USER, OTHER_TOKEN, OTHER_USER, Hub, HubServer
from devstack.standins.model_fetcher import FetcherRun, run_fetcher
from inference_api.settings import ModuleSettings
from tests import factories as f
from tests.fetcher.test_fetcher_against_hub import WEIGHTS, WEIGHTS_REPO, assert_intact, weights

GATED = tiny_model.GATED_REPOSITORY
SECRET = ("hf-token", "token")
CACHED_SETTINGS = ModuleSettings.model_validate({"workload": {"modelCache": {"enabled": True}}})


@pytest.fixture
def server() -> Iterator[HubServer]:
    hub = Hub()
    hub.add_user(DEV_USER, DEV_TOKEN)
    hub.add_user(OTHER_USER, OTHER_TOKEN)
    tiny = tiny_model.install_model(cache_root() / "models" / tiny_model.REPOSITORY)
    hub.create_from_folder(GATED, tiny, gated="manual")
    hub.grant(GATED, DEV_USER)
    hub.create(WEIGHTS_REPO, {"config.json": b'{"model_type": "llama"}\n', WEIGHTS: weights()})
    with HubServer(hub) as running:
        yield running


def cached_fetcher(repository: str, secret: bool = False) -> dict[str, Any]:
    auth = {"name": SECRET[0], "key": SECRET[1]} if secret else None
    order = f.order(model=repository, auth_secret=auth)
    artifact = ModelArtifact(repository=repository, served_name=repository)
    built = build_statefulset(f.inputs(the_order=order, artifact=artifact, settings=CACHED_SETTINGS))
    return f.fetcher_container(built)


def fetch(server: HubServer, volume: Path, cache: Path, repository: str, token: str | None = None) -> FetcherRun:
    container = cached_fetcher(repository, secret=token is not None)
    secrets = {SECRET: token} if token is not None else None
    return run_fetcher(
        container, volume, volume.parent / f"{volume.name}-home", server.url, secrets, mounts={MODEL_CACHE_PATH: cache}
    )


def test_a_second_replica_copies_the_commit_from_the_cache_and_the_hub_sends_it_once(
    server: HubServer, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    first = fetch(server, tmp_path / "replica-0", cache, WEIGHTS_REPO)
    assert first.exit_code == 0, first.log
    assert "kept in the namespace's model cache" in first.log
    commit = server.hub.sha(WEIGHTS_REPO)
    assert (cache / WEIGHTS_REPO / commit / CACHE_MARK).is_file()

    second = fetch(server, tmp_path / "replica-1", cache, WEIGHTS_REPO)
    assert second.exit_code == 0, second.log
    assert "is in the namespace's model cache: copied from" in second.log
    assert_intact(server, tmp_path / "replica-1", WEIGHTS_REPO)
    assert (tmp_path / "replica-1" / WEIGHTS_REPO / FETCH_MARKER).is_file()
    assert len(server.hub.downloads(WEIGHTS_REPO, WEIGHTS)) == 1  # the weights left the hub once


def test_a_gated_model_in_the_cache_is_refused_to_a_token_the_hub_refuses(server: HubServer, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    granted = fetch(server, tmp_path / "granted", cache, GATED, token=DEV_TOKEN)
    assert granted.exit_code == 0, granted.log
    assert (cache / GATED / server.hub.sha(GATED) / CACHE_MARK).is_file()

    refused = fetch(server, tmp_path / "refused", cache, GATED, token=OTHER_TOKEN)
    assert refused.exit_code == 1, refused.log
    assert "the hub answered 403 GatedRepo" in refused.termination_message
    assert "model cache" not in refused.log
    assert not (tmp_path / "refused" / GATED / "model.safetensors").exists()
    anonymous = fetch(server, tmp_path / "anonymous", cache, GATED)
    assert anonymous.exit_code == 1, anonymous.log
    assert not (tmp_path / "anonymous" / GATED / "model.safetensors").exists()


def test_a_cache_of_other_bytes_or_without_its_mark_is_not_taken(server: HubServer, tmp_path: Path) -> None:
    # Every file of the commit in the cache, the weights of the right size but other bytes.
    source = fetch(server, tmp_path / "source", tmp_path / "elsewhere", WEIGHTS_REPO)
    assert source.exit_code == 0, source.log
    cache = tmp_path / "cache"
    entry = cache / WEIGHTS_REPO / server.hub.sha(WEIGHTS_REPO)
    shutil.copytree(tmp_path / "elsewhere" / WEIGHTS_REPO / server.hub.sha(WEIGHTS_REPO), entry)
    (entry / CACHE_MARK).unlink()
    (entry / WEIGHTS).write_bytes(weights(seed=2))
    unmarked = fetch(server, tmp_path / "unmarked", cache, WEIGHTS_REPO)
    assert unmarked.exit_code == 0, unmarked.log
    assert "copied from" not in unmarked.log  # no mark: a copy cut short, never read
    assert len(server.hub.downloads(WEIGHTS_REPO, WEIGHTS)) == 2
    assert "kept in the namespace's model cache" in unmarked.log  # the download took its place
    assert (entry / CACHE_MARK).is_file()

    shutil.rmtree(entry)
    shutil.copytree(tmp_path / "elsewhere" / WEIGHTS_REPO / server.hub.sha(WEIGHTS_REPO), entry)
    (entry / WEIGHTS).write_bytes(weights(seed=2))  # marked, but not the commit's bytes
    forged = fetch(server, tmp_path / "forged", cache, WEIGHTS_REPO)
    assert forged.exit_code == 0, forged.log
    assert "is not the commit's (sha256): downloading instead" in forged.log
    assert_intact(server, tmp_path / "forged", WEIGHTS_REPO)
    assert len(server.hub.downloads(WEIGHTS_REPO, WEIGHTS)) == 3
    # ... and replaced it: the next replica copies the commit's own bytes.
    after = fetch(server, tmp_path / "after", cache, WEIGHTS_REPO)
    assert after.exit_code == 0, after.log
    assert "copied from" in after.log
    assert_intact(server, tmp_path / "after", WEIGHTS_REPO)
    assert len(server.hub.downloads(WEIGHTS_REPO, WEIGHTS)) == 3
