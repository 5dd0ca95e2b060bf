"""A fault-injecting TCP proxy for tests: one beat's link to Redis, broken on command.

Threads, no dependencies. Faults apply to every connection through the proxy (the whole link):

- ``cut()``: close every connection (bytes in flight are lost) and refuse new ones
  (the listening socket is closed: connection refused) until ``heal()``.
- ``blackhole()``: connections stay open, nothing moves either way; bytes sent meanwhile are
  held and delivered in order at ``heal()``, as TCP retransmission would deliver them once a
  partition ends (a client that gave up and closed still has its bytes delivered, then EOF).
  New connections are accepted and held too.
- ``blackhole_on(pattern)``: pass traffic until a client-to-server chunk contains ``pattern``
  (RESP bytes, e.g. a task name inside the fence's script), then blackhole from that chunk on.
- ``latency(seconds, loss=p)``: each chunk is delivered this long after it was read, each
  way; with ``loss``, that fraction of chunks is held ``rto`` longer, as a segment lost once
  and retransmitted (TCP's minimum RTO is 200 ms), the chunks behind it waiting for it.
- ``flap(down, up)``: cut and heal in turn until ``heal()``.
"""

from __future__ import annotations

import random
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field

CHUNK = 65536


@dataclass
class _Pipe:
    """One direction of one connection: reader thread -> held chunks -> writer thread."""

    src: socket.socket
    dst: socket.socket
    upstream: bool  # client -> server
    chunks: deque[tuple[float, bytes | None]] = field(default_factory=deque)
    ready: threading.Condition = field(default_factory=threading.Condition)


class FaultProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1", *,
                 listen_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.listen_host = listen_host
        self.port = 0
        self._lock = threading.RLock()
        self._conns: list[tuple[socket.socket, socket.socket, list[_Pipe]]] = []
        self._listener: socket.socket | None = None
        self._held = False  # blackhole in force
        self._delay = 0.0
        self._loss = 0.0
        self._rto = 0.2
        self._random = random.Random(0)
        self.retransmitted = 0  # chunks held for a "retransmission"
        self._pattern: bytes | None = None
        self._flapping: threading.Event | None = None
        self.triggered_at: float | None = None  # when blackhole_on matched (time.time())
        # Client-to-server bytes that were held by a blackhole and delivered at a heal: the
        # late writes the fence must refuse.
        self.late_bytes = 0
        self.faults: list[tuple[float, str]] = []  # (time.time(), what) for the test's record
        self._closed = False
        self._listen()

    # --- control -------------------------------------------------------------------------
    def cut(self) -> None:
        with self._lock:
            self._record("cut")
            self._stop_listening()
            for client, server, _ in self._conns:
                for sock in (client, server):
                    _close(sock)
            self._conns.clear()

    def blackhole(self) -> None:
        with self._lock:
            self._record("blackhole")
            self._held = True

    def blackhole_on(self, pattern: bytes) -> None:
        with self._lock:
            self._pattern = pattern
            self.triggered_at = None

    def latency(self, seconds: float, *, loss: float = 0.0, rto: float = 0.2,
                seed: int = 0) -> None:
        with self._lock:
            self._record(f"latency {seconds}" + (f" loss {loss}" if loss else ""))
            self._delay = seconds
            self._loss, self._rto = loss, rto
            self._random.seed(seed)

    def flap(self, *, down: float, up: float) -> None:
        stop = threading.Event()
        self._flapping = stop

        def run() -> None:
            while not stop.is_set():
                self.cut()
                if stop.wait(down):
                    break
                self._restore()
                stop.wait(up)

        threading.Thread(target=run, daemon=True, name="proxy-flap").start()

    def heal(self) -> None:
        if self._flapping is not None:
            self._flapping.set()
            self._flapping = None
        self._restore()

    def _restore(self) -> None:
        with self._lock:
            self._record("heal")
            was_held, self._held = self._held, False
            self._delay = 0.0
            self._loss = 0.0
            self._pattern = None
            if self._listener is None and not self._closed:
                self._listen()
            for _, _, pipes in self._conns:
                for pipe in pipes:
                    with pipe.ready:
                        if was_held and pipe.upstream:
                            self.late_bytes += sum(len(c or b"") for _, c in pipe.chunks)
                        pipe.ready.notify_all()

    def close(self) -> None:
        self._closed = True
        if self._flapping is not None:
            self._flapping.set()
        self.cut()

    # --- plumbing ------------------------------------------------------------------------
    def _record(self, what: str) -> None:
        self.faults.append((time.time(), what))

    def _listen(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.listen_host, self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True,
                         name="proxy-accept").start()

    def _stop_listening(self) -> None:
        if self._listener is not None:
            _close(self._listener)
            self._listener = None

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed by cut()
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                _close(client)
                continue
            server.settimeout(None)
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pipes = [_Pipe(client, server, True), _Pipe(server, client, False)]
            with self._lock:
                if self._listener is not listener:
                    _close(client)
                    _close(server)
                    return
                self._conns.append((client, server, pipes))
            for pipe in pipes:
                threading.Thread(target=self._read, args=(pipe,), daemon=True).start()
                threading.Thread(target=self._write, args=(pipe,), daemon=True).start()

    def _read(self, pipe: _Pipe) -> None:
        tail = b""
        while True:
            try:
                data = pipe.src.recv(CHUNK)
            except OSError:
                data = b""
            with self._lock:
                if data and pipe.upstream and self._pattern is not None and (
                        self._pattern in tail + data):
                    # Held from this chunk on: the matching command never leaves, for now.
                    self._pattern = None
                    self.triggered_at = time.time()
                    self._record("blackhole (pattern)")
                    self._held = True
                due = time.monotonic() + self._delay
                if data and self._loss and self._random.random() < self._loss:
                    due += self._rto
                    self.retransmitted += 1
            tail = (tail + data)[-256:]
            with pipe.ready:
                pipe.chunks.append((due, data or None))
                pipe.ready.notify_all()
            if not data:
                return

    def _write(self, pipe: _Pipe) -> None:
        while True:
            with pipe.ready:
                while not pipe.chunks or self._held:
                    pipe.ready.wait(0.05)
                due, data = pipe.chunks[0]
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(min(wait, 0.05))
                continue
            with pipe.ready:
                if self._held:
                    continue
                pipe.chunks.popleft()
            try:
                if data is None:
                    pipe.dst.shutdown(socket.SHUT_WR)
                    return
                pipe.dst.sendall(data)
            except OSError:
                return


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
