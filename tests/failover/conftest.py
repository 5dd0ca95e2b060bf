"""Failover tests run on a Sentinel group whatever TEST_REDIS says (tests/sentinel.py)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.notifications.conftest import sse_clients  # noqa: F401  (a fixture, re-used)
from tests.procs import Stack
from tests.sentinel import SentinelRedis


@pytest.fixture
def sentinel_stack(make_stack: Callable[..., Stack],
                   monkeypatch: pytest.MonkeyPatch) -> Callable[..., Stack]:
    """``make_stack``, with the Stack's Redis a primary, a replica and three sentinels."""
    monkeypatch.setenv("TEST_REDIS", "sentinel")

    def factory(**kwargs: Any) -> Stack:
        stack = make_stack(**kwargs)
        assert isinstance(stack.redis, SentinelRedis)
        return stack

    return factory


def db_time(value: Any) -> float:
    """A timestamp column as epoch seconds, from either engine (SQLite text, PostgreSQL)."""
    when = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()
