"""What ``manage.py status`` reports: Redis and its persistence, workers, queues, work in flight.

Each section is a function returning plain data, so the command can print a table or JSON and
later systems (the beat election, the event bus) add their own section to SECTIONS.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import redis
from django.conf import settings

from celery_conf.connections import redis_client
from celery_conf.liveness import worker_heartbeats
from celery_conf.names import Queue
from celery_conf.queues import queue_lengths, unacked_key
from scheduler.lease import read_leadership

Section = Callable[[redis.Redis], dict[str, Any]]


def redis_section(client: redis.Redis) -> dict[str, Any]:
    started = time.perf_counter()
    client.ping()
    ping_ms = (time.perf_counter() - started) * 1000
    server = client.info("server")
    persistence = client.info("persistence")
    memory = client.info("memory")
    config = client.config_get("appendfsync") | client.config_get("maxmemory-policy")
    return {
        "url": settings.REDIS.describe(),
        "role": client.info("replication").get("role"),
        "version": server.get("redis_version"),
        "ping_ms": round(ping_ms, 2),
        "aof_enabled": bool(persistence.get("aof_enabled")),
        "appendfsync": config.get("appendfsync"),
        "aof_last_write_status": persistence.get("aof_last_write_status"),
        "aof_rewrite_in_progress": bool(persistence.get("aof_rewrite_in_progress")),
        "rdb_last_bgsave_status": persistence.get("rdb_last_bgsave_status"),
        "rdb_changes_since_last_save": persistence.get("rdb_changes_since_last_save"),
        "maxmemory_policy": config.get("maxmemory-policy"),
        "used_memory_human": memory.get("used_memory_human"),
    }


def workers_section(client: redis.Redis) -> dict[str, Any]:
    now = time.time()
    workers = [
        {"name": name, "pid": beat["pid"], "inflight": beat["inflight"],
         "last_seen_s": round(now - beat["at"], 1)}
        for name, beat in worker_heartbeats(client).items()
    ]
    return {"alive": len(workers), "workers": workers}


def queues_section(client: redis.Redis) -> dict[str, Any]:
    return queue_lengths(client, [str(q) for q in Queue])


def inflight_section(client: redis.Redis) -> dict[str, Any]:
    """Work in flight: what the workers say they run (their heartbeats), and the messages
    kombu holds as delivered but not yet acknowledged."""
    running = sum(int(beat.get("inflight", 0)) for beat in worker_heartbeats(client).values())
    return {"running": running, "unacked_messages": client.hlen(unacked_key())}


def metering_section(client: redis.Redis) -> dict[str, Any]:
    """Today's API usage: calls counted, users seen, users at the daily limit."""
    from apps.metering.selectors import usage_summary  # ops reads the apps, never the reverse

    return usage_summary()


def beat_section(client: redis.Redis) -> dict[str, Any]:
    """Which beat holds the RedBeat lock, since when, and when the lock expires."""
    return read_leadership(client)


SECTIONS: dict[str, Section] = {
    "redis": redis_section,
    "workers": workers_section,
    "queues": queues_section,
    "inflight": inflight_section,
    "beat": beat_section,
    "metering": metering_section,
}


def platform_status() -> dict[str, Any]:
    client = redis_client()
    report: dict[str, Any] = {}
    for name, section in SECTIONS.items():
        try:
            report[name] = section(client)
        except redis.RedisError as exc:
            report[name] = {"error": f"{type(exc).__name__}: {exc}"}
    return report

