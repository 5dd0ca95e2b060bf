"""One browser's server-sent-event stream: subscribe, replay what it missed, then live.

Order matters for "exactly once": the connection attaches to its worker's hub first (so every
later event reaches its queue), then reads the log after the client's cursor, then drains the
queue, dropping what the replay already sent (ids are the log's stream ids, in order).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import AsyncIterator

import redis
from django.conf import settings

from apps.events.hub import BusUnavailable, Subscriber, get_hub, log_client
from apps.events.replay import LogGap, log_after, log_tail
from apps.events.types import Event, StreamId, format_id, parse_id
from apps.sse import frame

log = logging.getLogger(__name__)


def event_frame(event: Event) -> bytes:
    cached = event.memo.get("sse")
    if cached is None:  # built once per event and process, shared by every connection
        cached = event.memo["sse"] = frame(
            id=event.id, event=event.kind, data=json.dumps(event.public(), separators=(",", ":")))
    return cached


def resync_frame(reason: str, *, id: str | None = None) -> bytes:
    return frame(event="resync", id=id, data=json.dumps({"reason": reason}))


async def event_stream(*, user_id: int, cursor: str | None) -> AsyncIterator[bytes]:
    """The stream for ``user_id``; ``cursor`` is the last event id the client holds."""
    hub = get_hub()
    sub = Subscriber(user_id=user_id, maxsize=settings.EVENTS_CLIENT_QUEUE)
    try:
        yield frame(comment=f"worker {os.getpid()}", retry=settings.EVENTS_RETRY_MS)
        try:
            generation = await hub.attach(sub, timeout=settings.EVENTS_ATTACH_TIMEOUT_S)
        except BusUnavailable:
            yield resync_frame("event bus unavailable")
            return
        position: StreamId | None = None
        try:
            if cursor is None:
                # A page that rendered no cursor starts from now: nothing to replay.
                position = parse_id(await log_tail(log_client()))
            else:
                async for page in log_after(log_client(), cursor=cursor):
                    for event in page.events:
                        if event.user_id is None or event.user_id == user_id:
                            yield event_frame(event)
                    position = parse_id(page.read_to)
        except LogGap as gap:
            # More was missed than the log keeps (or the log was reset): the page reloads
            # its state and continues from the log's end.
            position = parse_id(gap.tail)
            yield resync_frame("missed events beyond the replay log", id=gap.tail)
        except redis.RedisError as exc:
            yield resync_frame(f"replay log unavailable: {type(exc).__name__}")
            return
        assert position is not None
        sent = format_id(position)
        yield frame(event="ready", id=sent, data=json.dumps({"worker": os.getpid()}))
        async for chunk in _live(sub, hub_generation=generation, position=position):
            yield chunk
    except asyncio.CancelledError:
        hub.detach(sub)  # the client went away: stop queueing for it at once
        raise
    finally:
        hub.detach(sub)


async def _live(sub: Subscriber, *, hub_generation: int, position: StreamId
                ) -> AsyncIterator[bytes]:
    hub = get_hub()
    announced = position
    while True:
        if sub.closed == "lost":
            yield resync_frame("live subscription lost")
            return
        if sub.closed == "behind":
            yield frame(comment="too far behind: reconnect with Last-Event-ID")
            return
        try:
            async with asyncio.timeout(settings.EVENTS_HEARTBEAT_S):
                event = await sub.queue.get()
        except TimeoutError:
            # Idle: everything this worker received up to hub.position is already sent, so
            # the heartbeat may move the client's cursor there (an id-only frame fires no
            # event) and a reconnect after a quiet hour replays nothing instead of a gap.
            if hub.generation == hub_generation and hub.position and hub.position > position:
                position = hub.position
            if position > announced:
                announced = position
                yield frame(comment="heartbeat", id=format_id(position))
            else:
                yield frame(comment="heartbeat")
            continue
        if event is None or event.sid <= position:
            continue  # a wake-up, or an event the replay already sent
        position = event.sid
        announced = position
        yield event_frame(event)
