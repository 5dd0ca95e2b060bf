"""An open stream holds no thread and no database connection in its web worker: threads and
database files open stay constant from 20 to 200 streams (before: one thread and one database
connection per stream, 200 streams gave 206 threads). The files open are the connections the
threads that served requests keep (ADR 45's amendment: the login's request threads and the
streams' authentication threads), not the streams'. Real uvicorn, Redis, SQLite."""

from __future__ import annotations

import pytest

from tests.notifications.conftest import cookie_of
from tests.notifications.streamcost import WorkerCost, close_streams, open_streams

pytestmark = pytest.mark.processes
AUTH_THREADS = 2  # settings.STREAMS_AUTH_THREADS: the pool may start its second thread late
LOGIN_REQUESTS = 2  # web.session(): the login page, then the login itself
# A kept SQLite connection holds the database file and its WAL open; the -shm file is open once
# per process, whatever the connections.
FILES_PER_CONNECTION = 2


def test_threads_and_database_connections_stay_constant_as_streams_grow(make_stack, measure):
    stack = make_stack(env={"STREAMS_AUTH_THREADS": str(AUTH_THREADS)})
    web = stack.start_web(workers=1)
    cookie = cookie_of(web.session())
    pids: set[int] = set()
    socks = open_streams(web.base, cookie, 20, batch=20, pids=pids)
    try:
        assert len(pids) == 1
        pid = next(iter(pids))
        at_20 = WorkerCost.of(pid, stack.db_path)
        socks += open_streams(web.base, cookie, 180, batch=60, pids=pids)
        at_200 = WorkerCost.of(pid, stack.db_path)
    finally:
        close_streams(socks)
    assert pids == {pid}
    assert at_200.db_files == at_20.db_files, (at_20, at_200)
    kept_at_most = AUTH_THREADS + LOGIN_REQUESTS
    assert at_200.db_files <= FILES_PER_CONNECTION * kept_at_most + 1, (at_20, at_200)
    assert at_200.threads <= at_20.threads + AUTH_THREADS - 1, (at_20, at_200)
    # A stream costs its socket and no other descriptor (the log pool is bounded).
    assert at_200.fds - at_20.fds <= 180 + 4, (at_20, at_200)
    measure(threads_20=at_20.threads, threads_200=at_200.threads, db_files_200=at_200.db_files,
            fds_per_stream=(at_200.fds - at_20.fds) / 180,
            kib_per_stream=(at_200.rss_mb - at_20.rss_mb) * 1024 / 180)
