"""The streams' fast path (apps/stream_wire.py) against the real uvicorn it was verified on.

A real uvicorn server in process, with each HTTP implementation the platform may run (h11, as
the units do, and httptools), and a raw socket client: bytes written to the wire land in the
chunked body in order with the server's own sends. These break when the internals the wire
relies on change shape (the cycle's transport, chunked framing). Any other release of uvicorn
or of its parser gets no wire and one warning: the public ASGI path.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
import uvicorn

from apps import stream_wire
from apps.events.frames import http_chunk
from tests.procs import free_port


async def _serve_once(http: str, app: Any, request: bytes) -> bytes:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, http=http,
                                           lifespan="off", log_level="warning"))
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(30):
            while not server.started:
                await asyncio.sleep(0.01)  # uvicorn's own start flag
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request)
            response = b""
            while not response.endswith(b"0\r\n\r\n"):
                data = await reader.read(65536)
                if not data:
                    break
                response += data
            writer.close()
            return response
    finally:
        server.should_exit = True
        await task


def _dechunk(body: bytes) -> bytes:
    out = b""
    while True:
        size, _, rest = body.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            return out
        out, body = out + rest[:n], rest[n + 2:]


@pytest.mark.parametrize("http", ["h11", "httptools"])
def test_bytes_written_to_the_wire_land_in_the_chunked_body_in_order(http):
    """On the verified releases the bytes go around ``send`` and land in order; on any other
    (a compatibility leg's newer uvicorn) there is no wire, and the same events through ASGI
    send give the same body: the fallback the module promises."""
    seen: dict[str, Any] = {}
    verified = stream_wire.verified(http)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        wire = stream_wire.wire_of(scope, send)
        seen["wire"] = wire
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": b"one\n", "more_body": True})
        if wire is not None:
            seen["writable"] = wire.writable()
            wire.write(http_chunk(b"two\n") + http_chunk(b"three\n"))
        else:
            for event in (b"two\n", b"three\n"):
                await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b"four\n", "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    response = asyncio.run(_serve_once(
        http, app, b"GET /s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"))
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in head.lower()
    assert (seen["wire"] is not None) == verified
    if verified:
        assert seen["writable"] is True
    assert _dechunk(body) == b"one\ntwo\nthree\nfour\n"


@pytest.mark.parametrize("http", ["h11", "httptools"])
def test_an_http_1_0_request_gets_no_wire(http):
    seen: dict[str, Any] = {}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen["wire"] = stream_wire.wire_of(scope, send)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"0\r\n\r\n"})  # ends the read

    asyncio.run(_serve_once(http, app, b"GET /s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n"))
    assert seen["wire"] is None  # HTTP/1.0 bodies are not chunked


def test_an_unverified_release_gets_no_wire_and_one_warning(monkeypatch, caplog):
    installed = {**stream_wire.VERIFIED, "uvicorn": "0.99.0"}
    monkeypatch.setattr(stream_wire, "_installed", installed.get)
    stream_wire.verified.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="apps.stream_wire"):
            assert not stream_wire.verified("h11") and not stream_wire.verified("h11")
        assert [r.getMessage() for r in caplog.records] == [
            "streams: direct writes off, events go through ASGI send (slower, same "
            "guarantees): verified on uvicorn 0.54.0, h11 0.16.0, installed uvicorn 0.99.0, "
            "h11 0.16.0"]
    finally:
        stream_wire.verified.cache_clear()


def test_a_send_that_is_not_uvicorns_gets_no_wire():
    async def send(message: dict[str, Any]) -> None:
        pass

    assert stream_wire.wire_of({"http_version": "1.1", "method": "GET"}, send) is None


def test_direct_writes_switched_off_give_no_wire(settings):
    settings.STREAMS_DIRECT_WRITES = False
    seen: dict[str, Any] = {}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen["wire"] = stream_wire.wire_of(scope, send)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    asyncio.run(_serve_once("h11", app, b"GET /s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"))
    assert seen["wire"] is None
