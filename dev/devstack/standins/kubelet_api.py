"""The kubelet's log API for the local cluster's nodes, served by the stand-in fleet.

kube-apiserver answers ``GET /api/v1/namespaces/{ns}/pods/{pod}/log`` (``kubectl logs``,
``CoreV1Api.read_namespaced_pod_log``) by relaying the node's kubelet: ``GET
https://<node address>:<daemonEndpoints port>/containerLogs/{ns}/{pod}/{container}`` with the query
``tailLines``, ``limitBytes``, ``timestamps``, ``previous``, ``follow``, ``sinceSeconds``/``sinceTime``.
kwok plays the kubelet for status only; the local control plane points every node's kubelet endpoint
at one loopback port (``devstack.cluster.launcher.KUBELETS_PORT``), and this server, run by the fleet,
answers there from the files the fleet keeps its containers' output in.

As a kubelet answers: 404 for a pod or container it does not know, 400 for a container that has not
started (no output yet) and for ``previous`` (the fleet keeps no earlier instance apart), the
content otherwise. ``timestamps`` and ``sinceSeconds``/``sinceTime`` are ignored (the files keep no
time per line). ``follow`` streams what the file gains for as long as the container runs.

TLS with a self-signed certificate made at start: kube-apiserver does not verify kubelets' serving
certificates without ``--kubelet-certificate-authority``; the server does not authenticate it either.
"""

from __future__ import annotations

import shutil
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import structlog

from devstack.cluster.pki import create_ca, issue_certificate
from devstack.standins.tracked_http import TrackedHTTPServer

log = structlog.get_logger(__name__)

FOLLOW_POLL_SECONDS = 0.2
_CHUNK = 64 * 1024


class LogUnavailableError(Exception):
    """What a kubelet answers instead of a log: ``status`` (400 or 404) and its plain-text message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class ContainerLog:
    """Where a container's output is, and whether the container still runs (``follow`` waits on it)."""

    path: Path
    running: Callable[[], bool] = lambda: False


# (namespace, pod name, container name) -> its log, or LogUnavailableError
LogLookup = Callable[[str, str, str], ContainerLog]


def tail(data: bytes, lines: int | None) -> bytes:
    """The last ``lines`` lines of ``data`` (a last line without its newline counts), as a kubelet's tailLines."""
    if lines is None:
        return data
    if lines <= 0:
        return b""
    end = len(data) - 1 if data.endswith(b"\n") else len(data)
    start = end
    for _ in range(lines):
        start = data.rfind(b"\n", 0, start)
        if start < 0:
            return data
    return data[start + 1 :]


def _int(query: dict[str, list[str]], name: str) -> int | None:
    values = query.get(name)
    if not values or values[-1] == "":
        return None
    return int(values[-1])


def _flag(query: dict[str, list[str]], name: str) -> bool:
    return (query.get(name) or ["false"])[-1].lower() in ("true", "1")


class _Handler(BaseHTTPRequestHandler):
    server: _Listener
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("kubelet api", request=format % args)

    def _plain(self, status: int, message: str) -> None:
        if status >= 400:
            log.debug("kubelet api refused", path=self.path, status=status, message=message)
        body = message.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.split("/") if p]
        if url.path in ("/healthz", "/healthz/"):
            self._plain(200, "ok")
            return
        if len(parts) != 4 or parts[0] != "containerLogs":
            self._plain(404, "404 page not found\n")
            return
        _, namespace, pod, container = parts
        query = parse_qs(url.query, keep_blank_values=True)
        try:
            tail_lines, limit_bytes = _int(query, "tailLines"), _int(query, "limitBytes")
        except ValueError as err:
            self._plain(400, f"invalid query: {err}\n")
            return
        try:
            found = self.server.lookup(namespace, pod, container)
            if _flag(query, "previous"):
                raise LogUnavailableError(400, f'previous terminated container "{container}" in pod "{pod}" not found')
            data = found.path.read_bytes()
        except LogUnavailableError as err:
            self._plain(err.status, err.message)
            return
        except FileNotFoundError:
            self._plain(400, f'container "{container}" in pod "{pod}" is waiting to start: ContainerCreating')
            return
        except Exception as err:  # the API unreachable, say: the kubelet's own trouble
            log.warning("kubelet api: log lookup failed", pod=f"{namespace}/{pod}", error=repr(err))
            self._plain(500, f"{type(err).__name__}: {err}")
            return
        offset = len(data)
        out = tail(data, tail_lines)
        left = limit_bytes if limit_bytes is not None and limit_bytes >= 0 else None
        if left is not None:
            out = out[:left]
            left -= len(out)
        follow = _flag(query, "follow")
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        if not follow:
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
            return
        # Streamed until the container ends (or limitBytes is reached, or the client goes).
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        try:
            self._chunk(out)
            while not self.server.stopping.is_set() and (left is None or left > 0):
                more = self._read_from(found.path, offset)
                if more:
                    offset += len(more)
                    if left is not None:
                        more = more[:left]
                        left -= len(more)
                    self._chunk(more)
                    continue
                if not found.running():
                    break
                time.sleep(FOLLOW_POLL_SECONDS)
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass  # the client went away

    def _chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    @staticmethod
    def _read_from(path: Path, offset: int) -> bytes:
        try:
            with path.open("rb") as f:
                if f.seek(0, 2) < offset:
                    offset = 0  # truncated: a new attempt of the container writes it again
                f.seek(offset)
                return f.read(_CHUNK)
        except FileNotFoundError:
            return b""


class _Listener(TrackedHTTPServer):
    def __init__(self, address: tuple[str, int], lookup: LogLookup, tls: ssl.SSLContext) -> None:
        self.lookup = lookup
        self.stopping = threading.Event()
        super().__init__(address, _Handler, tls)


class KubeletLogServer:
    """``/containerLogs/{namespace}/{pod}/{container}`` over HTTPS on ``host:port``, answered by ``lookup``."""

    def __init__(self, lookup: LogLookup, port: int, host: str = "127.0.0.1") -> None:
        self.lookup = lookup
        self.host = host
        self.port = port
        self._listener: _Listener | None = None
        self._thread: threading.Thread | None = None
        self._tls_dir: Path | None = None

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    def _tls(self) -> ssl.SSLContext:
        """A self-signed serving certificate for localhost, as a kubelet makes without one given."""
        self._tls_dir = Path(tempfile.mkdtemp(prefix="standin-kubelet-"))
        ca = create_ca(self._tls_dir, "kubelet-ca")
        cert = issue_certificate(ca, self._tls_dir, "kubelet", sans=("DNS:localhost", "IP:127.0.0.1"))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert.cert, cert.key)
        return context

    def start(self) -> KubeletLogServer:
        """Listen (raises OSError where the port is taken)."""
        if self._listener is not None:
            return self
        try:
            listener = _Listener((self.host, self.port), self.lookup, self._tls())
        except BaseException:
            self._remove_tls()
            raise
        self.port = listener.server_address[1]
        self._listener = listener
        self._thread = threading.Thread(
            target=listener.serve_forever, kwargs={"poll_interval": 0.1}, name="stand-in-kubelet-api", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        listener, thread = self._listener, self._thread
        self._listener = self._thread = None
        if listener is not None:
            listener.stopping.set()
            if thread is not None and thread.is_alive():
                listener.shutdown()
            listener.server_close()
            listener.drop_connections()
            if thread is not None:
                thread.join(5)
        self._remove_tls()

    def _remove_tls(self) -> None:
        if self._tls_dir is not None:
            shutil.rmtree(self._tls_dir, ignore_errors=True)
            self._tls_dir = None
