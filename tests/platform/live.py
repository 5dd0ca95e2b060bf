"""A live page across an upgrade: a server-sent-events client over the box's TLS, and a
producer publishing numbered events through the event bus's own code.

The client is tests/notifications' (reconnects with Last-Event-ID, records each event with the
web worker that sent it); this subclass only connects over TLS and notes when each stream
ended, so the test can measure how long the page was without a stream.
"""

from __future__ import annotations

import http.client
import ssl
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import redis

from apps.events.bus import publish_with
from tests.notifications.sse import SSEClient


@dataclass
class TLSSSEClient(SSEClient):
    cafile: str = ""
    ended_at: list[float] = field(default_factory=list)  # time.time() when a stream ended

    def _open(self) -> http.client.HTTPConnection:
        parts = urlsplit(self.base)
        context = ssl.create_default_context(cafile=self.cafile)
        return http.client.HTTPSConnection(parts.hostname, parts.port, timeout=60,
                                           context=context)

    def _ended(self) -> None:
        self.ended_at.append(time.time())

    def numbers(self) -> list[int]:
        return [int(e.data["message"].split()[-1]) for e in self.of_kind("broadcast")]


class NumberedPublisher:
    """Broadcasts "n 0", "n 1", ... at ``rate`` per second until stopped; notes each time."""

    def __init__(self, redis_url: str, *, rate: float) -> None:
        self.client = redis.Redis.from_url(redis_url, decode_responses=True)
        self.rate = rate
        self.published: list[float] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.done.is_set():
            publish_with(self.client, kind="broadcast", user_id=None,
                         data={"message": f"n {len(self.published)}", "sender": "upgrade"})
            self.published.append(time.time())
            self.done.wait(1 / self.rate)  # pacing of the producer, not synchronisation

    def stop(self) -> int:
        self.done.set()
        self.thread.join()
        return len(self.published)
