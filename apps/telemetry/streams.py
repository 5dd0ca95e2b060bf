"""The telemetry chart's stream endpoint, with a per-worker cap on open streams.

Served by ``apps.stream_front`` (settings.STREAM_ENDPOINTS). Each stream samples on its own
clock and costs CPU for as long as it is open (adr/0019 measures it), so a worker serves at
most ``TELEMETRY_STREAMS_PER_WORKER`` at once; beyond that it answers 503 with Retry-After,
and the page waits that long and tries again (any worker may have room by then). One user
holds at most ``TELEMETRY_STREAMS_PER_USER`` of them (429), so no one user can take them all.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from django.conf import settings

from apps.events.sessions import session_hash
from apps.events.stream import session_watch
from apps.stream_front import StreamRefused, StreamRequest

from .inputs import StreamParamError, rate_from_query
from .stream import telemetry_stream

# The telemetry streams this worker serves now. One event loop per worker: no lock needed.
_open: dict[str, int] = {"streams": 0}
# The same, per user id: the per-user cap beside the per-worker one.
_open_per_user: dict[int, int] = {}


async def telemetry_stream_endpoint(request: StreamRequest) -> AsyncIterator[bytes]:
    try:
        rate = rate_from_query(request.query)
    except StreamParamError as exc:
        raise StreamRefused(400, str(exc)) from None
    if _open["streams"] >= settings.TELEMETRY_STREAMS_PER_WORKER:
        raise StreamRefused(
            503, "The live chart is at capacity on this server; retrying shortly.",
            headers={"Retry-After": str(settings.TELEMETRY_BUSY_RETRY_S)})
    user_id = request.user.id
    if _open_per_user.get(user_id, 0) >= settings.TELEMETRY_STREAMS_PER_USER:
        raise StreamRefused(
            429, "You have the live chart open in too many places at once; close one.",
            headers={"Retry-After": str(settings.TELEMETRY_BUSY_RETRY_S)})
    # Ends by the session's expiry too; the reconnect authenticates again.
    remaining = request.loop_ends_at - asyncio.get_running_loop().time()
    _open["streams"] += 1
    _open_per_user[user_id] = _open_per_user.get(user_id, 0) + 1
    return _Held(user_id, _watched(request, rate=rate, max_seconds=max(
        0.0, min(settings.TELEMETRY_STREAM_MAX_S, remaining))))


class _Held:
    """The stream with its place against both caps, given back once, when the stream front
    closes it (it closes every stream it was given, ended, failed or never started: an async
    generator closed before its first step runs no ``finally`` of its own)."""

    def __init__(self, user_id: int, stream: AsyncIterator[bytes]) -> None:
        self._user_id = user_id
        self._stream = stream
        self._held = True

    def __aiter__(self) -> _Held:
        return self

    async def __anext__(self) -> bytes:
        return await self._stream.__anext__()

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()  # type: ignore[attr-defined]
        finally:
            if self._held:
                self._held = False
                _open["streams"] -= 1
                left = _open_per_user.get(self._user_id, 1) - 1
                if left > 0:
                    _open_per_user[self._user_id] = left
                else:
                    _open_per_user.pop(self._user_id, None)


async def _watched(request: StreamRequest, *, rate: float, max_seconds: float
                   ) -> AsyncIterator[bytes]:
    """The stream, ending with its session (its place against the caps: ``_Held``).

    Samples never touch the bus or Redis (adr/0010); the stream only listens on the worker's
    existing subscription for its session's end (adr/0019, amendment), like an event stream.
    """
    async with session_watch(user_id=request.user.id,
                             session=session_hash(request.user.session_key),
                             since=request.loop_auth_started) as watch:
        if watch is None:  # the bus is unreachable: no end would be heard, so end sooner
            max_seconds = min(max_seconds, settings.TELEMETRY_UNWATCHED_MAX_S)
        stream = telemetry_stream(rate_hz=rate, max_seconds=max_seconds,
                                  retry_ms=settings.TELEMETRY_RETRY_MS, watch=watch)
        try:
            async for chunk in stream:
                yield chunk
        finally:
            await stream.aclose()  # type: ignore[attr-defined]


def telemetry_streams_open() -> int:
    return _open["streams"]
