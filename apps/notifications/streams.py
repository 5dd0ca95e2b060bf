"""The notifications page's stream endpoint: the logged-in user's events from the bus.

Served by ``apps.stream_front`` (settings.STREAM_ENDPOINTS): the request is authenticated
already, and the stream holds no thread or database connection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from apps.events.sessions import session_hash
from apps.events.stream import event_stream
from apps.stream_front import StreamRequest

# A cursor longer than this is not an id; it still gets an answer (resync), not an error.
CURSOR_MAX_CHARS = 64


async def notifications_stream(request: StreamRequest) -> AsyncIterator[bytes]:
    """There is no parameter naming a user: the stream is the session's user's."""
    # EventSource sends Last-Event-ID on its own reconnects; a page's first connection (and
    # the script's reconnect after a refused one) passes its cursor as ?after=.
    cursor = request.headers.get("last-event-id") or request.query.get("after") or None
    if cursor is not None:
        cursor = cursor[:CURSOR_MAX_CHARS + 1]  # anything longer parses as "not an id"
    return event_stream(user_id=request.user.id, session=session_hash(request.user.session_key),
                        cursor=cursor, ends_at=request.loop_ends_at,
                        since=request.loop_auth_started, wire=request.wire)
