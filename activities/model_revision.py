"""The commit an order's replicas fetch, pinned when its plan is made (docs/workload.md, "Pinned
revisions").

A Hugging Face reference names a repository (and, from the catalog, perhaps a branch or tag), which
moves: a push between two replicas' downloads would give them different weights. So the worker asks
the hub once, when the order's plan is made, which commit the reference points at, and every replica
of that plan fetches exactly that commit (``MODEL_REVISION`` of the pod's model fetcher). A new commit
is taken only when the plan is made for a new spec (an edit) or on a manual replan.

The question is asked **without a token**: the module never reads the order's token (only the pod's
fetcher does, through its ``secretKeyRef``). The hub shows a public or a gated repository's commits to
anyone; a private one only with a token. The answers:

* the commit: the plan carries it;
* ``RepoNotFound`` for an order that gives no token: the repository does not exist, or is private and
  the order gives no token to read it — the order is told (``ModelNotFound``, the hub's own words), no
  workload is made, and the question is asked again on a backoff (the repository may appear);
* ``RevisionNotFound``: the catalog names a branch or tag the repository does not have, told the same way;
* anything else (a private repository the order gives a token for, the hub down or unreachable from
  the worker, a TLS or proxy failure): the plan is not pinned, and says why; each replica's fetcher
  then resolves the reference itself when it downloads, as before pinning.

The worker reaches the hub the way the fetchers do: ``workload.modelSource.huggingFace`` (the
endpoint, the proxy and its exceptions, the CA bundle).
"""

from __future__ import annotations

import ipaddress
import re
import ssl
import threading
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

import httpx

from inference_api.reasons import Reason
from inference_api.settings import HuggingFaceSource

PUBLIC_HUB = "https://huggingface.co"
# A commit the hub names: 40 hex digits.
COMMIT = re.compile(r"^[0-9a-f]{40}$")
# The hub answers in milliseconds; a worker cut off from it must not hold a plan for long.
CONNECT_SECONDS = 5.0
READ_SECONDS = 10.0
# What the hub's error headers say, cut to a condition message's size.
SAID_MAX = 300


@dataclass(frozen=True)
class PinnedRevision:
    """Exactly one of: ``commit`` (pinned), ``refusal`` with ``message`` (the order is told), or
    neither with ``message`` saying why the plan is not pinned."""

    commit: str | None = None
    refusal: Reason | None = None
    message: str = ""


def hub_endpoint(source: HuggingFaceSource) -> str:
    return (source.endpoint or PUBLIC_HUB).rstrip("/")


def _bypasses_proxy(host: str, no_proxy: list[str]) -> bool:
    host = host.lower().rstrip(".")
    for entry in no_proxy:
        entry = entry.lower().rstrip(".")
        if entry == "*":
            return True
        if "/" in entry:
            try:
                if ipaddress.ip_address(host) in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                continue
        elif host == entry.lstrip(".") or host.endswith("." + entry.lstrip(".")):
            return True
    return False


def hub_client(source: HuggingFaceSource) -> httpx.Client:
    """An HTTP client that reaches the hub as the fetchers do: the proxy (unless ``noProxy`` names the
    hub), the CA bundle in place of the system's roots. No token, no cookies, no redirects followed
    across hosts by surprise (the API answers in place)."""
    verify: ssl.SSLContext | bool = True
    if source.caBundle:
        verify = ssl.create_default_context(cadata=source.caBundle)
    host = urlsplit(hub_endpoint(source)).hostname or ""
    proxy = source.httpsProxy if source.httpsProxy and not _bypasses_proxy(host, source.noProxy) else None
    return httpx.Client(
        timeout=httpx.Timeout(READ_SECONDS, connect=CONNECT_SECONDS),
        verify=verify,
        proxy=proxy,
        trust_env=False,  # the settings say how the hub is reached, not the worker's environment
        headers={"User-Agent": "ai-inference-worker"},
    )


# One client per way of reaching the hub, for the worker's life. A client made for each plan loaded
# the CA roots into a new TLS context (17 ms of CPU; a third of the worker's busy samples in a
# profiled burst of new orders) and opened a new connection; this one keeps its context and its pool.
_SHARED: dict[tuple[str, str, str, tuple[str, ...]], httpx.Client] = {}
_SHARED_LOCK = threading.Lock()


def shared_hub_client(source: HuggingFaceSource) -> httpx.Client:
    """``hub_client(source)``, made once per endpoint, CA bundle and proxy (httpx's client is safe to
    share between the activity threads)."""
    key = (hub_endpoint(source), source.caBundle or "", source.httpsProxy or "", tuple(source.noProxy))
    with _SHARED_LOCK:
        client = _SHARED.get(key)
        if client is None:
            client = _SHARED[key] = hub_client(source)
        return client


def _said(response: httpx.Response) -> str:
    said = response.headers.get("X-Error-Message") or ""
    if not said:
        try:
            body = response.json()
            said = str(body.get("error") or "") if isinstance(body, dict) else ""
        except ValueError:
            said = ""
    said = " ".join(said.split())
    return said[:SAID_MAX]


def pin_revision(
    source: HuggingFaceSource,
    repository: str,
    revision: str | None,
    *,
    has_token: bool,
    client: httpx.Client | None = None,
) -> PinnedRevision:
    """The commit ``repository@revision`` points at now, asked of the hub without a token."""
    wanted = revision or "main"
    endpoint = hub_endpoint(source)
    url = f"{endpoint}/api/models/{repository}/revision/{quote(wanted, safe='')}"
    where = f"{repository}@{wanted}"
    http = client or shared_hub_client(source)
    try:
        response = http.get(url)
    except httpx.HTTPError as err:
        # Never the URL's query or a header: the error's class and its first line (no token is sent).
        words = " ".join(str(err).split()) or type(err).__name__
        return PinnedRevision(
            message=f"the hub at {endpoint} did not answer the worker ({type(err).__name__}: {words[:SAID_MAX]})"
        )
    code = response.headers.get("X-Error-Code") or ""
    said = _said(response)
    if response.status_code == 200:
        try:
            sha = response.json().get("sha")
        except ValueError:
            sha = None
        if isinstance(sha, str) and COMMIT.match(sha):
            return PinnedRevision(commit=sha)
        return PinnedRevision(message=f"the hub at {endpoint} answered {where} without a commit")
    answered = f"the hub at {endpoint} answered {response.status_code}{' ' + code if code else ''}" + (
        f": {said}" if said else ""
    )
    if code == "RepoNotFound" and not has_token:
        return PinnedRevision(
            refusal=Reason.MODEL_NOT_FOUND,
            message=(
                f"spec.model.ref.name: {answered} for repository {repository!r}. Check the name (org/repo); "
                "for a private repository, give a token that can read it in spec.model.authSecretRef"
            ),
        )
    if code == "RevisionNotFound":
        return PinnedRevision(
            refusal=Reason.MODEL_NOT_FOUND,
            message=f"{answered}: repository {repository!r} has no revision {wanted!r}. Name a branch, tag or "
            "commit it has",
        )
    if code == "RepoNotFound":
        return PinnedRevision(
            message=f"{answered} (without a token: a private repository); each replica's fetcher resolves "
            f"{where} with the order's token"
        )
    return PinnedRevision(message=answered)
