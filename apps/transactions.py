"""Transactions whose commit does not wait for the disk, for writes a crash may undo.

A commit that waits for the disk (SQLite ``synchronous=FULL``, PostgreSQL
``synchronous_commit=on``) costs a flush: 0.3-1 ms on the development machine, with SQLite's
one write lock held throughout. Some writes need not survive a power cut on their own, because
nothing outside the database is told they happened and everything that depends on them is
committed later through the same log: SQLite's WAL and PostgreSQL's WAL are each one file,
written in commit order, so the next flushed commit of any process makes every earlier commit
durable too, and a crash can only lose a tail of unflushed commits, never one in the middle.
``unsynced_commits`` skips that flush (SQLite's documented ``synchronous=NORMAL`` in WAL
mode, PostgreSQL's ``synchronous_commit = off``) for the commits made inside it, for exactly
those writes: each caller says why it may be lost (adr/0043). The body runs its statements in
autocommit or opens its own atomic block: on SQLite a lone statement in autocommit holds the
write lock only while it executes, an atomic block from BEGIN, Python included.
``flushed_after_the_lock`` is for the writes a promise rests on (a 202, a "done"): on SQLite
the same unflushed commit, then the WAL flushed by this process once the write lock is free,
before anyone is told; other writers no longer wait for this one's disk. Shared plumbing:
imports nothing of the apps.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import DatabaseError, transaction


@contextmanager
def unsynced_commits() -> Iterator[None]:
    """Commits inside skip the flush. Inside an atomic block it changes nothing: the outer
    transaction's commit decides (and SQLite cannot change the level within one)."""
    connection = transaction.get_connection()
    if connection.in_atomic_block or connection.vendor not in ("sqlite", "postgresql"):
        yield
        return
    # Per connection on both engines; set back before the connection serves anything else.
    sqlite = connection.vendor == "sqlite"
    _execute(connection, "PRAGMA synchronous=NORMAL" if sqlite
             else "SET synchronous_commit = off")
    try:
        yield
    finally:
        _execute(connection, f"PRAGMA synchronous={settings.SQLITE_SYNCHRONOUS}" if sqlite
                 else "RESET synchronous_commit")


@contextmanager
def flushed_after_the_lock(using: str | None = None) -> Iterator[Callable[[], None]]:
    """SQLite: commits inside are flushed after the write lock is released, not under it.

    Each commit inside is made at ``synchronous=NORMAL``: SQLite appends its frames to the WAL
    file and releases the write lock without waiting for the disk. The WAL is then flushed
    (``fdatasync``, as SQLite's own FULL commit flushes it) by the callable this yields, or at
    the block's end if it was not called: a WAL is one file written in commit order, so one
    flush makes this commit and every earlier one durable. The caller tells no one of the
    commit before that flush: inside an atomic block, register the callable first with
    ``transaction.on_commit``, so it runs before the block's other on-commit callbacks (the
    announcements). Another connection may read the row in the window between the commit and
    the flush (a fraction of a millisecond); nothing is answered, queued, announced or acked
    on it until the flush returns (adr/0043, fifth pass). That the frames are in the file when
    the commit returns is what lets other processes read them: they read the WAL file.

    Elsewhere it changes nothing and the callable does nothing: PostgreSQL, SQLite at NORMAL,
    inside an outer atomic block (whose commit decides), and a database not in WAL mode (an
    in-memory one, or a file system where SQLite could not turn WAL on: there a commit writes
    the database file itself, and FULL's own flushes stay).
    """
    connection = transaction.get_connection(using)
    wal = None
    if (not connection.in_atomic_block and connection.vendor == "sqlite"
            and settings.SQLITE_SYNCHRONOUS == "FULL"):
        wal = _wal_file(connection)
    if wal is None:
        yield _nothing
        return
    flushed = False

    def flush() -> None:
        nonlocal flushed
        _fdatasync(wal)
        flushed = True

    _execute(connection, "PRAGMA synchronous=NORMAL")
    try:
        yield flush
        if not flushed:
            flush()
    finally:
        _execute(connection, f"PRAGMA synchronous={settings.SQLITE_SYNCHRONOUS}")


def _nothing() -> None:
    return None


# One statement for both (SQLite's documented table-valued pragma functions, 3.16 or later):
# the journal mode, and the main database's file as SQLite opened it ("" in memory).
_WAL_SQL = ("SELECT (SELECT journal_mode FROM pragma_journal_mode), "
            "(SELECT file FROM pragma_database_list WHERE name = 'main')")


def _wal_file(connection) -> str | None:  # type: ignore[no-untyped-def]
    """The path of ``connection``'s WAL (SQLite names it the database's path with ``-wal``
    appended, https://www.sqlite.org/tempfiles.html), or None when the database is not in WAL
    mode. The WAL exists while any connection to the database is open, this one included."""
    with connection.cursor() as cursor:
        cursor.execute(_WAL_SQL)
        mode, path = cursor.fetchone()
    return f"{path}-wal" if str(mode).lower() == "wal" and path else None


def _fdatasync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


def _execute(connection, sql: str) -> None:  # type: ignore[no-untyped-def]
    try:
        with connection.cursor() as cursor:
            cursor.execute(sql)  # fixed statements, never input
    except DatabaseError:
        # A connection left unflushed must not serve the next transaction: drop it, and the
        # next one opens at the settings' level (SQLite's init_command; PostgreSQL's default).
        connection.close()
        raise
