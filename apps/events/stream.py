"""The stream protocol, behind one call: attach, replay from the cursor, de-duplicate, heartbeat.

``event_stream`` is all a page needs to serve the bus to one browser. Order matters for
"exactly once": the connection attaches to its worker's hub first (so every later event reaches
its backlog), then reads the log after the client's cursor, then drains the backlog, dropping what
the replay already sent (ids are the log's stream ids, in order). It does no sync work at all:
the caller authenticates before, and no thread or database connection is held while it waits.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import redis
from django.conf import settings

from apps.sse import frame

from .frames import event_frame
from .hub import BusUnavailable, Hub, Subscriber, get_hub, log_client
from .replay import LogGap, log_after, log_tail
from .types import StreamId, format_id, parse_id

if TYPE_CHECKING:
    from apps.stream_wire import Wire


def resync_frame(reason: str, *, id: str | None = None) -> bytes:
    return frame(event="resync", id=id, data=json.dumps({"reason": reason}))


async def event_stream(*, user_id: int, session: str, cursor: str | None,
                       ends_at: float, since: float, wire: Wire | None = None
                       ) -> AsyncIterator[bytes]:
    """The stream for ``user_id``; ``cursor`` is the last event id the client holds.

    ``session`` names the login the stream belongs to (a hash, never the key itself): ending
    that session, or any change to the user's credentials, closes the stream
    (``apps.events.sessions``). It also ends at ``ends_at`` (the event loop's clock): the
    session's expiry, or the longest life a stream gets before it must authenticate again.
    Any cursor gets a defined answer: the events after it, or ``resync`` when it is not an
    id, or is older than the log (or newer than it: a reset log). With a ``wire`` (the
    connection's socket, apps/stream_wire.py) the hub writes live events straight to it while
    the stream is idle; every frame this generator yields still goes through the caller.
    """
    hub = get_hub()
    sub = Subscriber(user_id=user_id, session=session, maxsize=settings.EVENTS_CLIENT_QUEUE,
                     since=since, wire=wire)
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
            # More was missed than the log keeps, the cursor is not an id, or the log was
            # reset: the page reloads its state and continues from the log's end.
            position = parse_id(gap.tail)
            yield resync_frame("missed events beyond the replay log", id=gap.tail)
        except redis.RedisError as exc:
            yield resync_frame(f"replay log unavailable: {type(exc).__name__}")
            return
        assert position is not None
        yield frame(event="ready", id=format_id(position),
                    data=json.dumps({"worker": os.getpid()}))
        async for chunk in live(sub, hub=hub, generation=generation, position=position,
                                heartbeat_s=settings.EVENTS_HEARTBEAT_S, ends_at=ends_at):
            yield chunk
    finally:
        hub.detach(sub)  # the client went away (cancelled) or the stream ended: stop queueing


async def live(sub: Subscriber, *, hub: Hub, generation: int, position: StreamId,
               heartbeat_s: float, ends_at: float) -> AsyncIterator[bytes]:
    """Drain ``sub``'s backlog after the replay; a heartbeat when idle; end at ``ends_at``."""
    loop = asyncio.get_running_loop()
    announced = position
    pending = sub.pending
    sub.wake_at = min(loop.time() + heartbeat_s, ends_at)
    while True:
        if sub.closed == "lost":
            yield resync_frame("live subscription lost")
            return
        if sub.closed == "behind":
            yield frame(comment="too far behind: reconnect with Last-Event-ID")
            return
        now = loop.time()
        if sub.closed == "ended" or now >= ends_at:
            # The browser reconnects at once and authenticates again: a live session goes on
            # from its Last-Event-ID, an ended one is refused (401).
            yield frame(comment="session check: reconnect to continue")
            return
        if not pending:
            if now < sub.wake_at:
                # Everything yielded so far has been sent (this generator resumes only after
                # the caller's send): until the wait ends the hub may write events newer than
                # ``position`` straight to the wire, advancing sub.position.
                sub.position = position
                await sub.wait()
                if sub.position > position:
                    position = announced = sub.position
                continue  # look again: an event, a close or the deadline
            # Idle for heartbeat_s. The heartbeat may move the client's cursor to the hub's
            # position only if nothing is waiting in this connection's backlog: an event can
            # land in it in the same loop pass as the deadline (the deadline wins, the event
            # stays queued), and the hub's position already counts it. Moving the cursor then
            # would skip it.
            sub.wake_at = min(now + heartbeat_s, ends_at)
            if now >= ends_at:
                continue
            if (not pending and hub.generation == generation and hub.position
                    and hub.position > position):
                position = hub.position
            if position > announced:
                announced = position
                yield frame(comment="heartbeat", id=format_id(position))
            else:
                yield frame(comment="heartbeat")
            continue
        # Everything already delivered goes out in one send: when the machine is busy and a
        # connection wakes late, one send carries the backlog instead of one wake-up and one
        # socket write per event (the fan-out's tail, adr/0018).
        chunks = []
        while pending:
            event = pending.popleft()
            if event.sid > position:  # else the replay already sent it
                chunks.append(event_frame(event))
                position = event.sid
        if not chunks:
            continue
        announced = position
        sub.wake_at = min(now + heartbeat_s, ends_at)
        yield chunks[0] if len(chunks) == 1 else b"".join(chunks)


@asynccontextmanager
async def session_watch(*, user_id: int, session: str, since: float
                        ) -> AsyncIterator[Subscriber | None]:
    """Hear the end of ``session`` (or of the user's credentials) for a stream not on the bus.

    The watch rides on the worker's one existing subscription (the hub's control channel):
    nothing is published and no event is delivered to it. It yields a ``Subscriber`` whose
    ``closed`` is set, and whose ``wait()`` returns, when the session ends or the subscription is
    lost (an end may have gone unheard: the stream should end and authenticate again). It
    yields None when the bus is unavailable within ``EVENTS_ATTACH_TIMEOUT_S``; the caller
    then bounds the stream's life by other means.
    """
    hub = get_hub()
    sub = Subscriber(user_id=user_id, session=session, maxsize=1, since=since, events=False)
    try:
        try:
            await hub.attach(sub, timeout=settings.EVENTS_ATTACH_TIMEOUT_S)
        except BusUnavailable:
            yield None
            return
        yield sub
    finally:
        hub.detach(sub)
