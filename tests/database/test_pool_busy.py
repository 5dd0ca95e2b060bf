"""A web process whose pooled database connections are all busy answers 503 with Retry-After
and writes nothing; the request holding the connection still completes (PostgreSQL)."""

from __future__ import annotations

import threading

import pytest

from tests.procs import wait_until

pytestmark = pytest.mark.processes


def test_a_request_finding_the_pool_exhausted_gets_503_and_changes_nothing(make_stack):
    stack = make_stack(postgres=True, env={"DATABASE_WEB_POOL_SIZE": "1",
                                           "DATABASE_POOL_TIMEOUT_S": "1"})
    web = stack.start_web(workers=1)
    first, second = web.session(), web.session()
    with stack.postgres.server.db(stack.db_name) as locker:
        # Hold the documents table: the first submission blocks inside the database on the
        # web process's only pooled connection.
        locker.execute("LOCK TABLE documents_document IN ACCESS EXCLUSIVE MODE")
        answers: list[int] = []
        blocked = threading.Thread(target=lambda: answers.append(
            first.post("/api/documents/", json={"title": "a", "text": "First."}).status_code))
        blocked.start()
        wait_until(lambda: locker.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'platform-web' "
            "AND wait_event_type = 'Lock'").fetchone()[0] == 1, timeout=30,
            what="the first submission waits on the lock")
        busy = second.post("/api/documents/", json={"title": "b", "text": "Second."})
        assert busy.status_code == 503, busy.text
        assert busy.headers["Retry-After"] == "1" and "busy" in busy.json()["error"]
        locker.rollback()
    blocked.join(timeout=30)
    assert answers == [202]
    assert stack.query("SELECT title FROM documents_document") == [("a",)]


def test_a_request_whose_database_connection_dies_gets_503_and_changes_nothing(make_stack):
    """The backend serving a submission is terminated mid-statement (as when PostgreSQL
    restarts or its host goes): 503 with Retry-After, not 500, and the next request is served
    on a new connection."""
    stack = make_stack(postgres=True, env={"DATABASE_WEB_POOL_SIZE": "1"})
    web = stack.start_web(workers=1)
    client = web.session()
    with stack.postgres.server.db(stack.db_name) as locker:
        locker.execute("LOCK TABLE documents_document IN ACCESS EXCLUSIVE MODE")
        answers: list = []
        blocked = threading.Thread(target=lambda: answers.append(
            client.post("/api/documents/", json={"title": "a", "text": "First."})))
        blocked.start()
        waiting = ("SELECT pid FROM pg_stat_activity WHERE application_name = 'platform-web' "
                   "AND wait_event_type = 'Lock'")
        wait_until(lambda: locker.execute(waiting).fetchall(), timeout=30,
                   what="the submission waits on the lock")
        (pid,) = locker.execute(waiting).fetchone()
        locker.execute("SELECT pg_terminate_backend(?)", (pid,))
        blocked.join(timeout=30)
        locker.rollback()
    (lost,) = answers
    assert lost.status_code == 503, lost.text
    assert lost.headers["Retry-After"] == "1" and "database" in lost.json()["error"]
    assert stack.query("SELECT count(*) FROM documents_document") == [(0,)]
    assert client.post("/api/documents/", json={"title": "b", "text": "Second."}).status_code == 202
