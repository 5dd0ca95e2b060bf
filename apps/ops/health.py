"""Health for a remote monitor: is this web worker answering, and is the platform ready?

``platform_readiness`` runs a handful of cheap probes (one SQL round trip, one Redis pipeline
plus a SCAN of the heartbeat keys) and says which failed. It names no host, URL or secret, so
it can be served without a login.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import redis
from django.conf import settings
from django.db import DatabaseError, connection

from celery_conf.connections import redis_client
from celery_conf.liveness import worker_heartbeats
from celery_conf.names import Queue
from scheduler.lease import read_leadership

from .status import PRIORITY_SEP, PRIORITY_STEPS

# Where the probes remember the message they last saw at the head of each queue and when
# they first saw it: the head's age is how long the oldest waiting message has waited (at
# least), without Celery messages carrying a timestamp of their own.
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
    """The longest any queue's oldest message has waited, against READYZ_MAX_QUEUE_AGE_S."""
    now = time.time() if now is None else now
    lists = [(str(q), str(q) if step == 0 else f"{q}{PRIORITY_SEP}{step}")
             for q in Queue for step in PRIORITY_STEPS]
    pipe = client.pipeline(transaction=False)
    for _, key in lists:
        pipe.lindex(key, -1)  # kombu pushes on the left and pops on the right
    pipe.hgetall(QUEUE_HEAD_KEY)
    *heads, seen = pipe.execute()
    ages: dict[str, float] = {}
    update: dict[str, str] = {}
    for (queue, key), raw in zip(lists, heads, strict=True):
        if raw is None:
            continue
        tag = _delivery_tag(raw)
        first_seen = now
        if key in seen and seen[key].split(" ", 1)[0] == tag:
            first_seen = float(seen[key].split(" ", 1)[1])
        else:
            update[key] = f"{tag} {now}"
        ages[queue] = max(ages.get(queue, 0.0), now - first_seen)
    present = {key for (_, key), raw in zip(lists, heads, strict=True) if raw is not None}
    stale = [key for key in seen if key not in present]
    if update or stale:
        pipe = client.pipeline(transaction=False)
        if update:
            pipe.hset(QUEUE_HEAD_KEY, mapping=update)
        if stale:
            pipe.hdel(QUEUE_HEAD_KEY, *stale)
        pipe.execute()
    oldest = round(max(ages.values(), default=0.0), 1)
    bound = settings.READYZ_MAX_QUEUE_AGE_S
    return {"ok": oldest <= bound, "oldest_s": oldest, "bound_s": bound}


def _delivery_tag(raw: str) -> str:
    try:
        return str(json.loads(raw)["properties"]["delivery_tag"])
    except (ValueError, KeyError, TypeError):
        # Not a kombu envelope: its content names it, the same in every web worker.
        return hashlib.sha256(raw.encode()).hexdigest()[:16]


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
