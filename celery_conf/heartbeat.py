"""Says that a worker is alive: a heartbeat key per worker, written every second by a thread.

``platform:worker:<hostname>`` holds the worker's main process id, its pool processes and how
many tasks it runs, with a TTL of a few intervals (celery_conf/policy.py). While the key
exists the worker is alive; once it is gone, so is the worker, and the leading beat hands its
documents to another worker (apps/documents/recovery.py, adr/0030). ``manage.py status`` and
the reconciler read the same keys instead of the slow ``celery inspect ping`` (celery#4079).
The key names the pool processes, so a run recorded by a pool child that died is told from a
live one (celery_conf/liveness.py).

The thread is the worker's own, on its own Redis client (celery_conf/connections.py); it
reads nothing of kombu's. It keeps writing through a warm shutdown (SIGTERM, a deploy: the
consumer stops while the pool finishes its tasks, whose documents must not look abandoned),
and stops, deleting the key, on Celery's ``worker_shutdown`` signal, sent once the pool has
finished. Two live workers under one name (hosts cloned with one host name) are found within
an interval and the newer stops.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
import uuid
from typing import Any

from celery import bootsteps
from celery.signals import worker_process_init, worker_shutdown
from celery.worker import state as worker_state
from redis.exceptions import RedisError

from .connections import COMMAND_TIMEOUT_S, RedisTarget, clock_beyond, sync_client

logger = logging.getLogger(__name__)

HEARTBEAT_KEY_PREFIX = "platform:worker:"
# How far a worker's clock may be from Redis's before it refuses to run (adr/0044). A beat
# stamps each periodic message with an expiry by its clock (at least 5 s after the publish,
# scheduler/jobs.py); a worker ahead by more drops the message as expired, unrun: measured,
# a worker 30 s ahead dropped every slot it took. A fifth of that minimum, as the beat keeps
# a tenth of its lock. NTP keeps hosts within milliseconds.
MAX_CLOCK_OFFSET_S = 1.0

# Set in every pool process as it starts (Celery's worker_process_init): a task then knows its
# worker's main process is its parent. Solo and thread pools run tasks in the main process.
_in_pool_process = False


@worker_process_init.connect
def _mark_pool_process(**kwargs: Any) -> None:
    global _in_pool_process
    _in_pool_process = True


def worker_main_pid() -> int:
    """The pid the worker's heartbeat names, as seen from the task running now."""
    return os.getppid() if _in_pool_process else os.getpid()


def pool_pids(c: Any) -> list[int]:
    """The pids of the worker's pool processes; the main process for solo and thread pools."""
    try:
        processes = c.pool.info.get("processes")
    except Exception:  # a pool that is starting or stopping has no stable list
        processes = None
    return sorted(int(pid) for pid in processes) if processes else [os.getpid()]


class WorkerHeartbeat(bootsteps.StartStopStep):
    """Consumer bootstep: the heartbeat thread, started once, ended by ``worker_shutdown``."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, c: Any, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        # One path per setting: both come from the app's config (celery_conf/policy.py).
        self.interval = float(c.app.conf.platform_heartbeat_interval)
        self.ttl_ms = int(float(c.app.conf.platform_heartbeat_ttl) * 1000)
        target: RedisTarget = c.app.conf.platform_redis
        # A write that takes longer than the TTL proves nothing: give up well before it.
        self.client = sync_client(target, timeout=min(COMMAND_TIMEOUT_S, self.ttl_ms / 2000),
                                  retries=0)
        self.thread: threading.Thread | None = None
        self.stopped = threading.Event()
        # Who writes this worker's heartbeat: two processes under one name are told apart.
        self.host = c.app.conf.get("platform_host_name") or ""
        self.instance = uuid.uuid4().hex[:12]
        self.started = time.time()
        self.written_at = 0.0  # when this process last wrote its heartbeat
        self.stopping = False
        self.hostname = ""

    def start(self, c: Any) -> None:
        if self.thread is None:  # a consumer restart (reconnect) calls start again
            self.hostname = c.hostname
            self._check_clock(c)
            self.beat(c)
            self.thread = threading.Thread(target=self._run, args=(c,), daemon=True,
                                           name="worker-heartbeat")
            self.thread.start()
            worker_shutdown.connect(self._on_worker_shutdown, weak=False)

    def stop(self, c: Any) -> None:
        # The consumer stops at the start of a warm shutdown, while the pool still runs its
        # tasks: the worker is alive until worker_shutdown says the pool is done.
        pass

    def _on_worker_shutdown(self, **kwargs: Any) -> None:
        self.stopped.set()
        if self.thread is not None:
            self.thread.join(timeout=self.interval + 5)
        if worker_state.active_requests:
            return  # tasks still running (a cold shutdown): let the key expire on its own
        try:
            self.client.delete(HEARTBEAT_KEY_PREFIX + self.hostname)
        except RedisError:
            pass  # the key expires within the TTL anyway

    def _run(self, c: Any) -> None:
        while not self.stopped.wait(self.interval):
            try:
                self.beat(c)
            except Exception:  # never let the thread die: the worker would look dead
                logger.exception("worker heartbeat failed")

    def beat(self, c: Any) -> None:
        now = time.time()
        record = {"pid": os.getpid(), "children": pool_pids(c),
                  "inflight": len(worker_state.active_requests), "at": now, "host": self.host,
                  "instance": self.instance, "started": self.started}
        try:
            previous = self.client.set(HEARTBEAT_KEY_PREFIX + c.hostname, json.dumps(record),
                                       px=self.ttl_ms, get=True)
        except RedisError as exc:
            logger.warning("could not write the worker heartbeat: %s", exc)
            return
        self._check_same_name(c, previous)
        self.written_at = now

    def _check_clock(self, c: Any) -> None:
        """Refuse to run (warm shutdown, as for a taken name) on a clock certainly more than
        MAX_CLOCK_OFFSET_S from Redis's; its restarts keep refusing, with the fix in the log."""
        try:
            offset = clock_beyond(self.client, MAX_CLOCK_OFFSET_S)
        except RedisError as exc:
            logger.warning("could not compare this host's clock with Redis's: %s", exc)
            return
        if offset is None:
            return
        self.stopping = True
        logger.error(
            "this host's clock is %.1f s %s Redis's; a worker runs only within %.1f s of it "
            "(periodic messages would expire unrun, adr/0044): stopping %s. Fix the clock (NTP)",
            abs(offset), "ahead of" if offset > 0 else "behind", MAX_CLOCK_OFFSET_S, c.hostname)
        os.kill(os.getpid(), signal.SIGTERM)

    def _check_same_name(self, c: Any, previous: bytes | str | None) -> None:
        """Two live workers under one node name (hosts cloned with one host name) overwrite
        each other's heartbeat, and the recovery then reads one's pids as the other's: it
        re-enqueues documents that are still running. A heartbeat written by another process
        after this one's last write proves the other is alive; the newer of the two stops
        (warm shutdown: its running tasks finish), and its restarts keep stopping, with the
        fix in the log, until the name is made unique (PLATFORM_HOST_NAME, adr/0026)."""
        if previous is None or not self.written_at or self.stopping:
            return
        other = json.loads(previous)
        if other.get("instance") in (None, self.instance):
            return
        if float(other["at"]) <= self.written_at:
            return  # written before this worker's last write: a predecessor, now dead
        # The elder keeps the name; a tie (same start time) goes to the smaller instance id,
        # so exactly one of the two stops.
        if (float(other.get("started", 0)), str(other["instance"])) > (self.started,
                                                                        self.instance):
            logger.error("a newer worker named %s is alive too (pid %s on host %s); it stops",
                         c.hostname, other.get("pid"), other.get("host"))
            return
        self.stopping = True
        logger.error(
            "another worker named %s is alive (pid %s on host %s, started earlier): stopping "
            "this one. Give every host its own PLATFORM_HOST_NAME (worker names are "
            "<name>@<host name>)", c.hostname, other.get("pid"), other.get("host"))
        os.kill(os.getpid(), signal.SIGTERM)
