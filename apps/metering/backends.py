"""Where the per-user daily counters live: the candidates the benchmark compares (adr/0011).

``METERING_BACKEND`` picks one per process start:

- ``database``: one row per user and day, ``UPDATE ... SET count = count + 1`` with the limit
  in the WHERE clause, so the check and the increment are one atomic statement.
- ``redis``: one key per user and day, the check and INCR in one Lua script, EXPIREAT the day
  after.
- ``local``: counts held in each process and added to the database row every
  ``METERING_FLUSH_S``. Kept only so the benchmark can show what it costs: increments not yet
  flushed die with the process, and each process checks the limit against a stale total.
- ``off``: counts nothing, refuses nothing; the benchmark's baseline.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from functools import cache
from typing import Protocol

from django.conf import settings
from django.db import connection
from django.db.models import F

from apps.sql_names import column, table
from apps.transactions import unsynced_commits
from celery_conf.connections import redis_client

from .days import next_reset
from .models import UsageCounter

log = logging.getLogger(__name__)

BACKENDS = ("database", "redis", "local", "off")
REDIS_KEY_PREFIX = "platform:metering:"


class Counters(Protocol):
    def take(self, *, user_id: int, day: dt.date, limit: int) -> bool:
        """Count one call unless the user already has ``limit`` today; True if counted."""

    def give_back(self, *, user_id: int, day: dt.date) -> None:
        """Undo one ``take`` whose call then failed (bad input, queue down)."""

    def read(self, *, user_id: int, day: dt.date) -> int: ...

    def totals(self, *, day: dt.date) -> dict[int, int]:
        """user id -> count, for every user with calls on ``day``."""


# Every counted call's one statement, as SQL built once from the model's names: the ORM built
# it on every call (13 % of the submit's Python samples, loadtests/results/flame_after_web.*).
# The day is converted by its field, as the ORM converts it (apps/documents/statements.py).
_COUNT = column(UsageCounter, "count")
INCREMENT_SQL = (f"UPDATE {table(UsageCounter)} SET {_COUNT} = {_COUNT} + 1 "
                 f"WHERE {column(UsageCounter, 'user')} = %s "
                 f"AND {column(UsageCounter, 'day')} = %s AND {_COUNT} < %s")


class DatabaseCounters:
    # Counts are committed without a flush (apps/transactions.py, adr/0043): the document a
    # count pays for is committed after it through the same log, flushed, which makes the
    # count durable too; a crash can only lose counts of calls that stored nothing.
    # Each statement in autocommit, as before: one atomic statement needs no transaction.
    def take(self, *, user_id: int, day: dt.date, limit: int) -> bool:
        with unsynced_commits():
            if self._increment(user_id, day, limit):
                return True
            # No row yet (first call today) or at the limit: make sure the row exists, try
            # again. ON CONFLICT DO NOTHING, so two workers creating it at once both go on.
            UsageCounter.objects.bulk_create(
                [UsageCounter(user_id=user_id, day=day, count=0)], ignore_conflicts=True)
            return self._increment(user_id, day, limit)

    @staticmethod
    def _increment(user_id: int, day: dt.date, limit: int) -> bool:
        day_value = UsageCounter._meta.get_field("day").get_db_prep_value(day, connection)
        with connection.cursor() as cursor:
            cursor.execute(INCREMENT_SQL, [user_id, day_value, limit])
            return cursor.rowcount == 1

    def give_back(self, *, user_id: int, day: dt.date) -> None:
        with unsynced_commits():
            UsageCounter.objects.filter(user_id=user_id, day=day, count__gt=0).update(
                count=F("count") - 1)

    def read(self, *, user_id: int, day: dt.date) -> int:
        row = UsageCounter.objects.filter(user_id=user_id, day=day).values("count").first()
        return int(row["count"]) if row else 0

    def totals(self, *, day: dt.date) -> dict[int, int]:
        rows = UsageCounter.objects.filter(day=day, count__gt=0).values_list("user_id", "count")
        return {int(u): int(c) for u, c in rows}


# GET, compare, INCR in one script: atomic in Redis, one round trip. The key outlives its
# day by a day so yesterday's usage can still be read.
_TAKE_LUA = """
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
if c >= tonumber(ARGV[1]) then return 0 end
if redis.call('INCR', KEYS[1]) == 1 then redis.call('EXPIREAT', KEYS[1], ARGV[2]) end
return 1
"""
_GIVE_BACK_LUA = """
if tonumber(redis.call('GET', KEYS[1]) or '0') > 0 then return redis.call('DECR', KEYS[1]) end
return 0
"""


class RedisCounters:
    @staticmethod
    def key(user_id: int, day: dt.date) -> str:
        return f"{REDIS_KEY_PREFIX}{day.isoformat()}:{user_id}"

    def take(self, *, user_id: int, day: dt.date, limit: int) -> bool:
        client = redis_client()
        expire_at = int((next_reset(_midday(day)) + dt.timedelta(days=1)).timestamp())
        script = client.register_script(_TAKE_LUA)
        return bool(script(keys=[self.key(user_id, day)], args=[limit, expire_at]))

    def give_back(self, *, user_id: int, day: dt.date) -> None:
        client = redis_client()
        client.register_script(_GIVE_BACK_LUA)(keys=[self.key(user_id, day)])

    def read(self, *, user_id: int, day: dt.date) -> int:
        return int(redis_client().get(self.key(user_id, day)) or 0)

    def totals(self, *, day: dt.date) -> dict[int, int]:
        client = redis_client()
        prefix = f"{REDIS_KEY_PREFIX}{day.isoformat()}:"
        keys = sorted(client.scan_iter(match=prefix + "*", count=500))
        values = client.mget(keys) if keys else []
        return {int(k[len(prefix):]): int(v) for k, v in zip(keys, values, strict=True)
                if v and int(v) > 0}


class LocalFlushedCounters:
    """The rejected candidate: a dict per process, added to the database row periodically."""

    def __init__(self, *, flush_s: float) -> None:
        self.flush_s = flush_s
        self._lock = threading.Lock()
        self._pending: dict[tuple[int, dt.date], int] = {}
        self._stored: dict[tuple[int, dt.date], int] = {}  # the row as of the last flush
        self._flusher: threading.Thread | None = None
        self._db = DatabaseCounters()

    def take(self, *, user_id: int, day: dt.date, limit: int) -> bool:
        self._start_flusher()
        key = (user_id, day)
        if key not in self._stored:
            stored = self._db.read(user_id=user_id, day=day)
            with self._lock:
                self._stored.setdefault(key, stored)
        with self._lock:
            # The stored part is stale by up to one flush period and misses the other
            # processes' pending counts: that is how this candidate overshoots the limit.
            if self._stored[key] + self._pending.get(key, 0) >= limit:
                return False
            self._pending[key] = self._pending.get(key, 0) + 1
        return True

    def give_back(self, *, user_id: int, day: dt.date) -> None:
        with self._lock:
            key = (user_id, day)
            self._pending[key] = self._pending.get(key, 0) - 1

    def read(self, *, user_id: int, day: dt.date) -> int:
        with self._lock:
            pending = self._pending.get((user_id, day), 0)
        return self._db.read(user_id=user_id, day=day) + pending

    def totals(self, *, day: dt.date) -> dict[int, int]:
        totals = self._db.totals(day=day)
        with self._lock:
            for (user_id, d), n in self._pending.items():
                if d == day:
                    totals[user_id] = totals.get(user_id, 0) + n
        return totals

    def flush(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, {}
        for (user_id, day), n in batch.items():
            UsageCounter.objects.bulk_create(
                [UsageCounter(user_id=user_id, day=day, count=0)], ignore_conflicts=True)
            UsageCounter.objects.filter(user_id=user_id, day=day).update(count=F("count") + n)
        for user_id, day in list(self._stored):
            self._stored[(user_id, day)] = self._db.read(user_id=user_id, day=day)

    def _start_flusher(self) -> None:
        if self._flusher is None:
            with self._lock:
                if self._flusher is None:
                    self._flusher = threading.Thread(
                        target=self._flush_forever, name="metering-flush", daemon=True)
                    self._flusher.start()

    def _flush_forever(self) -> None:
        while True:
            time.sleep(self.flush_s)
            try:
                self.flush()
            except Exception:  # the next period retries; a dead flusher would lose everything
                log.exception("metering flush failed")
            finally:
                connection.close()


class NoCounters:
    def take(self, *, user_id: int, day: dt.date, limit: int) -> bool:
        return True

    def give_back(self, *, user_id: int, day: dt.date) -> None:
        pass

    def read(self, *, user_id: int, day: dt.date) -> int:
        return 0

    def totals(self, *, day: dt.date) -> dict[int, int]:
        return {}


def _midday(day: dt.date) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(12), tzinfo=dt.UTC)


@cache
def counters(backend: str) -> Counters:
    """One instance per process and backend (the local candidate's dict lives in it)."""
    if backend == "database":
        return DatabaseCounters()
    if backend == "redis":
        return RedisCounters()
    if backend == "local":
        return LocalFlushedCounters(flush_s=settings.METERING_FLUSH_S)
    if backend == "off":
        return NoCounters()
    raise ValueError(f"unknown METERING_BACKEND {backend!r}; expected one of {BACKENDS}")
