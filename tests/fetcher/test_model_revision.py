"""The worker pins the commit an order's replicas fetch (activities/model_revision.py), asked of the
local hub (devstack.standins.hub: the Hugging Face API's routes, error headers and gating) the way the
fetchers reach it: a mirror endpoint, a CA bundle, a proxy and its exceptions; without a token."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from activities.model_revision import PUBLIC_HUB, pin_revision, shared_hub_client
from devstack import tiny_model
from devstack.cluster.paths import cache_root
from devstack.standins.hub import DEV_TOKEN, DEV_USER, REPO_NOT_FOUND, Hub, HubServer
from inference_api.reasons import Reason
from inference_api.settings import HuggingFaceSource
from tests.fetcher.test_model_source import Pki, _ProxyListener, _url, pki, proxy  # noqa: F401

TINY = tiny_model.REPOSITORY
GATED = tiny_model.GATED_REPOSITORY
PRIVATE = "local/private-chat"


def _hub() -> Hub:
    hub = Hub()
    hub.add_user(DEV_USER, DEV_TOKEN)
    tiny = tiny_model.install_model(cache_root() / "models" / TINY)
    hub.create_from_folder(TINY, tiny)
    hub.create_from_folder(GATED, tiny, gated="manual")
    hub.create(PRIVATE, {"config.json": b'{"model_type": "llama"}\n'}, private=True)
    hub.grant(PRIVATE, DEV_USER)
    return hub


@pytest.fixture
def server() -> Iterator[HubServer]:
    with HubServer(_hub()) as running:
        yield running


def at(server: HubServer, **more: object) -> HuggingFaceSource:
    return HuggingFaceSource.model_validate({"endpoint": server.url, **more})


def test_a_public_repository_pins_the_commit_main_points_at_and_a_push_moves_only_the_next_pin(
    server: HubServer,
) -> None:
    first = pin_revision(at(server), TINY, None, has_token=False)
    assert first.commit == server.hub.sha(TINY)
    assert first.refusal is None
    pushed = server.hub.push(TINY, {"README.md": b"a newer commit\n"})
    assert pushed != first.commit
    assert pin_revision(at(server), TINY, None, has_token=False).commit == pushed
    # A catalog's branch, tag or commit is pinned as asked.
    tag = server.hub.tag(TINY, "v1", first.commit or "")
    assert pin_revision(at(server), TINY, "v1", has_token=False).commit == tag == first.commit


def test_a_gated_repository_is_pinned_without_a_token(server: HubServer) -> None:
    pinned = pin_revision(at(server), GATED, None, has_token=True)
    assert pinned.commit == server.hub.sha(GATED)


def test_a_missing_repository_is_refused_with_the_hubs_words_unless_a_token_may_read_it(server: HubServer) -> None:
    missing = pin_revision(at(server), "local/no-such-model", None, has_token=False)
    assert missing.commit is None
    assert missing.refusal == Reason.MODEL_NOT_FOUND
    assert missing.message.startswith(f"spec.model.ref.name: the hub at {server.url} answered 401 RepoNotFound: ")
    assert f"RepoNotFound: {REPO_NOT_FOUND} for repository 'local/no-such-model'" in missing.message
    assert "spec.model.authSecretRef" in missing.message
    # A private repository looks the same without a token: with one given, the fetcher decides.
    private = pin_revision(at(server), PRIVATE, None, has_token=True)
    assert private.refusal is None
    assert private.commit is None
    assert "private repository" in private.message
    assert f"{PRIVATE}@main" in private.message
    # Asked anonymously (the module never reads the order's token): the hub's 401, not a token's 404.
    assert "answered 401 RepoNotFound" in private.message


def test_a_missing_revision_is_refused_by_name(server: HubServer) -> None:
    missing = pin_revision(at(server), TINY, "no-such-branch", has_token=False)
    assert missing.refusal == Reason.MODEL_NOT_FOUND
    assert "answered 404 RevisionNotFound: Invalid rev id: no-such-branch" in missing.message
    assert f"repository {TINY!r} has no revision 'no-such-branch'" in missing.message


def test_a_hub_that_is_down_or_unreachable_leaves_the_plan_unpinned_and_says_why(server: HubServer) -> None:
    server.hub.outage = 503
    down = pin_revision(at(server), TINY, None, has_token=False)
    assert down.commit is None
    assert down.refusal is None
    assert down.message == f"the hub at {server.url} answered 503"
    server.hub.outage = None
    nowhere = pin_revision(HuggingFaceSource(endpoint="http://127.0.0.1:9"), TINY, None, has_token=False)
    assert nowhere.commit is None
    assert nowhere.refusal is None
    assert nowhere.message.startswith("the hub at http://127.0.0.1:9 did not answer the worker (ConnectError: ")
    assert PUBLIC_HUB == "https://huggingface.co"


def test_the_worker_reaches_a_mirror_by_its_ca_bundle_and_through_the_proxy(
    pki: Pki,  # noqa: F811
    proxy: _ProxyListener,  # noqa: F811
) -> None:
    with HubServer(_hub(), prefix="/mirror/hf", tls=pki.server) as mirror:
        # The image's roots do not know the mirror's CA: named, not pinned.
        refused = pin_revision(at(mirror), TINY, None, has_token=False)
        assert refused.commit is None
        assert "ConnectError" in refused.message
        assert "CERTIFICATE_VERIFY_FAILED" in refused.message
        trusted = at(mirror, caBundle=pki.ca_pem)
        assert pin_revision(trusted, TINY, None, has_token=False).commit == mirror.hub.sha(TINY)
        # Through the proxy (a CONNECT to the mirror), and around it for a noProxy host.
        relayed = proxy.relayed
        proxied = at(mirror, caBundle=pki.ca_pem, httpsProxy=_url(proxy))
        assert pin_revision(proxied, TINY, None, has_token=False).commit == mirror.hub.sha(TINY)
        assert relayed == [f"127.0.0.1:{mirror.port}"]
        around = at(mirror, caBundle=pki.ca_pem, httpsProxy=_url(proxy), noProxy=["127.0.0.0/8"])
        assert pin_revision(around, TINY, None, has_token=False).commit == mirror.hub.sha(TINY)
        assert relayed == [f"127.0.0.1:{mirror.port}"]


def test_pins_reuse_one_client_per_way_of_reaching_the_hub(server: HubServer) -> None:
    # A client made for each plan loaded the CA roots anew (a third of the worker's CPU in a burst).
    source = at(server)
    first = pin_revision(source, TINY, None, has_token=False)
    second = pin_revision(at(server), TINY, None, has_token=False)
    assert first.commit is not None
    assert second.commit == first.commit
    assert shared_hub_client(source) is shared_hub_client(at(server))
    assert shared_hub_client(source) is not shared_hub_client(at(server, noProxy=["example.org"]))
    assert shared_hub_client(source) is not shared_hub_client(at(server, httpsProxy="http://127.0.0.1:9"))
