"""Counting a platform's PostgreSQL connections per process type, idle and under load.

Shared by tests/database/test_connections.py (the bound) and loadtests/db_connections.py (the
numbers). Connections are told apart by ``application_name`` (``platform-web``, ``-worker``,
``-beat``, ``-flower``, ``-manage``: config/settings/base.py), read from pg_stat_activity.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import requests

from tests.notifications.streamcost import close_streams, open_streams
from tests.procs import ROOT, Client, Proc, Stack, free_port, spawn, wait_until

KINDS = ("web", "worker", "beat", "flower", "manage")


def connections_now(stack: Stack) -> Counter[str]:
    """Connections to the Stack's database by process type (``platform-`` dropped)."""
    with stack.postgres.server.connect(autocommit=True) as conn:
        rows = conn.execute(
            "SELECT application_name, count(*) FROM pg_stat_activity WHERE datname = %s "
            "AND application_name <> 'tests' GROUP BY 1", (stack.db_name,)).fetchall()
    return Counter({name.removeprefix("platform-"): n for name, n in rows})


@dataclass
class Sampler:
    """Polls pg_stat_activity on a thread; keeps the peak of each process type's count."""

    stack: Stack
    interval: float = 0.02
    peak: Counter[str] = field(default_factory=Counter)
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Sampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            now = connections_now(self.stack)
            for kind, n in now.items():
                self.peak[kind] = max(self.peak[kind], n)
            self.samples += 1
            self._stop.wait(self.interval)


def start_flower(stack: Stack) -> Proc:
    port = free_port()
    proc = spawn("flower", [sys.executable, str(ROOT / "manage.py"), "flower",
                            "--address", "127.0.0.1", "--port", str(port)],
                 env=stack.env, log_dir=stack.log_dir)
    stack.procs.append(proc)
    wait_until(lambda: requests.get(f"http://127.0.0.1:{port}/healthcheck", timeout=2).ok,
               timeout=60, what="flower answers")
    return proc


@dataclass
class LoadResult:
    idle_before: dict[str, int]
    peak: dict[str, int]
    idle_after: dict[str, int]
    samples: int
    accepted: int
    latency_ms_p50: float
    latency_ms_p99: float
    streams: int
    seconds: float


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values) or [float("nan")]
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))]


def submit_burst(clients: list[Client], documents: int) -> list[float]:
    """``documents`` submissions, one client per thread; the latency (ms) of each 202."""
    def one(n: int) -> float | None:
        started = time.perf_counter()
        response = clients[n % len(clients)].post(
            "/api/documents/", json={"title": f"burst {n}", "text": f"Burst document {n}."})
        ms = (time.perf_counter() - started) * 1000
        return ms if response.status_code == 202 else None

    with ThreadPoolExecutor(max_workers=len(clients)) as pool:
        return [ms for ms in pool.map(one, range(documents)) if ms is not None]


def measure_load(stack: Stack, *, web_workers: int, clients: int, documents: int,
                 streams: int) -> LoadResult:
    """Idle counts, then the peak during ``documents`` submissions from ``clients`` concurrent
    clients with ``streams`` event streams open, until every document is done; then idle."""
    web = stack.start_web(workers=web_workers)
    sessions = [web.session() for _ in range(clients)]
    [idle_before] = wait_until(lambda: _settled(stack), timeout=30, what="connections settle")
    cookie = "sessionid=" + sessions[0].http.cookies["sessionid"]
    socks = open_streams(web.base, cookie, streams)
    started = time.monotonic()
    try:
        with Sampler(stack) as sampler:
            latencies = submit_burst(sessions, documents)
            accepted = len(latencies)
            wait_until(lambda: stack.query(
                "SELECT count(*) FROM documents_document WHERE state IN ('done', 'failed')"
            )[0][0] == accepted, timeout=180, what="every document finished")
        seconds = time.monotonic() - started
    finally:
        close_streams(socks)
    [idle_after] = wait_until(lambda: _settled(stack), timeout=30, what="connections settle")
    return LoadResult(idle_before=dict(idle_before), peak=dict(sampler.peak),
                      idle_after=dict(idle_after), samples=sampler.samples,
                      accepted=accepted, latency_ms_p50=round(percentile(latencies, 50), 1),
                      latency_ms_p99=round(percentile(latencies, 99), 1), streams=streams,
                      seconds=round(seconds, 1))


def _settled(stack: Stack) -> list[Counter[str]]:
    """The counts, once two readings half a second apart agree (in a list: zero is news)."""
    first = connections_now(stack)
    time.sleep(0.5)
    return [first] if connections_now(stack) == first else []
