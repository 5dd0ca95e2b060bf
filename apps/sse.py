"""Server-sent-event framing, shared by every stream (notifications, telemetry).

It sits beside the apps rather than in one of them so that a stream can use it without
importing another system: telemetry must not depend on the event bus (adr/0010).
"""

from __future__ import annotations


def frame(*, event: str | None = None, data: str | None = None, id: str | None = None,
          comment: str | None = None, retry: int | None = None) -> bytes:
    lines = []
    if comment is not None:
        lines.append(f": {comment}")
    if retry is not None:
        lines.append(f"retry: {retry}")
    if id is not None:
        lines.append(f"id: {id}")
    if event is not None:
        lines.append(f"event: {event}")
    if data is not None:
        lines.extend(f"data: {line}" for line in data.split("\n"))
    return ("\n".join(lines) + "\n\n").encode()

