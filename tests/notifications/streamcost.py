"""Many idle streams from one process (plain sockets, no thread each), and what a web worker
holds for them: threads, file descriptors, database files open, resident memory.

Shared by tests/notifications/test_stream_cost.py (20 vs 200 streams) and
loadtests/stream_cost.py (1,000 and 10,000).
"""

from __future__ import annotations

import os
import selectors
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import psutil

READY = b"event: ready"


def open_streams(base: str, cookie: str, n: int, *, path: str = "/api/notifications/stream/",
                 batch: int = 200, timeout: float = 120,
                 pids: set[int] | None = None) -> list[socket.socket]:
    """``n`` streams, opened ``batch`` at a time; returns once every one said ``ready``.

    The pid of each serving worker (its first comment line) is added to ``pids``.
    """
    parts = urlsplit(base)
    request = (f"GET {path} HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\n"
               f"Cookie: {cookie}\r\nAccept: text/event-stream\r\n\r\n").encode()
    opened: list[socket.socket] = []
    deadline = time.monotonic() + timeout
    while len(opened) < n:
        group = []
        for _ in range(min(batch, n - len(opened))):
            sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
            sock.sendall(request)
            sock.setblocking(False)
            group.append(sock)
        _await_ready(group, deadline, pids if pids is not None else set())
        opened.extend(group)
    return opened


def _await_ready(group: list[socket.socket], deadline: float, pids: set[int]) -> None:
    selector = selectors.DefaultSelector()
    seen: dict[socket.socket, bytes] = {}
    for sock in group:
        selector.register(sock, selectors.EVENT_READ)
        seen[sock] = b""
    waiting = set(group)
    while waiting:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(waiting)} streams not ready")
        for key, _ in selector.select(timeout=1):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            chunk = sock.recv(65536)
            if not chunk:
                raise AssertionError(f"a stream closed before ready: {seen[sock][:300]!r}")
            seen[sock] += chunk
            if READY in seen[sock]:
                pids.add(int(seen[sock].split(b": worker ", 1)[1].split(b"\n", 1)[0]))
                selector.unregister(sock)
                waiting.discard(sock)
    selector.close()


def close_streams(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()


@dataclass(frozen=True)
class WorkerCost:
    threads: int
    fds: int
    db_files: int  # descriptors open on the SQLite database (and its -wal/-shm)
    rss_mb: float
    cpu_s: float

    @classmethod
    def of(cls, pid: int, db_path: Path) -> WorkerCost:
        db_names = {str(db_path), f"{db_path}-wal", f"{db_path}-shm"}
        fds, db_files = 0, 0
        for fd in os.listdir(f"/proc/{pid}/fd"):
            fds += 1
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in db_names:
                    db_files += 1
            except OSError:
                pass  # closed meanwhile
        proc = psutil.Process(pid)
        times = proc.cpu_times()
        return cls(threads=proc.num_threads(), fds=fds, db_files=db_files,
                   rss_mb=proc.memory_info().rss / 2**20, cpu_s=times.user + times.system)
