"""Keeps a live worker's in-flight messages from being redelivered, and says it is alive.

kombu's Redis transport scores each delivered-but-unacked message by its delivery time in the
``unacked_index`` sorted set; any worker's sweep puts a message back on its queue once that
score is older than the visibility timeout. A short timeout alone would redeliver tasks that
are still running (celery#2481, #3270, #7009). So every few seconds the worker's main process
re-scores the messages it holds (ZADD XX: only tags still present are touched, so a message
acked or already restored is never re-added). Its leases stay fresh while it lives; when it
dies they expire and another worker's sweep restores them within one timeout plus one sweep.

The same timer writes ``platform:worker:<hostname>``, a heartbeat key with a short TTL that
``manage.py status`` reads instead of the slow ``celery inspect ping`` (celery#4079).
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

from celery import bootsteps

from .policy import DEFAULT_LEASE_RENEW_INTERVAL

logger = logging.getLogger(__name__)

HEARTBEAT_KEY_PREFIX = "platform:worker:"
# A heartbeat key outlives a few missed renewals, then vanishes: the worker is gone.
HEARTBEAT_TTL_SECONDS = DEFAULT_LEASE_RENEW_INTERVAL * 3


class InflightLease(bootsteps.StartStopStep):
    """Consumer bootstep: renew in-flight leases and the worker heartbeat on the event loop."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, c: Any, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        self.tref: Any = None
        self.interval = float(
            os.environ.get("CELERY_LEASE_RENEW_INTERVAL", DEFAULT_LEASE_RENEW_INTERVAL)
        )

    def start(self, c: Any) -> None:
        self.renew(c)
        self.tref = c.timer.call_repeatedly(self.interval, self.renew, (c,), priority=10)

    def stop(self, c: Any) -> None:
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None

    shutdown = stop

    def renew(self, c: Any) -> None:
        consumer = c.task_consumer
        if consumer is None:
            return
        channel = consumer.channel
        qos = channel.qos
        # Messages this worker holds, running or reserved; acked ones wait in _dirty until
        # kombu flushes them, and ZADD XX would skip them anyway.
        tags = [tag for tag in list(qos._delivered) if tag not in qos._dirty]
        now = time.time()
        try:
            pipe = channel.client.pipeline(transaction=False)
            if tags:
                pipe.zadd(qos.unacked_index_key, {tag: now for tag in tags}, xx=True)
            pipe.set(
                HEARTBEAT_KEY_PREFIX + c.hostname,
                json.dumps({"pid": os.getpid(), "inflight": len(tags), "at": now}),
                ex=int(HEARTBEAT_TTL_SECONDS),
            )
            pipe.execute()
        except channel.connection_errors as exc:
            # The consumer reconnects on its own; its old leases expire and are redelivered.
            logger.warning("could not renew in-flight leases: %s", exc)
