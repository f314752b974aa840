"""A threading HTTP(S) server of the stand-ins that knows its open connections, so a stopped stand-in
can close them (a client's kept-alive connection must not go on being answered by a server that was
stopped: kube-apiserver keeps its connections to a kubelet, the hf CLI to the hub)."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class TrackedHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], tls: ssl.SSLContext | None = None
    ) -> None:
        self.connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, handler)
        if tls is not None:
            # The handshake on the first read, in the request's own thread: a client that refuses the
            # certificate never holds up the listener.
            self.socket = tls.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        """Close every open connection."""
        with self._connections_lock:
            open_now = list(self.connections)
        for connection in open_now:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that goes away mid-response (or refuses the handshake) is no error to print."""
