"""A Hugging Face Hub stand-in: the endpoints ``huggingface_hub`` and ``hf download`` use, over models made here.

The model-fetcher init container downloads the order's repository with the real Hugging Face CLI;
pointed at this server (``HF_ENDPOINT``), that CLI runs its whole protocol against repositories
made on this machine. What is served is what the installed client reads (``huggingface_hub`` 2.x:
``hf_api.py``, ``file_download.py``, ``_snapshot_download.py``, ``utils/_http.py``):

* **model info**: ``GET /api/models/{repo}`` and ``/api/models/{repo}/revision/{rev}`` with ``sha``
  (the revision's commit), ``siblings`` (with ``blobs=true``: ``size``, ``blobId``, ``lfs``),
  ``gated``, ``private``, ``lastModified``, ``config`` and ``safetensors`` (parameters read from the
  files' headers); ``expand=`` keeps the properties asked for;
* **tree**: ``GET /api/models/{repo}/tree/{rev}[/{path}]?recursive=`` (``snapshot_download`` lists
  the commit's files with it), and ``GET /api/models/{repo}/refs`` (branches and tags);
* **files**: ``HEAD``/``GET /{repo}/resolve/{rev}/{path}``. A regular file answers 200 with
  ``ETag`` (its git blob id), ``X-Repo-Commit``, ``Content-Length`` and ranges. A large file
  (LFS: weights, or over 10 MiB) answers ``302`` to a signed URL on another origin, the "CDN"
  (a second listener), with ``X-Linked-Etag`` (its sha256), ``X-Linked-Size``, ``ETag`` (the git
  id of its LFS pointer) and ``X-Repo-Commit``: the client stops at a redirect that leaves the
  hub's origin, reads the file's metadata from it and downloads from the CDN without its token,
  as from the real hub's CDN. The CDN honours ``Range: bytes=N-`` (206), which is how the client
  resumes a cut download;
* **errors** as the hub sends them: a JSON body ``{"error": ...}`` and the ``X-Error-Code`` /
  ``X-Error-Message`` headers the client turns into its exceptions: ``RepoNotFound`` (401
  anonymous, 404 with a token; also a private repository the token may not read),
  ``RevisionNotFound`` (404, ``Invalid rev id: <rev>``), ``EntryNotFound`` (404, with the
  commit), ``GatedRepo`` (401 without a token, 403 with a token not on the repository's list, each
  with the hub's wording), and a token the hub does not know (401, ``Invalid credentials in
  Authorization header``, on every route, as the hub refuses a bad token even for public files).
  ``GET /api/whoami-v2`` names a token's user.

Repositories have commits: each push makes one (a sha over its parent and its files) and moves its
branch, so ``main`` moves and an older commit stays reachable by its sha; tags name commits.

For the tests (Python, or ``/_standin/...`` over HTTP for a hub in another process): ``Hub.push``,
``Hub.tag``, users and their tokens, ``Hub.grant``; faults: ``Hub.cut`` (the next download of a
file drops its connection after N bytes), ``Hub.stall`` (it stops after N bytes until released),
``Hub.outage`` (every request answers 503, a hub that is down behind its load balancer) and
``HubServer.stop``/``start`` (connections refused); ``Hub.rate`` (bytes per second per download, so
a download takes long enough to watch); and what was served (``Hub.served``: every response with
its range and body bytes).

``standard_hub()`` holds the local stack's models: the tiny chat model (``devstack.tiny_model``), a
gated copy of it (one user may read it: ``DEV_USER`` with ``DEV_TOKEN``), its QwQ-format variant,
and on request the larger model of about 200 MiB made on demand (``tiny_model.install_large_model``).

``HubServer(hub, prefix="/mirror/hf", tls=context)`` serves the hub under a path (a mirror's base
URL, the fetcher's ``HF_ENDPOINT``) and both listeners over TLS (an ``ssl.SSLContext`` with the
server's certificate): the air-gapped cluster's mirror behind its own CA.

``python -m devstack.standins.hub [--host H] [--port P] [--cdn-port C] [--large] [--rate BYTES]``
serves them until interrupted.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import hmac
import json
import mimetypes
import re
import secrets
import socket
import ssl
import struct
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from devstack.standins.tracked_http import TrackedHTTPServer

# What the hub stores in LFS (the .gitattributes of a model repository), and any file this large.
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".onnx", ".msgpack", ".npz")
LFS_THRESHOLD = 10 * 1024 * 1024
GITATTRIBUTES = "".join(f"*{suffix} filter=lfs diff=lfs merge=lfs -text\n" for suffix in LFS_SUFFIXES).encode()
CHUNK = 64 * 1024
SIGNED_URL_SECONDS = 3600

# The user of the local stack's gated repository, and its token (an order's HF_TOKEN Secret holds it).
DEV_USER = "ai-inference-dev"
DEV_TOKEN = "hf_aiInferenceDevLocalStackToken000000000"  # not a secret: it opens only this stand-in
# A user the hub knows who was never granted the gated repository.
OTHER_USER = "someone-else"
OTHER_TOKEN = "hf_someoneElseLocalStackToken00000000000"

INVALID_CREDENTIALS = "Invalid credentials in Authorization header"
REPO_NOT_FOUND = "Repository not found"
ENTRY_NOT_FOUND = "Entry not found"


def _git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


# ------------------------------------------------------------------------------------ repositories


@dataclass(frozen=True)
class Blob:
    """A file's bytes: in memory, or a file on disk (the large models) read as it is served."""

    size: int
    sha256: str
    data: bytes | None = None
    path: Path | None = None

    @classmethod
    def of_bytes(cls, data: bytes) -> Blob:
        return cls(size=len(data), sha256=hashlib.sha256(data).hexdigest(), data=data)

    @classmethod
    def of_file(cls, path: Path) -> Blob:
        if path.stat().st_size < LFS_THRESHOLD:
            return cls.of_bytes(path.read_bytes())
        digest = hashlib.sha256()
        with path.open("rb") as f:
            while chunk := f.read(4 * 1024 * 1024):
                digest.update(chunk)
        return cls(size=path.stat().st_size, sha256=digest.hexdigest(), path=path)

    def head(self, length: int) -> bytes:
        if self.data is not None:
            return self.data[:length]
        assert self.path is not None
        with self.path.open("rb") as f:
            return f.read(length)

    def chunks(self, start: int, end: int) -> Iterator[bytes]:
        """Bytes ``start`` to ``end`` (exclusive) in pieces of at most ``CHUNK``."""
        if self.data is not None:
            for at in range(start, end, CHUNK):
                yield self.data[at : min(at + CHUNK, end)]
            return
        assert self.path is not None
        with self.path.open("rb") as f:
            f.seek(start)
            left = end - start
            while left > 0:
                piece = f.read(min(CHUNK, left))
                if not piece:
                    return
                left -= len(piece)
                yield piece


@dataclass(frozen=True)
class Entry:
    """One file of a commit: a regular git file, or an LFS file (its git blob is the pointer)."""

    path: str
    blob: Blob
    lfs: bool

    @property
    def pointer(self) -> bytes:
        spec = "version https://git-lfs.github.com/spec/v1"
        return f"{spec}\noid sha256:{self.blob.sha256}\nsize {self.blob.size}\n".encode()

    @property
    def oid(self) -> str:
        """The git blob id: of the content, or of the LFS pointer (what the hub's ``ETag`` and ``oid`` carry)."""
        if self.lfs:
            return _git_blob_id(self.pointer)
        assert self.blob.data is not None
        return _git_blob_id(self.blob.data)

    def tree_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "file", "oid": self.oid, "size": self.blob.size, "path": self.path}
        if self.lfs:
            out["lfs"] = {"oid": self.blob.sha256, "size": self.blob.size, "pointerSize": len(self.pointer)}
        return out

    def sibling_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rfilename": self.path, "size": self.blob.size, "blobId": self.oid}
        if self.lfs:
            out["lfs"] = {"size": self.blob.size, "sha256": self.blob.sha256, "pointerSize": len(self.pointer)}
        return out


def _entry(path: str, content: bytes | Path | Blob) -> Entry:
    blob = content if isinstance(content, Blob) else Blob.of_file(content) if isinstance(content, Path) else None
    if blob is None:
        assert isinstance(content, bytes)
        blob = Blob.of_bytes(content)
    lfs = path.endswith(LFS_SUFFIXES) or blob.size >= LFS_THRESHOLD
    if not lfs and blob.data is None:  # a regular file is served from memory
        blob = Blob.of_bytes(blob.head(blob.size))
    return Entry(path=path, blob=blob, lfs=lfs)


@dataclass(frozen=True)
class Commit:
    sha: str
    parent: str | None
    message: str
    date: float
    files: Mapping[str, Entry]


@dataclass
class Repo:
    repo_id: str
    gated: str | bool = False  # False, or the hub's mode: "auto" / "manual"
    private: bool = False
    authorized: set[str] = field(default_factory=set)
    commits: dict[str, Commit] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    created: float = field(default_factory=time.time)

    def resolve(self, revision: str) -> Commit | None:
        """A branch, a tag, or a commit's sha (whole, or its first 7+ characters as git takes it)."""
        sha = self.branches.get(revision) or self.tags.get(revision)
        for prefix in ("refs/heads/", "refs/tags/"):
            if sha is None and revision.startswith(prefix):
                name = revision[len(prefix) :]
                sha = (self.branches if prefix == "refs/heads/" else self.tags).get(name)
        if sha is None and re.fullmatch(r"[0-9a-f]{7,40}", revision):
            found = [c for c in self.commits if c.startswith(revision)]
            sha = found[0] if len(found) == 1 else None
        return self.commits.get(sha) if sha else None


# ------------------------------------------------------------------------------------ the hub


@dataclass(frozen=True)
class Served:
    """One response: which listener, method, repository file (or API path), range start, status, body bytes."""

    listener: str
    method: str
    path: str
    status: int
    repo_id: str | None = None
    filename: str | None = None
    range_start: int | None = None
    body_bytes: int = 0
    cut: bool = False


@dataclass
class _Fault:
    after: int
    times: int
    kind: str  # "cut" or "stall"
    release: threading.Event = field(default_factory=threading.Event)


class Hub:
    """The hub's state: repositories, users and their tokens, faults, and what was served."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.tokens: dict[str, str] = {}  # token -> user
        self.served: list[Served] = []
        self.outage: int | None = None  # a status every request answers (503: the hub is down)
        self.rate: int | None = None  # bytes per second of one download's body
        self._faults: dict[tuple[str, str], _Fault] = {}
        self._stalls: list[threading.Event] = []
        self._sent: dict[tuple[str, str], int] = {}  # body bytes of each file, counted as they leave
        self._lock = threading.RLock()
        self._secret = secrets.token_bytes(32)
        self._sequence = 0

    # ---------------------------------------------------------------- users
    def add_user(self, user: str, token: str) -> None:
        with self._lock:
            self.tokens[token] = user

    def grant(self, repo_id: str, user: str) -> None:
        with self._lock:
            self.repos[repo_id].authorized.add(user)

    # ---------------------------------------------------------------- repositories and commits
    def create(
        self,
        repo_id: str,
        files: Mapping[str, bytes | Path | Blob],
        *,
        gated: str | bool = False,
        private: bool = False,
        message: str = "initial commit",
    ) -> str:
        """A new repository with one commit on ``main``; returns the commit's sha."""
        with self._lock:
            if repo_id in self.repos:
                raise ValueError(f"repository {repo_id} exists")
            self.repos[repo_id] = Repo(repo_id=repo_id, gated=gated, private=private)
            return self.push(repo_id, {".gitattributes": GITATTRIBUTES, **files}, message=message)

    def create_from_folder(self, repo_id: str, folder: Path, **kwargs: Any) -> str:
        """A repository holding a folder's files (hidden ones left out), large ones served from disk."""
        files = {
            p.relative_to(folder).as_posix(): p
            for p in sorted(folder.rglob("*"))
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)
        }
        return self.create(repo_id, files, **kwargs)

    def push(
        self,
        repo_id: str,
        files: Mapping[str, bytes | Path | Blob | None],
        *,
        branch: str = "main",
        message: str = "update",
    ) -> str:
        """A commit on ``branch`` (made if new, from ``main``): the parent's files with ``files``
        written over them (``None`` deletes one). The branch moves to it; returns its sha."""
        with self._lock:
            repo = self.repos[repo_id]
            parent_sha = repo.branches.get(branch) or repo.branches.get("main")
            parent = repo.commits.get(parent_sha) if parent_sha else None
            tree: dict[str, Entry] = dict(parent.files) if parent else {}
            for path, content in files.items():
                if content is None:
                    tree.pop(path, None)
                else:
                    tree[path] = _entry(path, content)
            self._sequence += 1
            date = time.time()
            hashed = hashlib.sha1(usedforsecurity=False)
            hashed.update(f"{repo_id}\n{parent_sha}\n{message}\n{date}\n{self._sequence}\n".encode())
            for path in sorted(tree):
                hashed.update(f"{tree[path].oid} {path}\n".encode())
            commit = Commit(sha=hashed.hexdigest(), parent=parent_sha, message=message, date=date, files=tree)
            repo.commits[commit.sha] = commit
            repo.branches[branch] = commit.sha
            return commit.sha

    def tag(self, repo_id: str, tag: str, revision: str = "main") -> str:
        with self._lock:
            repo = self.repos[repo_id]
            commit = repo.resolve(revision)
            if commit is None:
                raise KeyError(f"{repo_id} has no revision {revision}")
            repo.tags[tag] = commit.sha
            return commit.sha

    def sha(self, repo_id: str, revision: str = "main") -> str:
        commit = self.repos[repo_id].resolve(revision)
        if commit is None:
            raise KeyError(f"{repo_id} has no revision {revision}")
        return commit.sha

    def files(self, repo_id: str, revision: str = "main") -> dict[str, Entry]:
        commit = self.repos[repo_id].resolve(revision)
        if commit is None:
            raise KeyError(f"{repo_id} has no revision {revision}")
        return dict(commit.files)

    # ---------------------------------------------------------------- faults and accounting
    def cut(self, repo_id: str, filename: str, after: int, times: int = 1) -> None:
        """The next ``times`` downloads of the file drop their connection after ``after`` body bytes."""
        with self._lock:
            self._faults[(repo_id, filename)] = _Fault(after=after, times=times, kind="cut")

    def stall(self, repo_id: str, filename: str, after: int) -> threading.Event:
        """The next download of the file stops after ``after`` body bytes until the event is set
        (then it goes on). Returns the event."""
        fault = _Fault(after=after, times=1, kind="stall")
        with self._lock:
            self._faults[(repo_id, filename)] = fault
            self._stalls.append(fault.release)
        return fault.release

    def clear_faults(self) -> None:
        with self._lock:
            for release in self._stalls:
                release.set()
            self._stalls.clear()
            self._faults.clear()
            self.outage = None

    def _take_fault(self, repo_id: str, filename: str) -> _Fault | None:
        with self._lock:
            fault = self._faults.get((repo_id, filename))
            if fault is None:
                return None
            fault.times -= 1
            if fault.times <= 0:
                del self._faults[(repo_id, filename)]
            return fault

    def record(self, served: Served) -> None:
        with self._lock:
            self.served.append(served)

    def downloads(self, repo_id: str, filename: str) -> list[Served]:
        """The body-bearing responses of one file (the CDN's for an LFS file, the hub's for a regular one)."""
        with self._lock:
            return [
                s
                for s in self.served
                if s.method == "GET" and s.repo_id == repo_id and s.filename == filename and s.body_bytes
            ]

    def count(self, repo_id: str, filename: str, sent: int) -> None:
        with self._lock:
            self._sent[(repo_id, filename)] = self._sent.get((repo_id, filename), 0) + sent

    def bytes_served(self, repo_id: str, filename: str) -> int:
        """The body bytes of one file sent so far, those of a download still under way included."""
        with self._lock:
            return self._sent.get((repo_id, filename), 0)

    # ---------------------------------------------------------------- signed CDN URLs
    def sign(self, sha256: str, expires: int) -> str:
        return hmac.new(self._secret, f"{sha256}:{expires}".encode(), hashlib.sha256).hexdigest()

    def user_of(self, token: str | None) -> str | None:
        return self.tokens.get(token) if token else None


# ------------------------------------------------------------------------------------ HTTP


class _DropError(Exception):
    """The connection is dropped on purpose (a cut download)."""


_REPO_ACTIONS = ("revision", "tree", "refs", "resolve", "paths-info", "commits", "xet-read-token")


def _split_repo(segments: list[str]) -> tuple[str, list[str]]:
    """``org/name`` (or a legacy one-part name) and what follows it."""
    if len(segments) >= 2 and segments[1] in _REPO_ACTIONS:
        return segments[0], segments[1:]
    return "/".join(segments[:2]), segments[2:]


def _safetensors_parameters(entries: Mapping[str, Entry]) -> dict[str, Any] | None:
    """``{"parameters": {dtype: n}, "total": n}`` from the safetensors files' headers, as the hub reports it."""
    counts: dict[str, int] = {}
    for path, entry in entries.items():
        if not path.endswith(".safetensors") or entry.blob.size < 8:
            continue
        (length,) = struct.unpack("<Q", entry.blob.head(8))
        try:
            header = json.loads(entry.blob.head(8 + length)[8:])
        except ValueError:
            continue
        for name, tensor in header.items():
            if name == "__metadata__":
                continue
            count = 1
            for dim in tensor.get("shape", []):
                count *= int(dim)
            counts[tensor["dtype"]] = counts.get(tensor["dtype"], 0) + count
    if not counts:
        return None
    return {"parameters": counts, "total": sum(counts.values())}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Listener

    # BaseHTTPRequestHandler logs every request to stderr: the hub records them instead.
    def log_message(self, format: str, *args: Any) -> None:
        return

    @property
    def hub(self) -> Hub:
        return self.server.hub_server.hub

    def do_HEAD(self) -> None:
        self._serve("HEAD")

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    # ---------------------------------------------------------------- plumbing
    def _serve(self, method: str) -> None:
        split = urlsplit(self.path)
        self._query = parse_qs(split.query)
        self._method = method
        self._raw_path = split.path
        self._recorded = False
        prefix = self.server.hub_server.prefix
        try:
            if prefix and self.server.role == "hub":
                # A mirror under a path: what is outside it is not the hub's.
                if split.path != prefix and not split.path.startswith(prefix + "/"):
                    self._error(404, f"not under {prefix}")
                    return
                split = split._replace(path=split.path[len(prefix) :] or "/")
            if self.hub.outage is not None and not split.path.startswith("/_standin/"):
                self._send(self.hub.outage, b"upstream unavailable\n", {"Content-Type": "text/plain"})
            elif self.server.role == "cdn":
                self._cdn(split.path)
            else:
                self._hub(split.path)
        except _DropError:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
        except (BrokenPipeError, ConnectionResetError):  # the client went away (killed mid-download)
            self.close_connection = True

    def _record(self, status: int, **fields: Any) -> None:
        if not self._recorded:
            self._recorded = True
            self.hub.record(
                Served(listener=self.server.role, method=self._method, path=self._raw_path, status=status, **fields)
            )

    def _send(self, status: int, body: bytes, headers: Mapping[str, str] | None = None, **record: Any) -> None:
        self.send_response(status)
        sent = {"Content-Length": str(len(body)), "X-Request-Id": f"Root={secrets.token_hex(8)}", **(headers or {})}
        for key, value in sent.items():
            self.send_header(key, value)
        self.end_headers()
        if self._method != "HEAD":
            self.wfile.write(body)
        self._record(status, **record)

    def _json(self, status: int, value: Any, headers: Mapping[str, str] | None = None) -> None:
        body = json.dumps(value).encode()
        self._send(status, body, {"Content-Type": "application/json; charset=utf-8", **(headers or {})})

    def _error(
        self, status: int, message: str, code: str | None = None, headers: Mapping[str, str] | None = None
    ) -> None:
        sent = {"X-Error-Message": message, **({"X-Error-Code": code} if code else {}), **(headers or {})}
        self._json(status, {"error": message}, sent)

    def _token(self) -> str | None:
        value = self.headers.get("Authorization") or ""
        if value.lower().startswith("bearer "):
            return value[7:].strip() or None
        return None

    # ---------------------------------------------------------------- the hub's routes
    def _hub(self, path: str) -> None:
        segments = [unquote(s) for s in path.strip("/").split("/")] if path.strip("/") else []
        if segments[:1] == ["_standin"]:
            self._control(segments[1:])
            return
        if segments == ["health"]:
            self._send(200, b"ok\n", {"Content-Type": "text/plain"})
            return
        token = self._token()
        user = self.hub.user_of(token)
        if token is not None and user is None:
            self._error(401, INVALID_CREDENTIALS)
            return
        if segments == ["api", "whoami-v2"]:
            if user is None:
                self._error(401, INVALID_CREDENTIALS)
            else:
                self._json(200, {"type": "user", "name": user, "auth": {"accessToken": {"role": "read"}}})
            return
        if segments[:2] == ["api", "models"] and len(segments) >= 3:
            repo_id, rest = _split_repo(segments[2:])
            self._api(repo_id, rest, user)
            return
        if len(segments) >= 4:
            repo_id, rest = _split_repo(segments)
            if rest[:1] == ["resolve"] and len(rest) >= 3:
                # The revision is one segment (the client quotes its "/"); the file's path is the rest.
                self._resolve(repo_id, rest[1], "/".join(rest[2:]), user)
                return
        self._error(404, "Sorry, we can't find the page you are looking for.")

    def _repo(self, repo_id: str, user: str | None) -> Repo | None:
        """The repository if this caller may know of it; else the hub's RepoNotFound has been answered."""
        repo = self.hub.repos.get(repo_id)
        if repo is None or (repo.private and user not in repo.authorized):
            # Anonymous: 401 (the hub will not say whether a private repository exists); with a token: 404.
            self._error(401 if user is None else 404, REPO_NOT_FOUND, "RepoNotFound")
            return None
        return repo

    def _commit(self, repo: Repo, revision: str) -> Commit | None:
        commit = repo.resolve(revision)
        if commit is None:
            self._error(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return commit

    def _api(self, repo_id: str, rest: list[str], user: str | None) -> None:
        repo = self._repo(repo_id, user)
        if repo is None:
            return
        if not rest or rest[0] == "revision":
            commit = self._commit(repo, rest[1] if len(rest) > 1 else "main")
            if commit is not None:
                self._json(200, self._info(repo, commit))
        elif rest[0] == "tree":
            commit = self._commit(repo, rest[1] if len(rest) > 1 else "main")
            if commit is not None:
                self._tree(commit, "/".join(rest[2:]))
        elif rest[0] == "refs":
            branches = [
                {"name": name, "ref": f"refs/heads/{name}", "targetCommit": sha} for name, sha in repo.branches.items()
            ]
            tags = [{"name": name, "ref": f"refs/tags/{name}", "targetCommit": sha} for name, sha in repo.tags.items()]
            self._json(200, {"branches": branches, "converts": [], "tags": tags})
        else:
            self._error(404, "Sorry, we can't find the page you are looking for.")

    def _info(self, repo: Repo, commit: Commit) -> dict[str, Any]:
        blobs = (self._query.get("blobs") or ["false"])[0].lower() == "true"
        siblings = [
            entry.sibling_json() if blobs else {"rfilename": path} for path, entry in sorted(commit.files.items())
        ]
        info: dict[str, Any] = {
            "_id": hashlib.sha1(repo.repo_id.encode(), usedforsecurity=False).hexdigest()[:24],
            "id": repo.repo_id,
            "modelId": repo.repo_id,
            "author": repo.repo_id.split("/")[0] if "/" in repo.repo_id else None,
            "sha": commit.sha,
            "lastModified": _iso(commit.date),
            "createdAt": _iso(repo.created),
            "private": repo.private,
            "gated": repo.gated,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "library_name": "transformers",
            "pipeline_tag": "text-generation",
            "tags": ["transformers", "safetensors", "text-generation"],
            "siblings": siblings,
            "spaces": [],
            "usedStorage": sum(e.blob.size for e in commit.files.values()),
        }
        config = commit.files.get("config.json")
        if config is not None and config.blob.data is not None:
            with contextlib.suppress(ValueError):
                parsed = json.loads(config.blob.data)
                info["config"] = {k: parsed[k] for k in ("architectures", "model_type") if k in parsed}
        safetensors = _safetensors_parameters(commit.files)
        if safetensors is not None:
            info["safetensors"] = safetensors
        expand = self._query.get("expand") or self._query.get("expand[]")
        if expand:
            info = {k: v for k, v in info.items() if k in {"_id", "id", *expand}}
        return info

    def _tree(self, commit: Commit, under: str) -> None:
        recursive = (self._query.get("recursive") or ["false"])[0].lower() == "true"
        prefix = f"{under.strip('/')}/" if under.strip("/") else ""
        if prefix and not any(p.startswith(prefix) for p in commit.files):
            self._error(404, ENTRY_NOT_FOUND, "EntryNotFound", {"X-Repo-Commit": commit.sha})
            return
        out: list[dict[str, Any]] = []
        folders: set[str] = set()
        for path, entry in sorted(commit.files.items()):
            if not path.startswith(prefix):
                continue
            parts = path[len(prefix) :].split("/")
            # Every folder on the way (all of them when recursive, the first level otherwise).
            for depth in range(1, len(parts) if recursive else min(2, len(parts))):
                folder = prefix + "/".join(parts[:depth])
                if folder not in folders:
                    folders.add(folder)
                    oid = hashlib.sha1(f"{commit.sha}:{folder}".encode(), usedforsecurity=False).hexdigest()
                    out.append({"type": "directory", "oid": oid, "size": 0, "path": folder})
            if recursive or len(parts) == 1:
                out.append(entry.tree_json())
        self._json(200, out)

    def _resolve(self, repo_id: str, revision: str, filename: str, user: str | None) -> None:
        repo = self._repo(repo_id, user)
        if repo is None:
            return
        if repo.gated and user not in repo.authorized:
            if user is None:
                message = (
                    f"Access to model {repo_id} is restricted. You must have access to it and be authenticated "
                    "to access it. Please log in."
                )
                self._error(401, message, "GatedRepo")
            else:
                message = (
                    f"Access to model {repo_id} is restricted and you are not in the authorized list. "
                    f"Visit {self.server.hub_server.url}/{repo_id} to ask for access."
                )
                self._error(403, message, "GatedRepo")
            return
        commit = self._commit(repo, revision)
        if commit is None:
            return
        entry = commit.files.get(filename)
        if entry is None:
            self._error(404, ENTRY_NOT_FOUND, "EntryNotFound", {"X-Repo-Commit": commit.sha})
            return
        common = {"X-Repo-Commit": commit.sha, "ETag": f'"{entry.oid}"', "Vary": "Origin, Accept-Encoding"}
        if entry.lfs:
            expires = int(time.time()) + SIGNED_URL_SECONDS
            query = f"expires={expires}&signature={self.hub.sign(entry.blob.sha256, expires)}"
            name = quote(filename.rsplit("/", 1)[-1])
            location = f"{self.server.hub_server.cdn_url}/lfs/{quote(repo_id)}/{entry.blob.sha256}/{name}?{query}"
            body = f"Found. Redirecting to {location}".encode()
            headers = {
                **common,
                "Location": location,
                "X-Linked-Etag": f'"{entry.blob.sha256}"',
                "X-Linked-Size": str(entry.blob.size),
                "Content-Type": "text/plain; charset=utf-8",
            }
            self._send(302, body, headers, repo_id=repo_id, filename=filename)
            return
        self._body(entry, repo_id, filename, common)

    # ---------------------------------------------------------------- the CDN
    def _cdn(self, path: str) -> None:
        segments = [unquote(s) for s in path.strip("/").split("/")]
        # /lfs/{repo_id...}/{sha256}/{name}
        if len(segments) < 4 or segments[0] != "lfs":
            self._send(404, b"NoSuchKey\n", {"Content-Type": "text/plain"})
            return
        repo_id, sha256 = "/".join(segments[1:-2]), segments[-2]
        expires = int((self._query.get("expires") or ["0"])[0] or 0)
        signature = (self._query.get("signature") or [""])[0]
        if expires < time.time() or not hmac.compare_digest(signature, self.hub.sign(sha256, expires)):
            self._send(
                403, b"AccessDenied: the signature does not match or has expired\n", {"Content-Type": "text/plain"}
            )
            return
        repo = self.hub.repos.get(repo_id)
        entry = None
        for commit in repo.commits.values() if repo else []:
            entry = next((e for e in commit.files.values() if e.lfs and e.blob.sha256 == sha256), None)
            if entry is not None:
                break
        if entry is None:
            self._send(404, b"NoSuchKey\n", {"Content-Type": "text/plain"})
            return
        self._body(entry, repo_id, entry.path, {"ETag": f'"{sha256}"'})

    # ---------------------------------------------------------------- a file's bytes
    def _body(self, entry: Entry, repo_id: str, filename: str, headers: Mapping[str, str]) -> None:
        size = entry.blob.size
        start, status = 0, 200
        wanted = self.headers.get("Range")
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", wanted.strip()) if wanted else None
        end = size
        if match:
            start = int(match.group(1))
            end = min(size, int(match.group(2)) + 1) if match.group(2) else size
            if start >= size or start >= end:
                extra = {"Content-Range": f"bytes */{size}"}
                self._send(416, b"", {**headers, **extra}, repo_id=repo_id, filename=filename, range_start=start)
                return
            status = 206
        content_type = mimetypes.guess_type(filename)[0] or "application/octet-stream"
        name = filename.rsplit("/", 1)[-1]
        sent = {
            **headers,
            "Content-Type": content_type,
            "Content-Length": str(end - start),
            "Accept-Ranges": "bytes",
            "Content-Disposition": f"inline; filename*=UTF-8''{quote(name)}; filename=\"{name}\";",
            "X-Request-Id": f"Root={secrets.token_hex(8)}",
        }
        if status == 206:
            sent["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        self.send_response(status)
        for key, value in sent.items():
            self.send_header(key, value)
        self.end_headers()
        record = {"repo_id": repo_id, "filename": filename, "range_start": start if match else None}
        if self._method == "HEAD":
            self._record(status, **record)
            return
        fault = self.hub._take_fault(repo_id, filename)
        written = 0
        began = time.monotonic()
        try:
            for piece in entry.blob.chunks(start, end):
                if fault is not None and written + len(piece) >= fault.after:
                    piece = piece[: fault.after - written]
                    self.wfile.write(piece)
                    written += len(piece)
                    self.hub.count(repo_id, filename, len(piece))
                    self.wfile.flush()
                    if fault.kind == "cut":
                        raise _DropError()
                    fault.release.wait()
                    fault = None
                    continue
                self.wfile.write(piece)
                written += len(piece)
                self.hub.count(repo_id, filename, len(piece))
                rate = self.hub.rate
                if rate:
                    ahead = written / rate - (time.monotonic() - began)
                    if ahead > 0:
                        time.sleep(ahead)
        except _DropError:
            self._record(status, body_bytes=written, cut=True, **record)
            raise
        except OSError:
            self._record(status, body_bytes=written, cut=True, **record)
            raise
        self._record(status, body_bytes=written, **record)

    # ---------------------------------------------------------------- control, for a hub in another process
    def _control(self, segments: list[str]) -> None:
        """``POST /_standin/push`` ``{"repo", "files": {path: base64 | null}, "message"?, "branch"?}`` -> ``{"sha"}``;
        ``POST /_standin/tag`` ``{"repo", "tag", "revision"?}``; ``POST /_standin/outage`` ``{"status": 503|null}``;
        ``POST /_standin/cut`` ``{"repo", "file", "after", "times"?}``; ``POST /_standin/rate``
        ``{"bytes_per_second"}``; ``GET /_standin/served`` -> every response so far."""
        hub = self.hub
        if self._method == "GET" and segments == ["served"]:
            self._json(200, [s.__dict__ for s in list(hub.served)])
            return
        if self._method != "POST" or len(segments) != 1:
            self._error(404, "no such control")
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        action = segments[0]
        try:
            if action == "push":
                files = {p: None if c is None else base64.b64decode(c) for p, c in body["files"].items()}
                sha = hub.push(body["repo"], files, branch=body.get("branch", "main"), message=body.get("message", ""))
                self._json(200, {"sha": sha})
            elif action == "tag":
                self._json(200, {"sha": hub.tag(body["repo"], body["tag"], body.get("revision", "main"))})
            elif action == "outage":
                hub.outage = body.get("status")
                self._json(200, {"outage": hub.outage})
            elif action == "cut":
                hub.cut(body["repo"], body["file"], int(body["after"]), int(body.get("times", 1)))
                self._json(200, {})
            elif action == "rate":
                hub.rate = body.get("bytes_per_second")
                self._json(200, {"rate": hub.rate})
            else:
                self._error(404, "no such control")
        except (KeyError, ValueError) as e:
            self._error(400, f"bad control request: {e}")


class _Listener(TrackedHTTPServer):
    def __init__(self, address: tuple[str, int], hub_server: HubServer, role: str) -> None:
        self.hub_server = hub_server
        self.role = role
        super().__init__(address, _Handler, hub_server.tls)


class HubServer:
    """The hub and its CDN, each on a loopback port, served from threads of this process.

    ``stop()`` closes both listeners (connections are refused: the hub is down); ``start()`` opens
    them again on the same ports."""

    def __init__(
        self,
        hub: Hub,
        host: str = "127.0.0.1",
        port: int = 0,
        cdn_port: int = 0,
        prefix: str = "",
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.hub = hub
        self.prefix = "/" + prefix.strip("/") if prefix.strip("/") else ""
        self.tls = tls
        self.host = host
        self.port = port
        self.cdn_port = cdn_port
        self._listeners: list[tuple[_Listener, threading.Thread]] = []

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}{self.prefix}"

    @property
    def cdn_url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.cdn_port}"

    def start(self) -> HubServer:
        if self._listeners:
            return self
        hub = _Listener((self.host, self.port), self, "hub")
        cdn = _Listener((self.host, self.cdn_port), self, "cdn")
        self.port, self.cdn_port = hub.server_address[1], cdn.server_address[1]
        for listener in (hub, cdn):
            thread = threading.Thread(target=listener.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
            thread.start()
            self._listeners.append((listener, thread))
        return self

    def stop(self) -> None:
        for listener, thread in self._listeners:
            if thread.is_alive():  # (shutdown() waits for a serving loop that may already be gone at exit)
                listener.shutdown()
            listener.server_close()
            listener.drop_connections()
            thread.join(5)
        self._listeners = []

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.hub.clear_faults()
        self.stop()


# ------------------------------------------------------------------------------------ the local stack's models


def standard_hub(large: bool = False) -> Hub:
    """The local stack's repositories: the tiny chat model, its gated copy (``DEV_USER`` may read it),
    its QwQ-format variant, and with ``large`` the model of about 200 MiB (made on first use)."""
    from devstack import tiny_model
    from devstack.cluster.paths import cache_root

    models = cache_root() / "models"
    hub = Hub()
    hub.add_user(DEV_USER, DEV_TOKEN)
    hub.add_user(OTHER_USER, OTHER_TOKEN)
    tiny = tiny_model.install_model(models / tiny_model.REPOSITORY)
    hub.create_from_folder(tiny_model.REPOSITORY, tiny)
    hub.create_from_folder(tiny_model.GATED_REPOSITORY, tiny, gated="manual")
    hub.grant(tiny_model.GATED_REPOSITORY, DEV_USER)
    features = tiny_model.install_features_model(models / tiny_model.FEATURES_REPOSITORY)
    hub.create_from_folder(tiny_model.FEATURES_REPOSITORY, features)
    if large:
        big = tiny_model.install_large_model(models / tiny_model.LARGE_REPOSITORY)
        hub.create_from_folder(tiny_model.LARGE_REPOSITORY, big)
    return hub


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--cdn-port", type=int, default=0)
    parser.add_argument("--large", action="store_true", help="also serve the ~200 MiB model (made on first use)")
    parser.add_argument("--rate", type=int, default=None, help="bytes per second of each download")
    args = parser.parse_args()
    hub = standard_hub(large=args.large)
    hub.rate = args.rate
    server = HubServer(hub, args.host, args.port, args.cdn_port).start()
    print(f"hub {server.url} (HF_ENDPOINT), cdn {server.cdn_url}: {', '.join(sorted(hub.repos))}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
