"""Commits that skip the flush: only inside the block, never for the next transaction.

Read back from the engine itself (SQLite's ``PRAGMA synchronous``, PostgreSQL's
``synchronous_commit``) on a connection in autocommit, as the services use it.
"""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from apps.transactions import unsynced_commits

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
