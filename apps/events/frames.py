"""An event's bytes on the wire, built once per event and worker and shared by every connection.

``event_frame`` is the server-sent-event frame a stream yields; ``event_chunk`` is the same
frame already framed as one HTTP/1.1 chunk, which the hub writes straight to an idle
connection's socket (``apps.stream_wire``): a broadcast to 500 connections encodes once.
"""

from __future__ import annotations

import json

from apps.sse import frame

from .types import Event


def event_frame(event: Event) -> bytes:
    cached = event.memo.get("sse")
    if cached is None:  # built once per event and process, shared by every connection
        cached = event.memo["sse"] = frame(
            id=event.id, event=event.kind, data=json.dumps(event.public(), separators=(",", ":")))
    return cached


def http_chunk(data: bytes) -> bytes:
    """``data`` as one chunk of a chunked HTTP/1.1 body (RFC 9112, 7.1)."""
    return b"%x\r\n%b\r\n" % (len(data), data)


def event_chunk(event: Event) -> bytes:
    cached = event.memo.get("chunk")
    if cached is None:
        cached = event.memo["chunk"] = http_chunk(event_frame(event))
    return cached
