"""A telemetry stream reader for tests and the benchmark: one thread per connection.

It keeps only what the checks need (the serving worker's pid and each sample's arrival time),
so a hundred of them stay cheap next to the servers being measured.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass
class StreamReader:
    base: str
    cookie: str
    path: str = "/api/telemetry/stream/"
    marker: bytes = b"event: sample\n"  # one per delivered sample
    status: int | None = None
    worker: int | None = None
    arrivals: list[float] = field(default_factory=list)  # time.monotonic() per sample
    ended: threading.Event = field(default_factory=threading.Event)
    ended_at: float | None = None  # time.monotonic() when the stream closed
    _sock: socket.socket | None = None
    _thread: threading.Thread | None = None

    def start(self) -> StreamReader:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def count_between(self, start: float, end: float) -> int:
        return sum(1 for t in list(self.arrivals) if start <= t < end)

    def stop(self) -> None:
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        parts = urlsplit(self.base)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        try:
            conn.request("GET", self.path, headers={"Cookie": self.cookie,
                                                    "Accept": "text/event-stream"})
            response = conn.getresponse()
            self._sock = conn.sock
            self.status = response.status
            if response.status != 200:
                response.read()
                return
            tail = b""
            while True:
                chunk = response.read1(65536)
                if not chunk:
                    return
                now = time.monotonic()
                data = tail + chunk
                if self.worker is None and b": worker " in data:
                    line = data.split(b": worker ", 1)[1].split(b"\n", 1)[0]
                    self.worker = int(line.split()[0])
                # A marker split across two reads is found once, via the kept tail.
                self.arrivals.extend([now] * data.count(self.marker))
                tail = data[-(len(self.marker) - 1):]
        except (OSError, http.client.HTTPException, ValueError):
            return
        finally:
            conn.close()
            self.ended_at = time.monotonic()
            self.ended.set()


def spread_readers(base: str, cookie: str, *, per_worker: int = 1, workers: int = 2,
                   path: str = "/api/telemetry/stream/?rate=5", most: int = 200
                   ) -> list[StreamReader]:
    """Telemetry streams, ``per_worker`` on each of ``workers`` web workers (tests/spread.py)."""
    from tests.spread import spread_over_workers

    return spread_over_workers(
        lambda _: StreamReader(base, cookie, path=path).start(),
        served_by=lambda r: r.worker if r.arrivals else None, stop=StreamReader.stop,
        per_worker=per_worker, workers=workers, most=most, what="telemetry stream")
