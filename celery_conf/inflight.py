"""Keeps a live worker's in-flight messages from being redelivered, and says it is alive.

kombu's Redis transport scores each delivered-but-unacked message by its delivery time in the
``unacked_index`` sorted set; any worker's sweep puts a message back on its queue once that
score is older than the visibility timeout. A short timeout alone would redeliver tasks that
are still running (celery#2481, #3270, #7009). So every few seconds the worker's main process
re-scores the messages it holds (ZADD XX: only tags still present are touched, so a message
acked or already restored is never re-added). Its leases stay fresh while it lives; when it
dies they expire and another worker's sweep restores them within one timeout plus one sweep.

The renewal runs on a thread of its own, not on the worker's event loop: a warm shutdown
(SIGTERM, a deploy) stops the consumer and its timers while the pool still runs its tasks, and
those tasks' leases must stay fresh until they are acked (adr/0012). The thread stops when the
consumer is shut down for good, after the pool has finished.

The same thread writes ``platform:worker:<hostname>``, a heartbeat key with a short TTL that
``manage.py status`` and the reconciler read instead of the slow ``celery inspect ping``
(celery#4079). It names the main process and the pool processes, so a run recorded by a pool
child that died is told from a live one (celery_conf/liveness.py). Two live workers under one
name (hosts cloned with one host name) are found within a renewal and the newer stops.
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

logger = logging.getLogger(__name__)

HEARTBEAT_KEY_PREFIX = "platform:worker:"


def pool_pids(c: Any) -> list[int]:
    """The pids of the worker's pool processes; the main process for solo and thread pools."""
    try:
        processes = c.pool.info.get("processes")
    except Exception:  # a pool that is starting or stopping has no stable list
        processes = None
    return sorted(int(pid) for pid in processes) if processes else [os.getpid()]


class InflightLease(bootsteps.StartStopStep):
    """Consumer bootstep: renew in-flight leases and the worker heartbeat on a thread."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, c: Any, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        # One path per setting: both come from the app's config (celery_conf/policy.py).
        self.interval = float(c.app.conf.platform_lease_renew_interval)
        self.ttl = int(c.app.conf.platform_heartbeat_ttl)
        self.thread: threading.Thread | None = None
        self.stopped = threading.Event()
        self.channel: Any = None
        # Who writes this worker's heartbeat: two processes under one name are told apart.
        self.host = c.app.conf.get("platform_host_name") or ""
        self.instance = uuid.uuid4().hex[:12]
        self.started = time.time()
        self.written_at = 0.0  # when this process last wrote its heartbeat
        self.stopping = False

    def start(self, c: Any) -> None:
        self._remember_channel(c)
        if self.thread is None:  # a consumer restart (reconnect) calls start again
            self.renew(c)
            self.thread = threading.Thread(target=self._run, args=(c,), daemon=True,
                                           name="inflight-lease")
            self.thread.start()

    def stop(self, c: Any) -> None:
        # The consumer stops at the start of a warm shutdown, while the pool still runs tasks
        # whose messages this worker holds: keep renewing them. Only shutdown ends the thread.
        pass

    def shutdown(self, c: Any) -> None:
        self.stopped.set()
        if self.thread is not None:
            self.thread.join(timeout=self.interval + 5)
            self.thread = None

    def _remember_channel(self, c: Any) -> None:
        consumer = c.task_consumer
        if consumer is not None and consumer.channel is not None:
            self.channel = consumer.channel

    def _run(self, c: Any) -> None:
        while not self.stopped.wait(self.interval):
            self._remember_channel(c)
            try:
                self.renew(c)
            except Exception:  # never let the thread die: a dead thread strands every lease
                logger.exception("in-flight lease renewal failed")

    def renew(self, c: Any) -> None:
        channel = self.channel
        if channel is None:
            return
        qos = channel.qos
        # Messages this worker holds, running or reserved; acked ones wait in _dirty until
        # kombu flushes them, and ZADD XX would skip them anyway. list() of a dict is atomic
        # under the GIL, so the event loop may change it meanwhile.
        dirty = set(qos._dirty)
        tags = [tag for tag in list(qos._delivered) if tag not in dirty]
        now = time.time()
        try:
            # The synchronous pool (kombu's acks use it too), never the event loop's: this
            # runs on another thread, and redis-py pools are thread-safe.
            with channel.conn_or_acquire() as client:
                pipe = client.pipeline(transaction=False)
            if tags:
                pipe.zadd(qos.unacked_index_key, {tag: now for tag in tags}, xx=True)
            pipe.set(
                HEARTBEAT_KEY_PREFIX + c.hostname,
                json.dumps({"pid": os.getpid(), "children": pool_pids(c),
                            "inflight": len(tags), "at": now, "host": self.host,
                            "instance": self.instance, "started": self.started}),
                ex=self.ttl, get=True,
            )
            previous = pipe.execute()[-1]
        except channel.connection_errors as exc:
            # The consumer reconnects on its own; its old leases expire and are redelivered.
            logger.warning("could not renew in-flight leases: %s", exc)
            return
        self._check_same_name(c, previous)
        self.written_at = now

    def _check_same_name(self, c: Any, previous: bytes | str | None) -> None:
        """Two live workers under one node name (hosts cloned with one host name) overwrite
        each other's heartbeat, and the reconciler then reads one's pids as the other's: it
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
