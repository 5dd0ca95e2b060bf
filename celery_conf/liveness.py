"""Is a given worker process still alive? Read from the heartbeat keys of celery_conf/inflight.

A worker restarted under the same name writes a new pid, so a record that names the old pid
is seen as dead even while the name is alive again.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from .connections import redis_client
from .inflight import HEARTBEAT_KEY_PREFIX


def worker_heartbeats(client: redis.Redis) -> dict[str, dict[str, Any]]:
    """Every live worker by name: its last heartbeat (``pid``, ``inflight``, ``at``)."""
    beats = {}
    for key in sorted(client.scan_iter(match=HEARTBEAT_KEY_PREFIX + "*", count=100)):
        raw = client.get(key)
        if raw is not None:  # expired between SCAN and GET
            beats[key[len(HEARTBEAT_KEY_PREFIX):]] = json.loads(raw)
    return beats


def worker_pid(hostname: str) -> int | None:
    """The pid of the live worker called ``hostname``; None if its heartbeat has expired.

    Raises redis.RedisError when Redis cannot tell: the caller must not guess.
    """
    raw = redis_client().get(HEARTBEAT_KEY_PREFIX + hostname)
    return int(json.loads(raw)["pid"]) if raw else None


def worker_alive(hostname: str, pid: int) -> bool:
    return worker_pid(hostname) == pid


