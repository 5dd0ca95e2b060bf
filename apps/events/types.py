"""The event as it travels: a Redis stream id, a kind, an addressee, a time and a small payload."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

# Kinds are namespaced by their producer ("document.state", "report.run", "broadcast").
KIND_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$")
# Events are notifications, not payload carriers: a page that needs more fetches it.
MAX_EVENT_BYTES = 4096


class InvalidEvent(ValueError):
    """The event cannot be published as given (bad kind, not JSON, too large)."""


StreamId = tuple[int, int]


# ASCII digits only (str.isdigit() accepts "²", which int() refuses), each part within the
# unsigned 64-bit range Redis uses, so any client-sent cursor parses or is refused, never raises.
_ID_RE = re.compile(r"([0-9]{1,20})-([0-9]{1,20})", re.ASCII)
_ID_MAX = 2**64 - 1


def parse_id(raw: str) -> StreamId | None:
    """A Redis stream id "<ms>-<seq>" as a comparable tuple; None if it is not one."""
    match = _ID_RE.fullmatch(raw.strip())
    if match is None:
        return None
    ms, seq = int(match[1]), int(match[2])
    if ms > _ID_MAX or seq > _ID_MAX:
        return None
    return ms, seq


def format_id(sid: StreamId) -> str:
    return f"{sid[0]}-{sid[1]}"


@dataclass(frozen=True)
class Event:
    id: str  # the replay log's stream id: orders events and is the SSE id
    kind: str
    user_id: int | None  # None: a broadcast, for every logged-in user
    time: float  # seconds since the epoch, taken by the producer
    data: dict[str, Any]
    sid: StreamId = field(init=False, repr=False, compare=False)
    # Consumers may cache one encoding per event here (an SSE frame is built once, not once
    # per connection).
    memo: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        sid = parse_id(self.id)
        if sid is None:
            raise InvalidEvent(f"not a stream id: {self.id!r}")
        object.__setattr__(self, "sid", sid)

    def public(self) -> dict[str, Any]:
        """What a browser sees: the addressee is implied by who is logged in."""
        return {"id": self.id, "kind": self.kind, "time": self.time, "data": self.data}


def encode_body(*, kind: str, user_id: int | None, time: float, data: dict[str, Any]) -> str:
    """The JSON stored in the log and published; the id is added by Redis (XADD)."""
    if not KIND_RE.match(kind) or len(kind) > 64:
        raise InvalidEvent(f"bad event kind {kind!r}: dotted lower-case words")
    if user_id is not None and (not isinstance(user_id, int) or user_id <= 0):
        raise InvalidEvent(f"user_id must be a positive int or None, got {user_id!r}")
    try:
        body = json.dumps({"k": kind, "u": user_id, "t": time, "d": data},
                          separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidEvent(f"event data is not JSON: {exc}") from exc
    if len(body.encode()) > MAX_EVENT_BYTES:
        raise InvalidEvent(f"event larger than {MAX_EVENT_BYTES} bytes; send an id, not a payload")
    return body


def decode(event_id: str, body: str) -> Event:
    raw = json.loads(body)
    return Event(id=event_id, kind=raw["k"], user_id=raw["u"], time=raw["t"], data=raw["d"])
