"""A hostile endpoint costs a probe its own bounds, no more (issue 33: probes have no bounds).

Real sockets on the loopback: a server that drips its answer a byte at a time, one that never ends
its body, one that sends a compressed body, one that never answers. The probe (the observer's and
the worker's, ``activities.health.probe_models``) returns within its deadline, having read no more
than its body limit, and says which bound it hit.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from activities.health import MAX_PROBE_BODY_BYTES, MODELS_PATH, TOKEN_UNUSABLE_DETAIL, probe_models
from inference_api.reasons import Reason

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
MODELS = b'{"object":"list","data":[{"id":"m","object":"model"}]}'


class Hostile:
    """One raw HTTP server on the loopback; counts the bytes it managed to send."""

    def __init__(self, handler: Callable[[Hostile, asyncio.StreamWriter], Awaitable[None]]) -> None:
        self.handler = handler
        self.sent = 0
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        self.requests.append(head)
        try:
            await self.handler(self, writer)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def write(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
        await writer.drain()
        self.sent += len(data)

    @property
    def url(self) -> str:
        assert self.server is not None
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"


async def hostile(handler: Callable[[Hostile, asyncio.StreamWriter], Awaitable[None]]) -> AsyncIterator[Hostile]:
    server = Hostile(handler)
    server.server = await asyncio.start_server(server._serve, "127.0.0.1", 0)
    try:
        yield server
    finally:
        server.server.close()


async def drip(server: Hostile, writer: asyncio.StreamWriter) -> None:
    """Headers at once, then the body a byte every 0.2 s (bounded: 300 bytes, a minute)."""
    await server.write(writer, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 300\r\n\r\n")
    for _ in range(300):
        await server.write(writer, b" ")
        await asyncio.sleep(0.2)


async def endless(server: Hostile, writer: asyncio.StreamWriter) -> None:
    """A chunked body of 64 KiB chunks, up to 256 MiB (it is cut long before)."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    await server.write(writer, head)
    chunk = b"[" * 65536
    for _ in range(4096):
        await server.write(writer, b"%x\r\n%s\r\n" % (len(chunk), chunk))


async def declared_huge(server: Hostile, writer: asyncio.StreamWriter) -> None:
    await server.write(writer, b"HTTP/1.1 200 OK\r\nContent-Length: 10737418240\r\n\r\n")
    await server.write(writer, b"{" * 4096)
    await asyncio.sleep(30)


async def gzipped(server: Hostile, writer: asyncio.StreamWriter) -> None:
    import gzip

    body = gzip.compress(b" " * (64 << 20))  # 64 MiB of blanks, about 64 KiB on the wire
    head = f"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    await server.write(writer, head + body)


async def silent(server: Hostile, writer: asyncio.StreamWriter) -> None:
    await asyncio.sleep(30)


async def fine(server: Hostile, writer: asyncio.StreamWriter) -> None:
    await server.write(writer, b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(MODELS), MODELS))


async def probe_of(
    handler: Callable[[Hostile, asyncio.StreamWriter], Awaitable[None]], timeout: float = 1.0, **kwargs: object
) -> tuple[Hostile, float, str, bool]:
    async for server in hostile(handler):
        async with httpx.AsyncClient() as http:
            started = time.monotonic()
            result = await probe_models(http, server.url, "m", None, timeout, **kwargs)  # type: ignore[arg-type]
            return server, time.monotonic() - started, result.detail, result.ok
    raise AssertionError("no server")


async def test_a_dripping_answer_is_cut_at_the_probes_deadline() -> None:
    # Before, the timeout was per read: a byte every 0.2 s kept a 1 s probe alive for a minute.
    _server, took, detail, ok = await probe_of(drip, timeout=1.0)
    assert not ok
    assert took < 2.0, f"the probe took {took:.1f} s"
    assert detail == f"GET {MODELS_PATH}: no whole answer in 1 s"


async def test_a_silent_endpoint_is_cut_at_the_probes_deadline() -> None:
    _server, took, detail, ok = await probe_of(silent, timeout=0.5)
    assert not ok
    assert took < 1.5
    assert "0.5 s" in detail


async def test_an_endless_body_is_read_no_further_than_the_limit() -> None:
    server, took, detail, ok = await probe_of(endless, timeout=20.0)
    assert not ok
    assert detail == f"GET {MODELS_PATH}: an answer over {MAX_PROBE_BODY_BYTES} bytes"
    # The probe stopped reading: the server could not push more than the limit and the sockets' buffers.
    assert server.sent < 16 * MAX_PROBE_BODY_BYTES
    assert took < 10


async def test_a_declared_huge_body_is_refused_from_its_head() -> None:
    _server, took, detail, ok = await probe_of(declared_huge, timeout=5.0)
    assert not ok
    assert "an answer over" in detail
    assert took < 2.0


async def test_a_compressed_answer_is_not_inflated() -> None:
    server, _took, detail, ok = await probe_of(gzipped, timeout=5.0)
    assert not ok
    assert detail == f"GET {MODELS_PATH}: a gzip-encoded answer"
    assert b"accept-encoding: identity" in server.requests[0].lower()


async def test_a_well_behaved_endpoint_still_passes() -> None:
    _server, _took, detail, ok = await probe_of(fine)
    assert ok, detail


@pytest.mark.parametrize("token", [None, ""])
async def test_a_class_with_a_token_and_no_usable_token_fails_closed_without_a_request(token: str | None) -> None:
    async for server in hostile(fine):
        async with httpx.AsyncClient() as http:
            result = await probe_models(http, server.url, "m", token, 1.0, token_required=True)
        assert not result.ok
        assert result.reason == Reason.AUTH_TOKEN_INVALID
        assert result.detail == TOKEN_UNUSABLE_DETAIL
        assert server.requests == []  # nothing sent: an open endpoint is never judged healthy


async def test_the_token_goes_only_in_the_authorization_header() -> None:
    async for server in hostile(fine):
        async with httpx.AsyncClient() as http:
            result = await probe_models(http, server.url, "m", "s3cret", 1.0, token_required=True)
        assert result.ok
        assert b"authorization: bearer s3cret" in server.requests[0].lower()
        assert "s3cret" not in result.detail
