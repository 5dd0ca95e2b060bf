"""Publishing: append to the replay log and PUBLISH in one Lua script, from any process.

The script runs atomically in Redis, so the stream id order in the log is the order every
subscriber receives; a reader can subscribe first, replay the log, and drop duplicates by id.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import redis
from django.conf import settings
from django.db import transaction

from celery_conf.connections import redis_client

from .types import Event, encode_body

log = logging.getLogger(__name__)

CHANNEL = "platform:events"
# Not events: "close this user's streams" (apps.events.sessions), never logged or replayed.
CONTROL_CHANNEL = "platform:events:control"
LOG_KEY = "platform:events:log"

# XADD then trim by count and by age (Redis's clock, so every producer agrees), then PUBLISH
# "<id>\n<body>". "~" trims whole radix-tree nodes: cheap, and the bounds become "at least".
_PUBLISH_LUA = """
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'e', ARGV[3])
local now = redis.call('TIME')
local oldest_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  - tonumber(ARGV[2]) * 1000
redis.call('XTRIM', KEYS[1], 'MINID', '~', string.format('%.0f', oldest_ms))
redis.call('PUBLISH', ARGV[4], id .. '\\n' .. ARGV[3])
return id
"""


def publish_with(
    client: redis.Redis, *, kind: str, user_id: int | None, data: dict[str, Any]
) -> Event:
    """Publish through a given client (tests and benchmarks point it at their own Redis)."""
    now = time.time()
    body = encode_body(kind=kind, user_id=user_id, time=now, data=data)
    script = client.register_script(_PUBLISH_LUA)  # EVALSHA, reloaded after a Redis restart
    event_id = script(
        keys=[LOG_KEY],
        args=[settings.EVENTS_LOG_MAXLEN, settings.EVENTS_LOG_MAX_AGE_S, body, CHANNEL],
    )
    return Event(id=str(event_id), kind=kind, user_id=user_id, time=now, data=data)


def publish_event(*, kind: str, user_id: int | None, data: dict[str, Any]) -> Event:
    """Send an event to ``user_id``'s open pages (``None``: to every logged-in user).

    ``kind`` is dotted lower case and names the producer ("document.state", "report.run");
    ``data`` is small JSON (4 KiB at most): ids and states, not content. Raises
    ``InvalidEvent`` for bad input and ``redis.RedisError`` when Redis refuses. Call it after
    the change it announces is committed (see ``publish_event_on_commit``).
    """
    return publish_with(redis_client(), kind=kind, user_id=user_id, data=data)


def publish_event_on_commit(*, kind: str, user_id: int | None, data: dict[str, Any]) -> None:
    """Publish once the current transaction commits (at once outside one); never raises.

    The change itself is already committed, so a Redis error must not fail the caller: it is
    logged. Redis being down also drops every web worker's subscription, and their clients
    resync when it is back, so the page still catches up with the committed state.
    """

    def send() -> None:
        try:
            publish_event(kind=kind, user_id=user_id, data=data)
        except (redis.RedisError, OSError) as exc:
            log.warning("event %s for user %s not published: %s", kind, user_id, exc)

    transaction.on_commit(send)


def log_position() -> str:
    """The newest id in the replay log ("0-0" when empty); pages start their stream there."""
    try:
        info = redis_client().xinfo_stream(LOG_KEY)
    except redis.ResponseError:
        return "0-0"  # no stream yet
    return str(info["last-generated-id"])


def log_recent(*, user_id: int, limit: int = 50, scan: int = 1000) -> list[Event]:
    """The newest events for ``user_id`` (theirs and broadcasts), newest first."""
    from .types import decode

    events: list[Event] = []
    for event_id, fields in redis_client().xrevrange(LOG_KEY, count=scan):
        event = decode(event_id, fields["e"])
        if event.user_id is None or event.user_id == user_id:
            events.append(event)
            if len(events) >= limit:
                break
    return events
