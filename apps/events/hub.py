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
from typing import TYPE_CHECKING, Any, Literal

import redis.asyncio as aioredis
from django.conf import settings

from celery_conf.connections import RedisTarget, async_log_client, async_subscriber

from .bus import CHANNEL, CONTROL_CHANNEL
from .frames import event_chunk
from .types import Event, StreamId, decode

if TYPE_CHECKING:
    from apps.stream_wire import Wire

log = logging.getLogger(__name__)

WORKERS_KEY = "platform:events:workers"  # host:pid -> {"connections", "at"}: ops, tests
# Without traffic the subscription is PINGed this often; no answer by the next one: dropped.
PING_INTERVAL_S = 10.0
REPORT_INTERVAL_S = 0.5  # the connection count in WORKERS_KEY lags at most this much
RECONNECT_BACKOFF_S = (0.2, 5.0)
# How long a session end is remembered for streams still authenticating: longer than an
# authentication can wait in the pool during a reconnect storm (10,000 streams, 2 threads).
ENDED_MEMORY_S = 60.0
# Messages taken from the subscription in one pass before fanning out: when events arrive
# faster than the worker fans them out, each connection gets them in one write, not one each.
BATCH_MAX = 64

CloseReason = Literal["lost", "behind", "ended"]


class BusUnavailable(Exception):
    """The hub has no live subscription within the wait: Redis is down or unreachable."""


class Subscriber:
    """One client connection: a bounded backlog the hub fills and the connection drains.

    The connection's task waits in ``wait()`` for one of three things: the hub delivering an
    event, the subscriber being closed, or its deadline (``wake_at``: the next heartbeat or
    the stream's end). The deadline is one timer per subscriber, re-armed only when it fires
    early: an event costs the hub an append and, for an idle connection, one future's result,
    and costs the connection one wake-up and one ASGI send; no timer is made or cancelled per
    event (adr/0035).

    With a ``wire`` (apps/stream_wire.py), while the connection is ``idle`` the hub writes the
    event's bytes straight to its socket instead: no wake-up, no send. ``position`` is then
    the newest event id the client has been sent; the hub advances it and skips anything not
    newer (the replay may already have sent an event the subscription delivers later).

    A subscriber with ``events=False`` hears only session ends: it is what a stream that is
    not on the bus (telemetry, adr/0010) attaches to end with its session.
    """

    __slots__ = ("user_id", "session", "since", "maxsize", "pending", "closed", "wake_at",
                 "events", "wire", "position", "_waiter", "_timer")

    def __init__(self, *, user_id: int, session: str = "", maxsize: int,
                 since: float = float("inf"), events: bool = True,
                 wire: Wire | None = None) -> None:
        self.user_id = user_id
        self.session = session  # a hash naming the login (apps.events.sessions)
        # When its authentication started (event-loop clock): a session ended after that may
        # not have been seen by the authentication's read.
        self.since = since
        # When the connection's current wait times out (event-loop clock); 0: no deadline.
        self.wake_at = 0.0
        self.maxsize = maxsize
        self.pending: deque[Event] = deque()  # delivered, not yet sent
        self.closed: CloseReason | None = None
        self.events = events
        self.wire = wire
        self.position: StreamId = (0, 0)
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    @property
    def waiting(self) -> bool:
        """The connection is blocked in ``wait()``."""
        return self._waiter is not None

    @property
    def idle(self) -> bool:
        """Blocked in ``wait()`` and not yet woken, with nothing delivered: everything it
        yielded has been sent, so bytes written to its wire now come next, in order."""
        waiter = self._waiter
        return (waiter is not None and not waiter.done() and not self.pending
                and self.closed is None)

    def deliver(self, event: Event) -> bool:
        """Hand ``event`` to the connection; False when its backlog is full (too far behind)."""
        if len(self.pending) >= self.maxsize:
            return False
        self.pending.append(event)
        self._wake()
        return True

    def close(self, reason: CloseReason) -> None:
        if self.closed is None:
            self.closed = reason
        self._wake()

    async def wait(self) -> None:
        """Until an event is delivered, the subscriber is closed or ``wake_at`` has passed."""
        if self.pending or self.closed is not None:
            return
        loop = asyncio.get_running_loop()
        if self.wake_at and (self._timer is None or self._timer.when() > self.wake_at):
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(self.wake_at, self._deadline)
        self._waiter = waiter = loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    def stop_timer(self) -> None:
        """The connection is done: drop its deadline timer (call when detaching)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _deadline(self) -> None:
        self._timer = None
        if not self.wake_at:
            return
        loop = asyncio.get_running_loop()
        if loop.time() < self.wake_at:  # moved later since the timer was armed
            self._timer = loop.call_at(self.wake_at, self._deadline)
            return
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class Hub:
    def __init__(self, target: RedisTarget) -> None:
        self.target = target
        self.generation = 0  # one per successful subscription
        # The newest event this subscription delivered: everything up to it is in the backlogs.
        self.position: StreamId | None = None
        self._by_user: dict[int, set[Subscriber]] = {}
        self._all: set[Subscriber] = set()
        # Streams that hear session ends only (events=False), by user.
        self._watchers: dict[int, set[Subscriber]] = {}
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._reported_at = 0.0
        self._changed = True
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
        if not self._ready.is_set():
            # Not wait_for: on Python 3.11 it can swallow the caller's cancellation (the
            # client left) when the subscription becomes ready in the same loop pass, and the
            # stream would then run on for a client that is gone.
            try:
                async with asyncio.timeout(timeout):
                    await self._ready.wait()
            except TimeoutError as exc:
                raise BusUnavailable("no live subscription to the event bus") from exc
        if sub.events:
            self._all.add(sub)
            self._by_user.setdefault(sub.user_id, set()).add(sub)
            self._changed = True
        else:
            self._watchers.setdefault(sub.user_id, set()).add(sub)
        for at, user_id, session in self._ended:
            if at >= sub.since and user_id == sub.user_id and session in (None, sub.session):
                sub.close("ended")  # its authentication may have read the state before the end
        return self.generation

    def detach(self, sub: Subscriber) -> None:
        sub.stop_timer()
        watchers = self._watchers.get(sub.user_id)
        if watchers is not None and sub in watchers:
            watchers.discard(sub)
            if not watchers:
                del self._watchers[sub.user_id]
        if sub in self._all:
            self._all.discard(sub)
            peers = self._by_user.get(sub.user_id)
            if peers is not None:
                peers.discard(sub)
                if not peers:
                    del self._by_user[sub.user_id]
            self._changed = True

    def _dispatch(self, events: list[Event]) -> None:
        """Hand ``events`` (in log order) to every connection they are for.

        An idle connection with a wire gets them written to its socket at once, in one write;
        any other (busy sending, with a backlog, or its socket backed up) gets them delivered
        to its backlog, so the order on its wire stays the log's order.
        """
        if all(e.user_id is None for e in events):
            targets, mixed = self._all, False
        elif len(events) == 1:
            targets, mixed = self._by_user.get(events[0].user_id, set()), False
        else:
            targets, mixed = self._all, True  # several addressees: filter per connection
        whole: bytes | None = None  # the batch's bytes, shared by connections that need all
        first = events[0].sid
        for sub in list(targets):
            mine = events
            if mixed:
                mine = [e for e in events if e.user_id is None or e.user_id == sub.user_id]
                if not mine:
                    continue
            wire = sub.wire
            if wire is not None and sub.idle and wire.writable():
                if sub.position >= mine[-1].sid:
                    continue  # the replay sent these already
                if mine is events and sub.position < first:
                    if whole is None:
                        whole = b"".join([event_chunk(e) for e in events])
                    data = whole
                else:
                    data = b"".join([event_chunk(e) for e in mine if e.sid > sub.position])
                try:
                    wire.write(data)
                except (OSError, RuntimeError):
                    # This one socket failed under us: end its stream (the client resyncs),
                    # never the subscription every other stream depends on.
                    self.detach(sub)
                    sub.close("lost")
                    continue
                sub.position = mine[-1].sid
                continue
            for event in mine:
                if not sub.deliver(event):
                    # Too far behind: cut it off instead of buffering without bound. The
                    # client reconnects with Last-Event-ID and catches up from the log.
                    self.detach(sub)
                    sub.close("behind")
                    break
        self.position = events[-1].sid

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
        streams = [*self._by_user.get(user_id, ()), *self._watchers.get(user_id, ())]
        for sub in streams:
            if session is None or sub.session == session:
                self.detach(sub)
                sub.close("ended")

    def _lose_all(self) -> None:
        self._ready.clear()
        self.position = None
        watchers = [sub for subs in self._watchers.values() for sub in subs]
        for sub in [*self._all, *watchers]:
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
        # Under Sentinel the connection goes to whichever server is primary now.
        async with async_subscriber(self.target) as client:
            await self._follow(client)

    async def _follow(self, client: aioredis.Redis) -> None:
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
                    # Whatever else has already arrived goes out in the same pass.
                    batch: list[Event] = []
                    for _ in range(BATCH_MAX):
                        self._take(message, batch)
                        message = await pubsub.get_message(timeout=0)
                        if message is None:
                            break
                    if message is not None:
                        self._take(message, batch)
                    if batch:
                        self._dispatch(batch)
                elif now - heard_at > PING_INTERVAL_S:
                    if pinged:
                        raise ConnectionError("no answer to PING on the subscription")
                    await pubsub.ping()
                    pinged, heard_at = True, now
                await self._report(client)
        finally:
            await pubsub.aclose()

    def _take(self, message: dict[str, Any], batch: list[Event]) -> None:
        """Add an event message to ``batch``; act on a control message, in order."""
        if message["type"] != "message":
            return
        if message["channel"] == CONTROL_CHANNEL:
            if batch:  # the events published before it go out first
                self._dispatch(batch)
                batch.clear()
            self._end_sessions(message["data"])
            return
        event = self._receive(message["data"])
        if event is not None:
            batch.append(event)

    def _receive(self, raw: str) -> Event | None:
        event_id, _, body = raw.partition("\n")
        try:
            return decode(event_id, body)
        except (ValueError, KeyError, TypeError):
            log.error("dropping a malformed event on %s: %.200r", CHANNEL, raw)
            return None

    async def _report(self, client: aioredis.Redis) -> None:
        now = time.monotonic()
        due = PING_INTERVAL_S if not self._changed else REPORT_INTERVAL_S
        if now - self._reported_at < due:
            return
        self._reported_at, self._changed = now, False
        # "direct": streams whose socket this hub may write to (adr/0035); ops and tests.
        direct = sum(1 for sub in self._all if sub.wire is not None)
        state = {"connections": len(self._all), "direct": direct,
                 "generation": self.generation, "at": time.time()}
        # Keyed by host and pid: a pid alone repeats across hosts (adr/0026).
        await client.hset(WORKERS_KEY, f"{settings.PLATFORM_HOST_NAME}:{os.getpid()}",
                          json.dumps(state))


_hub: Hub | None = None
_hub_loop: asyncio.AbstractEventLoop | None = None
_log_client: aioredis.Redis | None = None


def get_hub() -> Hub:
    """This process's hub, created in (and bound to) the running event loop."""
    global _hub, _hub_loop, _log_client
    loop = asyncio.get_running_loop()
    if _hub is None or _hub_loop is not loop:
        _hub, _hub_loop = Hub(settings.REDIS), loop
        # A bounded pool: a thousand streams reconnecting at once share a few connections
        # (each replay read is one short script) instead of opening one socket each.
        _log_client = async_log_client(settings.REDIS)
    return _hub


def log_client() -> aioredis.Redis:
    """A pooled async client for reading the replay log, bound to the hub's loop."""
    get_hub()
    assert _log_client is not None
    return _log_client
