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
write lock only while it executes, an atomic block from BEGIN, Python included. Shared
plumbing: imports nothing of the apps.
"""

from __future__ import annotations

from collections.abc import Iterator
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


def _execute(connection, sql: str) -> None:  # type: ignore[no-untyped-def]
    try:
        with connection.cursor() as cursor:
            cursor.execute(sql)  # fixed statements, never input
    except DatabaseError:
        # A connection left unflushed must not serve the next transaction: drop it, and the
        # next one opens at the settings' level (SQLite's init_command; PostgreSQL's default).
        connection.close()
        raise
