"""One Redis subscription per web worker process, fanned out to that process's connections.

The hub starts lazily, on the first client, as a task in the worker's event loop. When its
subscription drops (Redis restarted, the connection cut, Redis dropping a slow subscriber) it
closes every attached subscriber with reason "lost", so each client resyncs, then reconnects.
Redis-py's own transparent reconnect is switched off: it would resubscribe silently and hide
the events published while it was away.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections import deque
from typing import Literal

import redis.asyncio as aioredis
from django.conf import settings
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from .bus import CHANNEL, CONTROL_CHANNEL
from .types import Event, StreamId, decode

log = logging.getLogger(__name__)

WORKERS_KEY = "platform:events:workers"  # pid -> {"connections", "at"}: ops status and tests
# Without traffic the subscription is PINGed this often; no answer by the next one: dropped.
PING_INTERVAL_S = 10.0
REPORT_INTERVAL_S = 0.5  # the connection count in WORKERS_KEY lags at most this much
RECONNECT_BACKOFF_S = (0.2, 5.0)
LOG_CONNECTIONS = 4  # Redis connections per web worker for replay reads
# How long a session end is remembered for streams still authenticating: longer than an
# authentication can wait in the pool during a reconnect storm (10,000 streams, 2 threads).
ENDED_MEMORY_S = 60.0

CloseReason = Literal["lost", "behind", "ended"]


class BusUnavailable(Exception):
    """The hub has no live subscription within the wait: Redis is down or unreachable."""


class Subscriber:
    """One client connection: a bounded queue the hub fills and the connection drains."""

    __slots__ = ("user_id", "session", "since", "queue", "closed", "wake_at")

    def __init__(self, *, user_id: int, session: str = "", maxsize: int,
                 since: float = float("inf")) -> None:
        self.user_id = user_id
        self.session = session  # a hash naming the login (apps.events.sessions)
        # When its authentication started (event-loop clock): a session ended after that may
        # not have been seen by the authentication's read.
        self.since = since
        self.wake_at = 0.0  # when the stream's current wait times out (event-loop clock)
        # None in the queue only wakes the reader up to look at ``closed``.
        self.queue: asyncio.Queue[Event | None] = asyncio.Queue(maxsize=maxsize)
        self.closed: CloseReason | None = None

    def close(self, reason: CloseReason) -> None:
        if self.closed is None:
            self.closed = reason
        try:
            self.queue.put_nowait(None)
        except asyncio.QueueFull:
            pass  # the reader is behind; it checks ``closed`` before its next get


class Hub:
    def __init__(self, url: str) -> None:
        self.url = url
        self.generation = 0  # one per successful subscription
        # The newest event this subscription delivered: everything up to it is in the queues.
        self.position: StreamId | None = None
        self._by_user: dict[int, set[Subscriber]] = {}
        self._all: set[Subscriber] = set()
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._reported_at = 0.0
        self._dirty = True
        # Recent session ends (loop time, user, session or None for all), for a stream that
        # authenticated just before one and attaches just after it.
        self._ended: deque[tuple[float, int, str | None]] = deque()

    @property
    def connections(self) -> int:
        return len(self._all)

    async def attach(self, sub: Subscriber, *, timeout: float) -> int:
        """Start receiving for ``sub``; returns the subscription generation it joined."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="events-hub")
        try:
            await asyncio.wait_for(self._ready.wait(), timeout)
        except TimeoutError as exc:
            raise BusUnavailable("no live subscription to the event bus") from exc
        self._all.add(sub)
        self._by_user.setdefault(sub.user_id, set()).add(sub)
        self._dirty = True
        for at, user_id, session in self._ended:
            if at >= sub.since and user_id == sub.user_id and session in (None, sub.session):
                sub.close("ended")  # its authentication may have read the state before the end
        return self.generation

    def detach(self, sub: Subscriber) -> None:
        if sub in self._all:
            self._all.discard(sub)
            peers = self._by_user.get(sub.user_id)
            if peers is not None:
                peers.discard(sub)
                if not peers:
                    del self._by_user[sub.user_id]
            self._dirty = True

    def _dispatch(self, event: Event) -> None:
        targets = self._all if event.user_id is None else self._by_user.get(event.user_id, ())
        for sub in list(targets):
            try:
                sub.queue.put_nowait(event)
            except asyncio.QueueFull:
                # Too far behind: cut it off instead of buffering without bound. The client
                # reconnects with Last-Event-ID and catches up from the log.
                self.detach(sub)
                sub.close("behind")
        self.position = event.sid

    def _end_sessions(self, raw: str) -> None:
        """Close the streams of a user whose login ended or whose credentials changed."""
        try:
            message = json.loads(raw)
            user_id, session = int(message["user"]), message.get("session")
        except (ValueError, KeyError, TypeError):
            log.error("dropping a malformed control message: %.200r", raw)
            return
        now = asyncio.get_running_loop().time()
        self._ended.append((now, user_id, session))
        while self._ended and self._ended[0][0] < now - ENDED_MEMORY_S:
            self._ended.popleft()
        for sub in list(self._by_user.get(user_id, ())):
            if session is None or sub.session == session:
                self.detach(sub)
                sub.close("ended")

    def _lose_all(self) -> None:
        self._ready.clear()
        self.position = None
        for sub in list(self._all):
            self.detach(sub)
            sub.close("lost")

    async def _run(self) -> None:
        backoff = RECONNECT_BACKOFF_S[0]
        while True:
            started = time.monotonic()
            try:
                await self._listen()
            except asyncio.CancelledError:
                self._lose_all()
                raise
            except Exception as exc:  # any failure means events may have been missed
                log.warning("event bus subscription lost (%s: %s); clients will resync",
                            type(exc).__name__, exc)
            self._lose_all()
            if time.monotonic() - started > 30:
                backoff = RECONNECT_BACKOFF_S[0]
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, RECONNECT_BACKOFF_S[1])

    async def _listen(self) -> None:
        client = aioredis.Redis.from_url(
            self.url, decode_responses=True, retry=Retry(NoBackoff(), 0),
            socket_connect_timeout=5, socket_keepalive=True,
        )
        pubsub = client.pubsub()
        try:
            # Events and session control share this one connection: a missed control
            # message is impossible without a lost subscription, which closes every stream.
            await pubsub.subscribe(CHANNEL, CONTROL_CHANNEL)
            for _ in range(2):
                confirm = await pubsub.get_message(timeout=5)
                if not confirm or confirm["type"] != "subscribe":
                    raise ConnectionError(f"no subscribe confirmation: {confirm!r}")
            self.generation += 1
            self._ready.set()
            log.info("event bus subscribed (pid %s, generation %s)", os.getpid(), self.generation)
            pinged, heard_at = False, time.monotonic()
            while True:
                message = await pubsub.get_message(timeout=REPORT_INTERVAL_S)
                now = time.monotonic()
                if message is not None:
                    pinged, heard_at = False, now
                    if message["type"] == "message":
                        if message["channel"] == CONTROL_CHANNEL:
                            self._end_sessions(message["data"])
                        else:
                            self._receive(message["data"])
                elif now - heard_at > PING_INTERVAL_S:
                    if pinged:
                        raise ConnectionError("no answer to PING on the subscription")
                    await pubsub.ping()
                    pinged, heard_at = True, now
                await self._report(client)
        finally:
            await pubsub.aclose()
            await client.aclose()

    def _receive(self, raw: str) -> None:
        event_id, _, body = raw.partition("\n")
        try:
            event = decode(event_id, body)
        except (ValueError, KeyError, TypeError):
            log.error("dropping a malformed event on %s: %.200r", CHANNEL, raw)
            return
        self._dispatch(event)

    async def _report(self, client: aioredis.Redis) -> None:
        now = time.monotonic()
        due = PING_INTERVAL_S if not self._dirty else REPORT_INTERVAL_S
        if now - self._reported_at < due:
            return
        self._reported_at, self._dirty = now, False
        state = {"connections": len(self._all), "generation": self.generation, "at": time.time()}
        await client.hset(WORKERS_KEY, str(os.getpid()), json.dumps(state))


_hub: Hub | None = None
_hub_loop: asyncio.AbstractEventLoop | None = None
_log_client: aioredis.Redis | None = None


def get_hub() -> Hub:
    """This process's hub, created in (and bound to) the running event loop."""
    global _hub, _hub_loop, _log_client
    loop = asyncio.get_running_loop()
    if _hub is None or _hub_loop is not loop:
        _hub, _hub_loop = Hub(settings.REDIS_URL), loop
        # A bounded pool: a thousand streams reconnecting at once share a few connections
        # (each replay read is one short script) instead of opening one socket each.
        pool = aioredis.BlockingConnectionPool.from_url(
            settings.REDIS_URL, decode_responses=True, socket_connect_timeout=5,
            socket_timeout=10, max_connections=LOG_CONNECTIONS, timeout=10)
        _log_client = aioredis.Redis(connection_pool=pool)
    return _hub


def log_client() -> aioredis.Redis:
    """A pooled async client for reading the replay log, bound to the hub's loop."""
    get_hub()
    assert _log_client is not None
    return _log_client
