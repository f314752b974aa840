"""A TCP relay that can stop answering: a server that goes away and comes back on the same port, or a
network partition that heals."""

from __future__ import annotations

import asyncio
import contextlib
import socket


class Proxy:
    """A TCP relay in front of the dev server that can stop answering (connections cut, port closed)
    and answer again on the same port — or be partitioned (``partition``/``heal``): nothing is cut and
    nothing answers, as when packets are dropped between the two sides. Bytes in flight wait in the
    relay (and, once its reads stop, in the kernel's buffers, then the sender's), new connections are
    accepted and held, and all of it flows again on ``heal``: what TCP shows across a partition that
    heals before either side gives the connection up."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.server: asyncio.Server | None = None
        self.transports: set[asyncio.WriteTransport] = set()
        self.flowing = asyncio.Event()
        self.flowing.set()

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

    def partition(self) -> None:
        """From now on nothing passes either way (no connection is cut or refused)."""
        self.flowing.clear()

    def heal(self) -> None:
        self.flowing.set()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.transports.add(writer.transport)
        await self.flowing.wait()  # a connection made across the partition waits for it to heal
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self.transports.add(up_writer.transport)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, ConnectionError):
                while True:
                    await self.flowing.wait()
                    data = await src.read(65536)
                    if not data:
                        break
                    await self.flowing.wait()  # read before the partition, delivered after it
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
