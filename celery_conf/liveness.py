"""Is a given worker process still alive? Read from the heartbeat keys of celery_conf/heartbeat.

A worker restarted under the same name writes a new pid, so a record that names the old pid
is seen as dead even while the name is alive again. A record may also name the pool process
that ran it: a pool child killed (OOM, hard time limit, SIGKILL) is replaced by a new pid while
the main process lives on, so the child's pid must still be listed.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from .connections import redis_client
from .heartbeat import HEARTBEAT_KEY_PREFIX


def worker_heartbeats(client: redis.Redis) -> dict[str, dict[str, Any]]:
    """Every live worker by name: its last heartbeat (``pid``, ``children``, ``inflight``,
    ``at``)."""
    beats = {}
    for key in sorted(client.scan_iter(match=HEARTBEAT_KEY_PREFIX + "*", count=100)):
        raw = client.get(key)
        if raw is not None:  # expired between SCAN and GET
            beats[key[len(HEARTBEAT_KEY_PREFIX):]] = json.loads(raw)
    return beats


def worker_heartbeat(hostname: str) -> dict[str, Any] | None:
    """The last heartbeat of the worker called ``hostname``; None if it has expired.

    Raises redis.RedisError when Redis cannot tell: the caller must not guess.
    """
    raw = redis_client().get(HEARTBEAT_KEY_PREFIX + hostname)
    return json.loads(raw) if raw else None


def worker_pid(hostname: str) -> int | None:
    beat = worker_heartbeat(hostname)
    return int(beat["pid"]) if beat else None


def process_alive(beat: dict[str, Any] | None, *, pid: int, child_pid: int | None = None,
                  since: float | None = None) -> bool:
    """Does ``beat`` say that main process ``pid`` (and its pool process ``child_pid``) lives?

    ``since`` is when the record was written (epoch seconds): a heartbeat written before it
    may predate a pool process started just now, so it cannot prove that child dead.
    """
    if beat is None or int(beat["pid"]) != pid:
        return False
    if child_pid is None or child_pid == pid:
        return True
    children = beat.get("children")
    if children is None:  # a heartbeat from before pool pids were reported
        return True
    if child_pid in children:
        return True
    return since is not None and float(beat["at"]) <= since


def run_alive(beat: dict[str, Any] | None, *, worker_pid: int | None, pool_pid: int,
              since: float) -> bool:
    """Is a run started at ``since`` by pool process ``pool_pid`` of the worker whose last
    heartbeat is ``beat`` still going? ``worker_pid`` None (a run recorded before main pids
    were) trusts the heartbeat's own."""
    if beat is None:
        return False
    return process_alive(beat, pid=int(beat["pid"]) if worker_pid is None else worker_pid,
                         child_pid=pool_pid, since=since)


def worker_alive(hostname: str, pid: int, child_pid: int | None = None,
                 since: float | None = None) -> bool:
    return process_alive(worker_heartbeat(hostname), pid=pid, child_pid=child_pid, since=since)
