"""The streams' fast path: an idle stream's events written straight to its socket (adr/0035).

The one place the platform reaches past ASGI for streams. On public ASGI every event costs each
connection a task wake-up and an ASGI ``send`` (under uvicorn's h11 protocol, which the
platform's units run, about 26 us of a web worker's CPU per delivery against 11 us this way,
measured with loadtests/sse_fanout.py); the hub instead writes an event's bytes, framed once as
an HTTP/1.1 chunk for every connection, to each idle connection's transport.

What it relies on, verified on the versions in ``VERIFIED``:

- uvicorn's ``send`` for an HTTP request is a bound method of its ``RequestResponseCycle``,
  whose ``transport`` attribute is the connection's asyncio transport (not documented);
- the body of a response the stream front starts (GET, HTTP/1.1, status 200, no
  Content-Length) is chunked: uvicorn's httptools protocol chooses chunked itself, its h11
  protocol leaves it to h11, which chunks any body of unknown length to an HTTP/1.1 peer.

The rest is asyncio's public transport API: a direct write only while the transport is open
and has nothing buffered, so bytes never pass the server's own flow control or an unfinished
send. On any other uvicorn, h11 or httptools release ``wire_of`` returns None and logs once:
streams then take the public ASGI path, slower, with the same guarantees (order, no event
twice, the slow-client cut-off); ``STREAMS_DIRECT_WRITES=false`` chooses that path anyway.
tests/test_stream_wire.py breaks when these internals change shape on the pinned versions.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from django.conf import settings

log = logging.getLogger(__name__)

# The releases these internals were read and measured on (requirements.lock pins them).
VERIFIED = {"uvicorn": "0.54.0", "h11": "0.16.0", "httptools": "0.9.0"}
# uvicorn's response cycles, by the HTTP implementation (the package) they run on.
CYCLES = {"uvicorn.protocols.http.h11_impl.RequestResponseCycle": "h11",
          "uvicorn.protocols.http.httptools_impl.RequestResponseCycle": "httptools"}


def _installed(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


@cache
def verified(parser: str) -> bool:
    """Whether uvicorn and ``parser`` (h11 or httptools) are the verified releases; logs once
    per parser when not."""
    found = {name: _installed(name) for name in ("uvicorn", parser)}
    if all(found[name] == VERIFIED[name] for name in found):
        return True
    log.warning("streams: direct writes off, events go through ASGI send (slower, same "
                "guarantees): verified on %s, installed %s",
                ", ".join(f"{n} {VERIFIED[n]}" for n in found),
                ", ".join(f"{n} {v or 'none'}" for n, v in found.items()))
    return False


class Wire:
    """A stream connection's transport, for writing whole pre-framed HTTP/1.1 chunks."""

    __slots__ = ("_transport",)

    def __init__(self, transport: asyncio.WriteTransport) -> None:
        self._transport = transport

    def writable(self) -> bool:
        """Open, and nothing of earlier sends still buffered (a backed-up client, or bytes
        uvicorn has not flushed): only then may bytes go around the server's ``send``."""
        transport = self._transport
        return not transport.is_closing() and transport.get_write_buffer_size() == 0

    def write(self, chunk: bytes) -> None:
        self._transport.write(chunk)


def wire_of(scope: dict[str, Any], send: Callable[..., Awaitable[None]]) -> Wire | None:
    """The connection's wire, or None: switched off (STREAMS_DIRECT_WRITES), or not HTTP/1.1
    GET under a verified uvicorn protocol."""
    if not settings.STREAMS_DIRECT_WRITES:
        return None
    if scope.get("http_version") != "1.1" or scope.get("method") != "GET":
        return None
    cycle = getattr(send, "__self__", None)
    parser = CYCLES.get(f"{type(cycle).__module__}.{type(cycle).__qualname__}")
    if parser is None or not verified(parser):
        return None
    transport = getattr(cycle, "transport", None)
    # uvloop's transports implement asyncio's interface without subclassing it.
    if not all(callable(getattr(transport, name, None))
               for name in ("write", "is_closing", "get_write_buffer_size")):
        return None
    return Wire(transport)
