"""Reads for notifications: what a page shows before its stream starts."""

from __future__ import annotations

from typing import Any

import redis

from apps.events.bus import log_position, log_recent


def notifications_initial(*, user_id: int, limit: int = 50) -> dict[str, Any]:
    """Recent events for the user (newest first) and the cursor the page's stream starts at.

    The cursor is read before the events, so nothing falls between the list and the stream.
    With Redis down the page still renders, empty, and its stream resyncs once Redis is back.
    """
    try:
        cursor = log_position()
        events = [e.public() for e in log_recent(user_id=user_id, limit=limit)]
    except (redis.RedisError, OSError):
        return {"cursor": "", "events": [], "available": False}
    return {"cursor": cursor, "events": events, "available": True}
