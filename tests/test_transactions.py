"""Commits that skip the flush, or flush after SQLite's write lock: only inside the block.

Read back from the engine itself (SQLite's ``PRAGMA synchronous``, PostgreSQL's
``synchronous_commit``) on a connection in autocommit, as the services use it. The flush of a
database file: tests/test_flush_after_the_lock.py.
"""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from apps.transactions import flushed_after_the_lock, unsynced_commits

pytestmark = pytest.mark.django_db(transaction=True)


def flush_level() -> str:
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("PRAGMA synchronous")
            return {0: "off", 1: "normal", 2: "full", 3: "extra"}[cursor.fetchone()[0]]
        cursor.execute("SHOW synchronous_commit")
        return str(cursor.fetchone()[0])


def test_commits_inside_skip_the_flush_and_the_level_comes_back_after():
    before = flush_level()
    assert before in ("full", "on")
    with unsynced_commits():
        assert flush_level() in ("normal", "off")
        with transaction.atomic():
            assert flush_level() in ("normal", "off")
    assert flush_level() == before


def test_the_level_comes_back_when_the_block_raises():
    before = flush_level()
    with pytest.raises(RuntimeError), unsynced_commits():
        raise RuntimeError("the write failed")
    assert flush_level() == before


def test_inside_an_atomic_block_it_changes_nothing():
    with transaction.atomic():
        before = flush_level()
        with unsynced_commits():
            assert flush_level() == before


def test_on_the_test_database_the_flush_after_the_lock_changes_nothing():
    """In memory (SQLite) there is no WAL, and every commit keeps the level it had; on
    PostgreSQL the commit itself waits for the flush (tests/test_flush_after_the_lock.py
    covers a SQLite file)."""
    before = flush_level()
    with flushed_after_the_lock() as flush:
        assert flush_level() == before
        flush()
    assert flush_level() == before
