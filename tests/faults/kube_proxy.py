"""A fault proxy in front of kube-apiserver: our own small async TLS/HTTP proxy (no mock of the client).

It terminates TLS with the local control plane's own serving certificate (so a client that trusts the
cluster CA, with an unchanged token, talks to it as to the API server), reads each HTTP/1.1 request,
and either relays it to the API server over a new TLS connection (``Connection: close`` both ways: one
request per connection, so every request is a separate decision) or answers a fault:

* ``409`` Conflict on writes that can conflict (PUT, PATCH);
* ``429`` Too Many Requests (with ``Retry-After: 1``), ``500``, ``503``;
* a timeout: the request is read and never answered (the connection is held open, then dropped);
* a cut watch: a watch request is relayed, and its stream is cut after a second or two; when the
  rates turn faulty, the watch streams open at that moment are cut;
* unreachable (``Block``): the requests matching a pattern get no answer at all — the connection is
  dropped once the request is read, as a client sees a server that went away — for ``seconds`` from
  the first of them; a block can wait for other requests to go through first (``after``), so it
  meets one step of one order (its first probe, say) and nothing before it.

The faults are HTTP answers after TLS termination — honest for what a client sees from an API server
or a proxy in front of it (errors, stalls, dropped streams); TLS itself is not attacked. ``rates``
sets the share of requests each fault takes; ``set_rates`` changes it while running (``off()``: relay
everything). ``counts`` says how many of each were injected.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import socket
import ssl
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import yaml

WRITES = {b"PUT", b"PATCH"}


@dataclass
class Rates:
    conflict: float = 0.0
    throttle: float = 0.0
    error: float = 0.0
    timeout: float = 0.0
    cut_watch: float = 0.0


@dataclass
class Block:
    """Requests whose ``METHOD path?query`` matches ``pattern`` dropped unanswered for ``seconds`` from
    the first of them — once each pattern of ``after`` has matched a request (relayed), in order; or
    from ``arm()``."""

    pattern: str
    seconds: float
    after: list[str] = field(default_factory=list)
    armed: bool = True
    began: float | None = None
    refused: int = 0

    def arm(self) -> None:
        self.after, self.armed, self.began = [], True, time.monotonic()

    def refuses(self, request: str) -> bool:
        if not self.armed:
            return False
        if self.after:
            if re.search(self.after[0], request):
                self.after.pop(0)
            return False
        if self.began is not None and time.monotonic() - self.began >= self.seconds:
            return False
        if not re.search(self.pattern, request):
            return False
        if self.began is None:
            self.began = time.monotonic()
        self.refused += 1
        return True

    @property
    def over(self) -> bool:
        return self.began is not None and time.monotonic() - self.began >= self.seconds


STATUS_TEXT = {409: "Conflict", 429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable"}


def _status_body(code: int) -> bytes:
    return json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": f"injected by the fault proxy: {STATUS_TEXT[code]}",
            "reason": "Conflict" if code == 409 else STATUS_TEXT[code],
            "code": code,
        }
    ).encode()


class KubeFaultProxy:
    def __init__(
        self,
        server: str,
        ca_file: Path,
        cert_file: Path,
        key_file: Path,
        rates: Rates | None = None,
        seed: int = 13,
        hold_seconds: float = 60,
    ) -> None:
        split = urlsplit(server)
        self.target = (split.hostname or "127.0.0.1", split.port or 443)
        self.rates = rates or Rates()
        self.random = random.Random(seed)
        self.hold_seconds = hold_seconds
        self.counts: Counter[str] = Counter()
        self.serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.serving.load_cert_chain(str(cert_file), str(key_file))
        self.upstream = ssl.create_default_context(cafile=str(ca_file))
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port: int = sock.getsockname()[1]
        self.server: asyncio.Server | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        # The client sides of the watch streams being relayed now.
        self.watches: set[asyncio.WriteTransport] = set()
        self.blocks: list[Block] = []

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def set_rates(self, rates: Rates) -> None:
        """New rates; with ``cut_watch``, the watch streams open now are cut too (a watch lives for
        minutes: without this, a fault window would meet only the watches that start inside it)."""
        self.rates = rates
        if rates.cut_watch > 0:
            for transport in list(self.watches):
                self.counts["cut_watch"] += 1
                transport.abort()
            self.watches.clear()

    def off(self) -> None:
        self.rates = Rates()

    def block(self, block: Block) -> Block:
        self.blocks.append(block)
        return block

    def kubeconfig(self, original: Path, path: Path) -> Path:
        """A copy of ``original`` (same CA, same token) whose server is this proxy."""
        doc = yaml.safe_load(original.read_text())
        for cluster in doc["clusters"]:
            cluster["cluster"]["server"] = self.url
        path.write_text(yaml.safe_dump(doc))
        path.chmod(0o600)
        return path

    async def open(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, ssl=self.serving)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
        for task in list(self.tasks):
            task.cancel()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        try:
            await self._one_request(reader, writer)
        except (OSError, ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, asyncio.LimitOverrunError):
            pass
        finally:
            self.tasks.discard(task)
            writer.transport.abort()

    async def _one_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        method, target, _ = lines[0].split(b" ", 2)
        headers = [line for line in lines[1:] if line]
        length = 0
        kept = []
        for line in headers:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
            if name.strip().lower() in (b"connection", b"keep-alive"):
                continue
            kept.append(line)
        body = await reader.readexactly(length) if length else b""
        watch = b"watch=true" in target.lower() or b"watch=1" in target
        request = f"{method.decode()} {target.decode(errors='replace')}"
        if any([block.refuses(request) for block in self.blocks]):  # every block sees every request
            self.counts["unreachable"] += 1
            return  # dropped: no answer, the connection goes
        fault = self._pick(method, watch)
        if fault == "timeout":
            self.counts["timeout"] += 1
            await asyncio.sleep(self.hold_seconds)
            return
        if fault in ("409", "429", "500", "503"):
            self.counts[fault] += 1
            code = int(fault)
            payload = _status_body(code)
            extra = b"Retry-After: 1\r\n" if code == 429 else b""
            writer.write(
                b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%sConnection: close\r\n\r\n"
                % (code, STATUS_TEXT[code].encode(), len(payload), extra)
                + payload
            )
            await writer.drain()
            return
        up_reader, up_writer = await asyncio.open_connection(
            *self.target, ssl=self.upstream, server_hostname=self.target[0]
        )
        try:
            up_writer.write(b"\r\n".join([lines[0], *kept, b"Connection: close", b"", b""]) + body)
            await up_writer.drain()
            relay = self._relay(up_reader, writer)
            if fault == "cut":
                self.counts["cut_watch"] += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(relay, timeout=1 + self.random.random())
                return
            if watch:
                self.watches.add(writer.transport)
            await relay
        finally:
            self.watches.discard(writer.transport)
            up_writer.transport.abort()

    @staticmethod
    async def _relay(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()

    def _pick(self, method: bytes, watch: bool) -> str | None:
        r, roll = self.rates, self.random.random()
        if watch:
            return "cut" if roll < r.cut_watch else None
        for fault, rate in (
            ("409", r.conflict if method in WRITES else 0.0),
            ("429", r.throttle),
            ("500", r.error / 2),
            ("503", r.error / 2),
            ("timeout", r.timeout),
        ):
            if roll < rate:
                return fault
            roll -= rate
        return None
