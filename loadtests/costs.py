"""What one component of a running Stack spent between two snapshots: CPU, Redis, database.

Used by loadtests/ceiling.py and loadtests/baseline.py. CPU comes from /proc (psutil) for a
process and every live descendant (uvicorn's workers, Celery's pool children); Redis from
``INFO cpu`` / ``INFO commandstats`` / ``INFO memory``; SQLite's single writer from a probe
that samples whether the write lock is free; PostgreSQL from its backends' /proc entries,
``pg_stat_database`` and ``pg_current_wal_lsn()``.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import psutil


def tree_cpu(pids: list[int], *, exclude: frozenset[int] = frozenset()) -> float:
    """CPU seconds (user + system) of these processes and all their descendants.

    Live descendants are read directly; exited ones through their parent's "children" times
    (the kernel adds a child's CPU to its parent's when the parent reaps it), so PostgreSQL's
    backends, which exit with each connection here (``CONN_MAX_AGE`` 0), still count.
    ``exclude`` leaves out live processes (the benchmark's own database connection).
    """
    total, seen = 0.0, set()
    for pid in pids:
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for proc in procs:
            if proc.pid in seen or proc.pid in exclude:
                continue
            seen.add(proc.pid)
            try:
                times = proc.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += times.user + times.system + times.children_user + times.children_system
    return total


def redis_counters(client: Any) -> dict[str, float]:
    """Redis's CPU seconds, commands served and memory in use, now."""
    cpu = client.info("cpu")
    stats = client.info("commandstats")
    memory = client.info("memory")
    return {
        "cpu_s": float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]),
        # The snapshot's own INFO calls are counted too: 3 per snapshot, subtracted below.
        "commands": float(sum(v["calls"] for v in stats.values())),
        "memory_bytes": float(memory["used_memory"]),
    }


REDIS_SNAPSHOT_COMMANDS = 3


def redis_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {
        "cpu_s": after["cpu_s"] - before["cpu_s"],
        "commands": after["commands"] - before["commands"] - REDIS_SNAPSHOT_COMMANDS,
        "memory_bytes": after["memory_bytes"] - before["memory_bytes"],
    }


class WriterProbe(threading.Thread):
    """Samples how often SQLite's write lock is held: ``BEGIN IMMEDIATE`` with no wait.

    In WAL mode with ``transaction_mode=IMMEDIATE`` every Django transaction holds the one
    write lock from BEGIN to the end of its commit (fsync included): the fraction of samples
    that find it taken is the fraction of time the single writer is busy. A free sample holds
    the lock for microseconds and releases it at once (ROLLBACK); it samples every
    ``INTERVAL_S``, so a writer meets it rarely.
    """

    INTERVAL_S = 0.002

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.conn = sqlite3.connect(path, timeout=0, isolation_level=None,
                                    check_same_thread=False)
        self.samples = 0
        self.busy = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            self.samples += 1
            try:
                self.conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError:  # "database is locked": a writer holds it
                self.busy += 1
            else:
                self.conn.execute("ROLLBACK")
            time.sleep(self.INTERVAL_S)

    def counters(self) -> dict[str, float]:
        return {"samples": float(self.samples), "busy": float(self.busy)}

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=5)
        self.conn.close()


def writer_delta(before: dict[str, float], after: dict[str, float],
                 seconds: float) -> dict[str, float]:
    samples = after["samples"] - before["samples"]
    busy = (after["busy"] - before["busy"]) / samples if samples else float("nan")
    return {"writer_busy_fraction": busy, "writer_busy_s": busy * seconds}


POSTGRES_SNAPSHOT_STATEMENTS = 3  # the statements postgres_counters runs, each a transaction


def postgres_counters(conn: Any, dbname: str) -> dict[str, float]:
    """Transactions committed in and sessions opened on ``dbname``, and the WAL position."""
    with conn.cursor() as cur:
        cur.execute("SELECT pg_stat_clear_snapshot()")  # read fresh counters, not a cached set
        cur.execute("SELECT xact_commit, sessions FROM pg_stat_database WHERE datname = %s",
                    (dbname,))
        commits, sessions = cur.fetchone()
        cur.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
        wal = cur.fetchone()[0]
    return {"commits": float(commits), "sessions": float(sessions), "wal_bytes": float(wal)}
