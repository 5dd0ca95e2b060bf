"""Health for a remote monitor: is this web worker answering, and is the platform ready?

``platform_readiness`` runs a handful of cheap probes (one SQL round trip, one Redis pipeline
plus a SCAN of the heartbeat keys) and says which failed. It names no host, URL or secret, so
it can be served without a login.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import redis
from django.conf import settings
from django.db import DatabaseError, connection

from celery_conf.connections import redis_client
from celery_conf.liveness import worker_heartbeats
from celery_conf.names import Queue
from celery_conf.queues import message_headers, queue_ends, queued_at
from scheduler.lease import read_leadership

# For messages without the platform's ``platform_queued_at`` header (sent by something else):
# where the probes remember each queue's end messages and when they first saw them, so their
# age is known at least from then.
QUEUE_HEAD_KEY = "platform:ops:queue_head"


def database_probe() -> dict[str, Any]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError as exc:
        return {"ok": False, "error": type(exc).__name__}
    return {"ok": True, "vendor": connection.vendor}


def redis_probe(client: redis.Redis) -> dict[str, Any]:
    """Reachable, persisting (AOF on, last write and snapshot fine) and below its memory cap."""
    info = client.info("persistence") | client.info("memory")
    problems = []
    if not info.get("aof_enabled"):
        problems.append("append-only file is off")
    if info.get("aof_last_write_status") != "ok":
        problems.append("last append-only write failed")
    if info.get("rdb_last_bgsave_status") != "ok":
        problems.append("last snapshot failed (writes refused: MISCONF)")
    maxmemory = int(info.get("maxmemory") or 0)
    used = int(info.get("used_memory") or 0)
    if maxmemory and used >= maxmemory:
        problems.append("memory limit reached (writes refused)")
    return {"ok": not problems, "problems": problems,
            "memory_used_pct": round(100 * used / maxmemory, 1) if maxmemory else None}


def workers_probe(client: redis.Redis) -> dict[str, Any]:
    alive = len(worker_heartbeats(client))
    return {"ok": alive >= 1, "alive": alive}


def beat_probe(client: redis.Redis) -> dict[str, Any]:
    leadership = read_leadership(client)
    return {"ok": leadership["leader"] is not None,
            "lock_expires_in_s": leadership.get("lock_expires_in_s")}


def queue_age_probe(client: redis.Redis, *, now: float | None = None) -> dict[str, Any]:
    """The longest any queue's oldest message has waited, against READYZ_MAX_QUEUE_AGE_S.

    The oldest waiting message is one of a queue's two ends (celery_conf/queues.py); its age
    is now minus its ``platform_queued_at`` header. An end without the header is aged from
    the first time a probe saw it there (remembered in Redis, shared by every web worker).
    """
    now = time.time() if now is None else now
    ends = queue_ends(client, [str(q) for q in Queue])
    seen = client.hgetall(QUEUE_HEAD_KEY)
    ages: dict[str, float] = {}
    keep: dict[str, str] = {}
    for queue, messages in ends.items():
        for raw in messages:
            stamp = queued_at(raw)
            if stamp is None:
                tag = _message_id(raw)
                field = f"{queue}:{tag}"
                first_seen = float(seen[field]) if field in seen else now
                keep[field] = str(first_seen)
                stamp = first_seen
            ages[queue] = max(ages.get(queue, 0.0), now - stamp)
    stale = [field for field in seen if field not in keep]
    new = {field: value for field, value in keep.items() if field not in seen}
    if new or stale:
        pipe = client.pipeline(transaction=False)
        if new:
            pipe.hset(QUEUE_HEAD_KEY, mapping=new)
        if stale:
            pipe.hdel(QUEUE_HEAD_KEY, *stale)
        pipe.execute()
    oldest = round(max(ages.values(), default=0.0), 1)
    bound = settings.READYZ_MAX_QUEUE_AGE_S
    return {"ok": oldest <= bound, "oldest_s": oldest, "bound_s": bound}


def _message_id(raw: str) -> str:
    """The Celery task id of a stored message, or a hash of it: the same in every worker."""
    task_id = message_headers(raw).get("id")
    if isinstance(task_id, str) and task_id:
        return task_id
    return hashlib.sha256(raw.encode() if isinstance(raw, str) else raw).hexdigest()[:16]


REDIS_PROBES = (
    ("redis", redis_probe),
    ("workers", workers_probe),
    ("beat", beat_probe),
    ("queue_age", queue_age_probe),
)


def platform_readiness() -> dict[str, Any]:
    """Every probe's verdict; ``ready`` only when each one is ok."""
    started = time.perf_counter()
    checks: dict[str, dict[str, Any]] = {"database": database_probe()}
    client = redis_client()
    for name, probe in REDIS_PROBES:
        try:
            checks[name] = probe(client)
        except redis.RedisError as exc:
            # The class name only: a message can carry an address.
            checks[name] = {"ok": False, "error": type(exc).__name__}
    return {
        "ready": all(check["ok"] for check in checks.values()),
        "checks": checks,
        "took_ms": round((time.perf_counter() - started) * 1000, 1),
    }
