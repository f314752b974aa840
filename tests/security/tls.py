"""TLS material for the connection tests, and a TLS-terminating proxy (asyncio + ssl).

``Material(tmp)``: a CA with a server certificate for localhost/127.0.0.1 and a client certificate,
and a second, unrelated CA with its own client certificate (the "wrong" one), made with the local
stack's openssl helper. ``tls_proxy(ctx, upstream)`` accepts TLS on a loopback port and pipes the
plain bytes to ``upstream`` (gRPC's HTTP/2 passes through untouched: ALPN h2 is offered).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from devstack.cluster.pki import IssuedCertificate, create_ca, issue_certificate


@dataclass(frozen=True)
class Material:
    server: IssuedCertificate
    client: IssuedCertificate
    rogue_client: IssuedCertificate

    @classmethod
    def make(cls, directory: Path) -> Material:
        ca = create_ca(directory, "test-ca")
        rogue_ca = create_ca(directory, "rogue-ca")
        return cls(
            server=issue_certificate(ca, directory, "server", sans=("DNS:localhost", "IP:127.0.0.1")),
            client=issue_certificate(ca, directory, "worker", usage="clientAuth"),
            rogue_client=issue_certificate(rogue_ca, directory, "rogue-worker", usage="clientAuth"),
        )

    def key_files(self) -> list[Path]:
        return [self.server.key, self.client.key, self.rogue_client.key]

    def server_context(self, require_client_cert: bool = True) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(self.server.ca))
        context.load_cert_chain(str(self.server.cert), str(self.server.key))
        context.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_NONE
        context.set_alpn_protocols(["h2", "http/1.1"])
        return context


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


@contextlib.asynccontextmanager
async def tls_proxy(context: ssl.SSLContext, upstream: tuple[str, int]) -> AsyncIterator[int]:
    """The port of a TLS listener on 127.0.0.1 that forwards to ``upstream`` in plain text."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*upstream)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context, ssl_handshake_timeout=10)
    try:
        yield int(server.sockets[0].getsockname()[1])
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 5)
