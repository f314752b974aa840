"""A TCP relay that can stop answering: a server that goes away and comes back on the same port."""

from __future__ import annotations

import asyncio
import contextlib
import socket


class Proxy:
    """A TCP relay in front of the dev server that can stop answering (connections cut, port closed)
    and answer again on the same port."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.server: asyncio.Server | None = None
        self.transports: set[asyncio.WriteTransport] = set()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def open(self) -> None:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", self.port, reuse_address=True)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
        for transport in list(self.transports):
            transport.abort()
        self.transports.clear()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self.transports |= {writer.transport, up_writer.transport}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, ConnectionError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


class SilentProxy(Proxy):
    """The relay, which can also go silent (``silent = True``): from then on nothing is relayed either
    way — bytes are read and dropped, new connections accepted and held — as across a network
    partition, where requests hang until their timeout rather than being refused."""

    silent = False
    connections = 0

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self.silent:
            self.transports.add(writer.transport)
            with contextlib.suppress(OSError, ConnectionError):
                while await reader.read(65536):
                    pass
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self.transports |= {writer.transport, up_writer.transport}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, ConnectionError):
                while data := await src.read(65536):
                    if not self.silent:
                        dst.write(data)
                        await dst.drain()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
