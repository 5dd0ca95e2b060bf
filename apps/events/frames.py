"""An event's bytes on the wire, built once per event and worker and shared by every connection.

``event_frame`` is the server-sent-event frame a stream yields: a broadcast to 500 connections
encodes once, and each connection sends the same bytes.
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
