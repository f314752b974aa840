"""Tests of the planner service, the planner client and the Kubernetes inventory adapter.

``running_service(app)`` serves an ASGI app with uvicorn in a thread on a free loopback port and
yields its URL; with ``tls=(cert, key)`` it serves HTTPS. ``serving(...)`` yields the URL and the
uvicorn config (its ``ssl`` context is the one a ``CertificateReloader`` reloads).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn


@dataclass(frozen=True)
class Served:
    url: str
    config: uvicorn.Config


@contextlib.contextmanager
def serving(app: Any, timeout: float = 10, tls: tuple[Path, Path] | None = None) -> Iterator[Served]:
    """``http(s)://127.0.0.1:<port>`` while ``app`` is served there; stopped on exit."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="off",
        access_log=False,
        ssl_certfile=str(tls[0]) if tls else None,
        ssl_keyfile=str(tls[1]) if tls else None,
    )
    config.load()
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name=f"planner-{port}")
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the planner service did not start")
        time.sleep(0.02)
    try:
        yield Served(f"{'https' if tls else 'http'}://127.0.0.1:{port}", config)
    finally:
        server.should_exit = True
        thread.join(timeout)
        sock.close()


@contextlib.contextmanager
def running_service(app: Any, timeout: float = 10, tls: tuple[Path, Path] | None = None) -> Iterator[str]:
    with serving(app, timeout, tls) as served:
        yield served.url
