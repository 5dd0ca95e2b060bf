"""A redis-py client for the platform's one Redis, for code that is not kombu or RedBeat."""

from __future__ import annotations

from functools import cache

import redis
from django.conf import settings


@cache
def redis_client() -> redis.Redis:
    # One pool per process (cached), sized by redis-py's defaults.
    return redis.Redis.from_url(
        settings.REDIS_URL, decode_responses=True, socket_timeout=5, socket_connect_timeout=5
    )
