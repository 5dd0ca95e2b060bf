"""The per-connection telemetry stream: sample on a fixed clock, send each sample as SSE.

It runs as an async generator in the web worker that accepted the connection; samples touch
no shared service, so any number of web workers serve it unchanged (adr/0010). It may be
given a session watch (``apps.events.stream.session_watch``): then it also ends, within a
sample period, when its session ends.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from apps.sse import frame

from .sampling import Sampler

if TYPE_CHECKING:
    from apps.events.hub import Subscriber

log = logging.getLogger(__name__)


async def telemetry_stream(*, rate_hz: float, max_seconds: float, retry_ms: int,
                           watch: Subscriber | None = None) -> AsyncIterator[bytes]:
    """Samples at ``rate_hz`` until the client leaves, ``max_seconds`` have passed or
    ``watch`` is closed (its session ended, or its bus subscription was lost).

    The clock is absolute (next tick = previous tick + period), so a slow send does not drift
    the rate; a worker that falls more than a period behind skips the missed ticks instead of
    bursting them, because a chart wants the current value, not a backlog.
    """
    period = 1.0 / rate_hz
    sampler = Sampler()
    started = time.monotonic()
    sent = 0
    try:
        # The pid comment tells a test (and a curious operator) which worker serves it.
        yield frame(comment=f"worker {os.getpid()}", retry=retry_ms)
        yield frame(event="hello", data=json.dumps({"worker": os.getpid(), "rate_hz": rate_hz}))
        next_tick = time.monotonic()
        while next_tick - started < max_seconds:
            delay = next_tick - time.monotonic()
            if delay > 0:
                if watch is None:
                    await asyncio.sleep(delay)
                else:  # the wait between samples is also a wait for the session's end
                    try:
                        async with asyncio.timeout(delay):
                            await watch.wait()
                    except TimeoutError:
                        pass
            elif -delay > period:
                next_tick = time.monotonic()  # behind: drop the missed ticks
            if watch is not None and watch.closed is not None:
                # The browser reconnects and authenticates again: an ended session gets 401.
                yield frame(comment="session check: reconnect to continue")
                return
            sample = sampler.sample()
            yield frame(event="sample", data=json.dumps(sample.as_dict(), separators=(",", ":")))
            sent += 1
            next_tick += period
        # Ending on purpose bounds a connection's life; EventSource reconnects after `retry`,
        # possibly to another worker, which is fine for a stream that has no shared state.
        yield frame(event="bye", data=json.dumps({"sent": sent}))
    except asyncio.CancelledError:
        # Django cancels the generator when the client disconnects: nothing to release but
        # the log line (the test watches for it), and the cancellation must propagate.
        log.info("telemetry stream closed by the client after %d samples", sent)
        raise
