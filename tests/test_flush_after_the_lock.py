"""SQLite commits flushed after the write lock is released, on a database file of the test's own.

The test database is in memory, with no WAL to flush; here a file configured as the box's
(config/settings/base.py: WAL, FULL, IMMEDIATE). Each flush is watched by a spy that calls
the real ``os.fdatasync``; from inside it, a second connection shows the commit already made
and SQLite's write lock already free (its ``BEGIN IMMEDIATE`` with no busy timeout succeeds).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connections, transaction

from apps.transactions import flushed_after_the_lock

FILE_DB = "flush_test"


def sqlite_level(conn) -> int:  # type: ignore[no-untyped-def]
    with conn.cursor() as cursor:
        cursor.execute("PRAGMA synchronous")
        return int(cursor.fetchone()[0])  # 1 NORMAL, 2 FULL


@pytest.fixture
def journal_mode() -> str:
    return "WAL"  # as the box sets it; a test overrides it by parametrizing


@pytest.fixture
def file_db(tmp_path: Path, django_db_blocker, journal_mode) -> Iterator[tuple[object, Path]]:  # type: ignore[no-untyped-def]
    """A Django connection to a SQLite file configured as the box's (config/settings/base.py)."""
    path = tmp_path / "db.sqlite3"
    init = f"PRAGMA journal_mode={journal_mode}; PRAGMA synchronous=FULL;"
    connections.settings[FILE_DB] = connections.configure_settings({
        "default": connections.settings["default"],
        FILE_DB: {"ENGINE": "django.db.backends.sqlite3", "NAME": str(path),
                  "OPTIONS": {"init_command": init, "transaction_mode": "IMMEDIATE",
                              "timeout": 20}}})[FILE_DB]
    with django_db_blocker.unblock():
        conn = connections[FILE_DB]
        with conn.cursor() as cursor:
            cursor.execute("CREATE TABLE t (v INTEGER)")
        try:
            yield conn, path
        finally:
            conn.close()
            del connections[FILE_DB]
            del connections.settings[FILE_DB]


@pytest.fixture
def flushes(file_db, monkeypatch) -> list[tuple[str, ...]]:  # type: ignore[no-untyped-def]
    """What each fdatasync of this process flushed, and what another connection saw then."""
    _, path = file_db
    seen: list[tuple[str, ...]] = []
    real = os.fdatasync

    def spy(fd: int) -> None:
        other = sqlite3.connect(path, timeout=0, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # raises "database is locked" if it is held
            other.execute("ROLLBACK")
            rows = other.execute("SELECT count(*) FROM t").fetchone()[0]
        finally:
            other.close()
        seen.append(("flush", os.readlink(f"/proc/self/fd/{fd}"), f"{rows} rows"))
        real(fd)

    monkeypatch.setattr(os, "fdatasync", spy)
    return seen


def test_an_atomic_commit_is_flushed_outside_the_lock_before_its_other_callbacks(
        file_db, flushes):
    conn, path = file_db
    with flushed_after_the_lock(FILE_DB) as flush, transaction.atomic(using=FILE_DB):
        transaction.on_commit(flush, using=FILE_DB)
        transaction.on_commit(lambda: flushes.append(("announced",)), using=FILE_DB)
        with conn.cursor() as cursor:
            cursor.execute("INSERT INTO t VALUES (1)")
        assert sqlite_level(conn) == 1  # NORMAL: the commit does not wait for the disk
    # Once, after the commit (the row visible, the lock free), before the announcement.
    assert flushes == [("flush", f"{path}-wal", "1 rows"), ("announced",)]
    assert sqlite_level(conn) == 2


def test_a_write_in_autocommit_is_flushed_at_the_end_of_the_block(file_db, flushes):
    conn, path = file_db
    with flushed_after_the_lock(FILE_DB):
        with conn.cursor() as cursor:
            cursor.execute("INSERT INTO t VALUES (1)")
        assert flushes == []
    assert flushes == [("flush", f"{path}-wal", "1 rows")]
    assert sqlite_level(conn) == 2


def test_a_block_that_raises_flushes_nothing_and_the_level_comes_back(file_db, flushes):
    conn, _ = file_db
    with pytest.raises(RuntimeError), flushed_after_the_lock(FILE_DB) as flush, \
            transaction.atomic(using=FILE_DB):
        transaction.on_commit(flush, using=FILE_DB)
        with conn.cursor() as cursor:
            cursor.execute("INSERT INTO t VALUES (1)")
        raise RuntimeError("the write failed")
    assert flushes == []
    assert sqlite_level(conn) == 2


def test_inside_an_outer_atomic_block_the_outer_commit_decides(file_db, flushes):
    conn, _ = file_db
    with transaction.atomic(using=FILE_DB):
        with flushed_after_the_lock(FILE_DB) as flush:
            flush()
            assert sqlite_level(conn) == 2
    assert flushes == []


@pytest.mark.parametrize("journal_mode", ["DELETE"])
def test_a_database_not_in_wal_mode_keeps_full_and_its_commits_flush_themselves(
        file_db, flushes):
    """Where SQLite could not turn WAL on, a commit writes the database file itself: the block
    leaves FULL's own flushes in place and flushes nothing of its own."""
    conn, path = file_db
    with flushed_after_the_lock(FILE_DB) as flush, transaction.atomic(using=FILE_DB):
        transaction.on_commit(flush, using=FILE_DB)
        with conn.cursor() as cursor:
            cursor.execute("INSERT INTO t VALUES (1)")
        assert sqlite_level(conn) == 2
    assert flushes == []
    assert not Path(f"{path}-wal").exists()
