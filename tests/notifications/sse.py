"""A server-sent-events client for tests: one thread per stream, reconnecting like a browser.

It records every event with the worker pid that served it, follows the spec for ``id``
(an id-only block moves the cursor without an event), and reconnects with Last-Event-ID when
the server closes the stream or the worker dies, until told to stop.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

STREAM_PATH = "/api/notifications/stream/"


@dataclass
class Received:
    id: str
    kind: str
    data: dict[str, Any]
    worker: int  # the pid of the web worker that sent it
    at: float  # time.time() on receipt


@dataclass
class SSEClient:
    base: str
    cookie: str
    name: str = ""
    reconnect: bool = True
    cursor: str = ""  # the Last-Event-ID it sends
    events: list[Received] = field(default_factory=list)
    workers: list[int] = field(default_factory=list)  # one per connection, in order
    heartbeats: int = 0
    small_buffer: bool = False  # a tiny receive buffer, so a paused client backs up fast
    paused: threading.Event = field(default_factory=threading.Event)
    statuses: list[int] = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _conn: http.client.HTTPConnection | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    def start(self) -> SSEClient:
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"sse-{self.name}")
        self._thread.start()
        return self

    @property
    def worker(self) -> int | None:
        return self.workers[-1] if self.workers else None

    def of_kind(self, kind: str) -> list[Received]:
        with self._lock:
            return [e for e in self.events if e.kind == kind]

    def drop(self) -> None:
        """Cut the current connection (as a network blip would); it reconnects if asked to."""
        conn = self._conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def stop(self) -> None:
        self._stop.set()
        self.drop()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        first = True
        while not self._stop.is_set() and (first or self.reconnect):
            first = False
            try:
                self._connect_once()
            except (OSError, http.client.HTTPException, ValueError):
                pass
            self.ready.clear()
            self._stop.wait(0.2)  # the browser's retry delay, shortened

    def _open(self) -> http.client.HTTPConnection:
        """A connection to the server (a subclass may connect otherwise, e.g. over TLS)."""
        parts = urlsplit(self.base)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        if self.small_buffer:
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.settimeout(60)
            sock.connect((parts.hostname, parts.port))
            conn.sock = sock
        return conn

    def _ended(self) -> None:
        """Called when a stream ends, however it ended."""

    def _connect_once(self) -> None:
        conn = self._open()
        self._conn = conn
        headers = {"Cookie": self.cookie, "Accept": "text/event-stream"}
        if self.cursor:
            headers["Last-Event-ID"] = self.cursor
        try:
            conn.request("GET", STREAM_PATH, headers=headers)
            response = conn.getresponse()
            self.statuses.append(response.status)
            if response.status != 200:
                response.read()
                return
            self._read(response)
        finally:
            conn.close()
            self._conn = None
            self._ended()

    def _read(self, response: http.client.HTTPResponse) -> None:
        worker = 0
        block: dict[str, str] = {}
        data: list[str] = []
        while True:
            while self.paused.is_set() and not self._stop.is_set():
                time.sleep(0.05)  # a client that stopped reading: its buffers fill up
            raw = response.readline()
            if not raw:
                return  # the server closed the stream
            line = raw.decode().rstrip("\n")
            if line == "":
                if "id" in block:
                    self.cursor = block["id"]
                if data:
                    self._dispatch(block.get("event", "message"), "\n".join(data), worker)
                block, data = {}, []
                continue
            if line.startswith(":"):
                comment = line[1:].strip()
                if comment.startswith("worker "):
                    worker = int(comment.split()[1])
                    self.workers.append(worker)
                elif comment == "heartbeat":
                    self.heartbeats += 1
                continue
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "data":
                data.append(value)
            else:
                block[key] = value

    def _dispatch(self, kind: str, payload: str, worker: int) -> None:
        body = json.loads(payload)
        if kind == "ready":
            self.ready.set()
        with self._lock:
            self.events.append(Received(id=self.cursor, kind=kind, data=body.get("data", body),
                                        worker=worker, at=time.time()))
