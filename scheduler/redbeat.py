"""RedBeat, elected and fenced: one beat publishes, and Redis refuses any write of a beat that
no longer holds the lock.

Differences from ``redbeat.RedBeatScheduler``, each closing a hazard in FIELD-NOTES.md or
issue 12 (network faults):

- The lock is taken in ``tick()``, not by RedBeat's ``beat_init`` handler, which blocks in
  ``lock.acquire()`` and dies on the first Redis error; a standby here simply polls once per
  loop interval and rides out a Redis restart.
- Every write the leader makes (lock renewal, schedule install, the fire of a slot) is one
  of the fence's scripts (scheduler/fence.py): refused by Redis unless the lock holds this
  beat's token and the call's deadline has not passed. A fire is one script: the entry's
  last-run update (compare-and-set on the last run, so a retried or late copy of a fire
  changes nothing) and an outbox item land together or not at all; the leader then publishes
  the outbox with Celery's public ``send_task`` (scheduler/outbox.py, adr/0031).
- Every Redis and broker call has connect and command timeouts and no retry inside a tick
  (scheduler/settings.py), shorter than what is left of the lease.
- Static entries are written only by the beat that has just won the lock, never in
  ``setup_schedule()`` (RedBeat #198: a standby started by a rolling deploy rewrote the live
  schedule).
- Slots sit on the job's fixed grid (scheduler/jobs.py); a new leader fires every slot that
  fell due since the last fired one, back to ``BACKFILL_WINDOW_S``, so a handover loses no
  slot. Each message carries ``slot`` and ``fired_by`` and a task id derived from the slot,
  and the reports' run record is unique per (job, slot): the database fence behind the lock.
- The leader also runs its duties, every loop interval, on a thread (scheduler/duties.py):
  the documents' recovery.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from celery.schedules import schedstate
from kombu.exceptions import KombuError
from kombu.utils.objects import cached_property
from redbeat.decoder import RedBeatJSONEncoder, to_timestamp
from redbeat.schedulers import RedBeatScheduler, RedBeatSchedulerEntry

from celery_conf.connections import RedisTarget, beat_client
from celery_conf.queues import QUEUED_AT_HEADER

from .duties import LeaderDuties
from .fence import Command, Condition, FenceRefused, recorded
from .jobs import Missed, PeriodicJob
from .lease import Lease, beat_identity
from .outbox import OUTBOX_KEY, OutboxItem, slot_task_id
from .settings import BACKFILL_WINDOW_S, REDIS_SOCKET_TIMEOUT, broker_transport_options
from .tables import JOBS

logger = logging.getLogger("celery.beat")
# A standby that knows when the holder's lock ends polls this long after it (and never more
# often than this): the key has expired by then even with a millisecond of clock rounding.
POLL_AT_EXPIRY_S = 0.02
# A standby refusing the lock for its clock says so at most this often.
CLOCK_LOG_EVERY_S = 60.0


# Refusals after which this beat stops leading at once: the lock is another's ("moved"), or
# this host's clock ran ahead of Redis's past the bound while it led ("clock"; the lease has
# let the lock go).
STEP_DOWN = ("moved", "clock")


class LeaseLost(Exception):
    """The lock is gone or unrenewable past its deadline: this beat must stop scheduling."""


# RedBeat asks "is this key configured?" by exact name, so under Django's CELERY_ namespace it
# misses CELERY_REDBEAT_REDIS_URL: it warns, falls back to the broker's URL and drops
# redbeat_redis_options (our socket timeouts). Copying them under their plain names fixes both.
REDBEAT_SETTINGS = ("redbeat_redis_url", "redbeat_redis_options", "redbeat_redis_use_ssl",
                    "redbeat_key_prefix", "redbeat_lock_timeout")
# Errors that mean "this call did not get through (or we cannot tell)": not fired this tick.
CALL_ERRORS = (redis.RedisError, KombuError, OSError)


def _expose_redbeat_settings(app: Any) -> None:
    for name in REDBEAT_SETTINGS:
        value = app.conf.get(name)
        if value is not None:
            app.conf[name] = value


class FencedEntry(RedBeatSchedulerEntry):
    """A RedBeat entry that is due once per grid slot, whenever the last one was fired."""

    # The entry's meta exactly as read from Redis: the expected value of the next fire's
    # compare-and-set. A str, replaced per instance, never mutated.
    raw_meta = ""

    @classmethod
    def from_data(cls, app: Any, definition: str, meta: str | None) -> FencedEntry:
        fields = cls.decode_definition(definition)
        decoded = cls.decode_meta(meta)
        fields.update(decoded)
        entry = cls(app=app, **fields)
        # celery.ScheduleEntry sets last_run_at = now; the stored value is the truth.
        entry.last_run_at = decoded["last_run_at"]
        entry.raw_meta = meta or ""
        return entry

    @property
    def job(self) -> PeriodicJob | None:
        return JOBS.get(self.name)

    def is_due(self) -> schedstate:
        job = self.job
        if job is None or not self.enabled:
            return super().is_due()
        now = self.default_now()
        wait = (job.next_slot(now) - now).total_seconds()
        fired = self.last_run_at is not None and job.slot_index(self.last_run_at) >= (
            job.slot_index(now)
        )
        return schedstate(not fired, wait)

    def due_slots(self, now: datetime) -> list[datetime]:
        """The slots to fire now, oldest first: the current one and, after a gap, every
        unfired one that started within the backfill window."""
        job = self.job
        assert job is not None
        current = job.slot_index(now)
        if self.last_run_at is None:
            # A first start: the current slot, unless it started longer ago than a message of
            # it may wait (the job's grace, ``expires``) and the job skips missed slots; then
            # nothing fires until the next slot (a 13:11 start fires no 02:10 digest).
            latest = job.slot_start(current)
            if job.missed is Missed.SKIP and (now - latest).total_seconds() > job.expires:
                return []
            return [latest]
        window_start = now - timedelta(seconds=BACKFILL_WINDOW_S)
        first = max(job.slot_index(self.last_run_at) + 1,
                    current - math.ceil(BACKFILL_WINDOW_S / job.every))
        return [job.slot_start(k) for k in range(first, current + 1)
                if k == current or job.slot_start(k) >= window_start]

    @property
    def due_at(self) -> datetime | None:
        # RedBeat scores its sorted set by this; keep it on the grid too.
        job = self.job
        if job is None:
            return super().due_at
        now = self.default_now()
        if self.last_run_at is None:
            return now
        return max(now, job.slot_start(job.slot_index(self.last_run_at) + 1))


@dataclass
class FireBatch:
    """The Redis commands, compare-and-set conditions and journal lines of one tick's fires."""

    commands: list[Command] = field(default_factory=list)
    conditions: list[Condition] = field(default_factory=list)
    journal: list[tuple[str, str]] = field(default_factory=list)  # ("fired", "<job>|<slot>")
    items: list[OutboxItem] = field(default_factory=list)


class FencedRedBeatScheduler(RedBeatScheduler):
    Entry = FencedEntry

    def __init__(self, app: Any, **kwargs: Any) -> None:
        _expose_redbeat_settings(app)
        target: RedisTarget | None = app.conf.get("platform_redis")
        if target is None:  # a bare Celery app: the lock's Redis is RedBeat's URL
            target = RedisTarget(url=app.conf.get("redbeat_redis_url") or app.conf.broker_url)
        super().__init__(app, **kwargs)
        # The beat's own client of the lock's Redis, used for every schedule and lock call:
        # bounded, never-retried calls (adr/0017), under Sentinel too (RedBeat's own
        # Sentinel branch drops the connect timeout and the retry policy); each new
        # connection asks the sentinels for the primary.
        self.client = beat_client(target)
        # With lock_key None, RedBeat's beat_init handler returns at once and RedBeat's own
        # tick() would not touch the lock: this class owns the election.
        self.election_key: str = self.lock_key
        self.lock_key = None
        self.identity = beat_identity(app.conf.get("platform_host_name"))
        self._lease: Lease | None = None
        self._installed = False
        self._clock_logged_at = -math.inf
        self.duties = LeaderDuties(app.conf.get("platform_leader_duties") or (),
                                   interval=float(self.max_interval),
                                   leading=lambda: self._lease is not None and self._lease.valid())

    # --- the election ----------------------------------------------------------------
    @property
    def lease(self) -> Lease:
        if self._lease is None:
            self._lease = Lease(
                self.client, key=self.election_key, timeout=float(self.lock_timeout),
                identity=self.identity, call_timeout=REDIS_SOCKET_TIMEOUT,
            )
        return self._lease

    def setup_schedule(self) -> None:
        """Nothing until elected: a standby never writes the live schedule (RedBeat #198)."""

    def install_default_entries(self, data: Any) -> None:
        """No result backend, so no ``celery.backend_cleanup`` entry to add."""

    def _lead(self) -> bool:
        """Renew or take the lock; True if this beat leads and may schedule now."""
        lease = self.lease
        if lease.held:
            try:
                lease.renew()
            except FenceRefused as exc:
                if exc.reason in STEP_DOWN:
                    raise LeaseLost(f"the beat lock is no longer ours ({exc})") from exc
                return self._renewal_failed(exc)
            except CALL_ERRORS as exc:
                return self._renewal_failed(exc)
            return self._install_once()
        try:
            if (offset := lease.clock_beyond_bound()) is not None:
                self._clock_refused(offset)
                return False
            if not lease.try_acquire():
                return False
        except FenceRefused:  # "clock": the offset moved past the bound since the check
            return False
        except CALL_ERRORS as exc:
            logger.warning("beat: standby cannot reach Redis (%s); trying again", exc)
            lease.forget()
            return False
        logger.info("beat: elected leader %s (lock %s, %.1f s, renewed every %.1f s)",
                    lease.token, self.election_key, lease.timeout, self.max_interval)
        self.duties.start()
        return self._install_once()

    def _clock_refused(self, offset: float) -> None:
        """A standby whose clock is off stays a standby, and says why (once a minute)."""
        now = time.monotonic()
        if now - self._clock_logged_at < CLOCK_LOG_EVERY_S:
            return
        self._clock_logged_at = now
        logger.error(
            "beat: this host's clock is %.1f s %s Redis's; a beat takes the lock only within "
            "%.1f s of it (adr/0044): not leading until the clock is fixed (NTP)",
            abs(offset), "ahead of" if offset > 0 else "behind", self.lease.max_clock_offset)

    def _next_poll(self) -> float:
        """A standby polls once per loop interval, but no later than the holder's lock ends:
        the lock's expiry, not the poll phase, sets the handover."""
        holds_for = self.lease.other_holds_for if not self.lease.held else None
        if holds_for is None:
            return float(self.max_interval)
        return max(POLL_AT_EXPIRY_S, min(float(self.max_interval), holds_for + POLL_AT_EXPIRY_S))

    def _renewal_failed(self, exc: Exception) -> bool:
        lease = self.lease
        if isinstance(exc, FenceRefused) and exc.reason == "late":
            # Late at once, with no delay to blame, is a clock that fell behind while this
            # beat led: give the lock up now rather than wait out the lease (adr/0044).
            try:
                offset = lease.clock_beyond_bound()
            except CALL_ERRORS:
                offset = None
            if offset is not None:
                lease.release()
                raise LeaseLost(
                    f"this host's clock is {abs(offset):.1f} s "
                    f"{'ahead of' if offset > 0 else 'behind'} Redis's, beyond the "
                    f"{lease.max_clock_offset:.1f} s a leader may be: stepping down") from exc
        if not lease.valid():
            raise LeaseLost(f"could not renew the beat lock before it expired: {exc}") from exc
        logger.warning("beat: cannot renew the lock (%s); %.1f s of lease left, not "
                       "scheduling until Redis answers", exc, lease.remaining())
        return False

    def _install_once(self) -> bool:
        """Write the static entries once per leadership, as the one beat allowed to."""
        if self._installed:
            return True
        try:
            self._install_schedule()
        except FenceRefused as exc:
            if exc.reason in STEP_DOWN:
                raise LeaseLost(f"lost the lock while installing the schedule ({exc})") from exc
            logger.warning("beat: schedule not installed (%s); trying again", exc)
            return False
        except CALL_ERRORS as exc:
            logger.warning("beat: schedule not installed (%s); trying again", exc)
            return False
        self._installed = True
        return True

    def _install_schedule(self) -> None:
        """RedBeat's setup_schedule as one fenced write: entries (keeping each one's last
        run), the statics set, and removal of entries no longer configured."""
        conf = self.app.redbeat_conf
        client = self.client
        configured = conf.schedule
        removed = set(client.smembers(conf.statics_key)) - set(configured)
        now = to_timestamp(self.app.now())

        def build(pipe: Any) -> None:
            for name in removed:
                key = self.Entry.generate_key(self.app, name)
                pipe.zrem(conf.schedule_key, key)
                pipe.delete(key)
                pipe.srem(conf.statics_key, name)
            for name, options in configured.items():
                entry = self.Entry(**dict(options, name=name, app=self.app))
                definition = {
                    "name": entry.name, "task": entry.task, "args": entry.args,
                    "kwargs": entry.kwargs, "options": entry.options,
                    "schedule": entry.schedule, "enabled": entry.enabled,
                }
                pipe.hset(entry.key, "definition",
                          json.dumps(definition, cls=RedBeatJSONEncoder))
                pipe.hsetnx(entry.key, "meta",
                            json.dumps({"last_run_at": None}, cls=RedBeatJSONEncoder))
                # Due now: is_due() decides from the last run whether a slot is unfired.
                pipe.zadd(conf.schedule_key, {entry.key: now})
            if configured:
                pipe.sadd(conf.statics_key, *configured)

        self.lease.write(recorded(client, build), journal=[("installed", "-")],
                         what="installing the schedule")

    # --- the schedule ----------------------------------------------------------------
    @property
    def schedule(self) -> dict[str, FencedEntry]:
        """Entries due by the next tick, read in two round trips."""
        conf = self.app.redbeat_conf
        client = self.client
        keys = client.zrangebyscore(conf.schedule_key, 0,
                                    to_timestamp(self.app.now()) + self.max_interval)
        if not keys:
            return {}
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.hmget(key, "definition", "meta")
        entries: dict[str, FencedEntry] = {}
        dangling = []
        for key, (definition, meta) in zip(keys, pipe.execute(), strict=True):
            if not definition:
                dangling.append(key)
                continue
            entry = self.Entry.from_data(self.app, definition, meta)
            entries[entry.name] = entry
        if dangling:
            logger.warning("beat: dropping schedule keys without an entry: %s", dangling)
            try:
                self.lease.write([("ZREM", conf.schedule_key, *dangling)],
                                 journal=[("pruned", "-")],
                                 what="dropping dangling schedule keys")
            except FenceRefused as exc:
                logger.warning("beat: %s", exc)
        return entries

    def tick(self, min: Any = min, **kwargs: Any) -> float:
        if not self._lead():
            return self._next_poll()
        remaining: list[float] = []
        try:
            batch = FireBatch()
            for entry in self.schedule.values():
                self._ensure_lease()
                is_due, next_time_to_run = entry.is_due()
                if is_due:
                    self._collect(entry, batch)
                if next_time_to_run:
                    remaining.append(next_time_to_run)
            self._fire(batch)
            self._publish_outbox()
        except CALL_ERRORS as exc:
            logger.warning("beat: cannot read the schedule or fire (%s); trying again", exc)
        self._ensure_lease()
        return min(remaining + [self.max_interval])

    def _ensure_lease(self) -> None:
        if not self.lease.valid():
            raise LeaseLost(
                f"lease deadline passed ({-self.lease.remaining():.1f} s ago, a frozen or "
                "stalled process): stopping without publishing"
            )

    def maybe_due(self, entry: Any, **kwargs: Any) -> float:
        is_due, next_time_to_run = entry.is_due()
        if is_due:
            self.apply_async(entry)
        return next_time_to_run

    # --- publishing ------------------------------------------------------------------
    @cached_property
    def connection(self) -> Any:
        # The broker, with the beat's bounded calls on top of its own transport options
        # (Sentinel's among them): connect and command timeouts, no retry inside a tick.
        options = {**(self.app.conf.broker_transport_options or {}),
                   **broker_transport_options()}
        return self.app.connection_for_write(transport_options=options)

    @cached_property
    def producer(self) -> Any:
        # Not Celery's: that one first retries connecting up to 100 times (minutes).
        return self.Producer(self.connection, auto_declare=False)

    def _drop_broker_connection(self) -> None:
        self.__dict__.pop("producer", None)
        connection = self.__dict__.pop("connection", None)
        if connection is not None:
            try:
                connection.release()
            except Exception:  # noqa: BLE001 - a broken connection may fail to close too
                pass

    def apply_async(self, entry: Any, producer: Any = None, advance: bool = True,
                    **kwargs: Any) -> Any:
        """Fire every due slot of ``entry`` (tick() fires all entries' slots in one batch)."""
        batch = FireBatch()
        self._collect(entry, batch)
        self._fire(batch)
        self._publish_outbox()
        return None

    def _collect(self, entry: FencedEntry, batch: FireBatch) -> None:
        """Add the entry's due slots to the batch: an outbox item per slot, then the entry's
        last run, on condition that it is still the one read this tick."""
        job = JOBS.get(entry.name)
        if job is None:
            logger.error("beat: %s is in no schedule table; not publishing it", entry.name)
            return
        token = self.lease.token
        slots = entry.due_slots(entry.default_now())
        if not slots:  # a first start past a skip job's slot and its grace
            return
        now = time.time()
        for slot in slots:
            item = OutboxItem(
                job=job.name, task_name=entry.task, slot=slot.isoformat(), fired_by=token,
                task_id=slot_task_id(job.name, slot.isoformat()), fired_at=now,
                expires_s=job.expires, args=list(entry.args or []),
                kwargs={**(entry.kwargs or {}), "slot": slot.isoformat(), "fired_by": token})
            batch.items.append(item)
            batch.commands.append(("RPUSH", OUTBOX_KEY, item.dumps()))
            batch.journal.append(("fired", f"{job.name}|{slot.isoformat()}"))
        meta = json.dumps({"last_run_at": slots[-1],
                           "total_run_count": entry.total_run_count + len(slots)},
                          cls=RedBeatJSONEncoder)
        next_due = to_timestamp(job.slot_start(job.slot_index(slots[-1]) + 1))
        batch.commands += [("HSET", entry.key, "meta", meta),
                           ("ZADD", self.app.redbeat_conf.schedule_key, next_due, entry.key)]
        batch.conditions.append(Condition(entry.key, "meta", entry.raw_meta))

    def _fire(self, batch: FireBatch) -> None:
        """One fenced script for every slot due this tick: all land, or none."""
        if not batch.journal:
            return
        self._ensure_lease()
        try:
            self.lease.write(batch.commands, journal=batch.journal,
                             conditions=batch.conditions, what="firing due slots")
        except FenceRefused as exc:
            if exc.reason in STEP_DOWN:
                raise LeaseLost(f"the beat lock moved before the slots fired ({exc})") from exc
            # late: nothing was written; stale: an earlier copy of this fire (or a newer
            # one) landed. Either way the next tick re-reads the entries and decides.
            logger.warning("beat: slots not fired: %s", exc)
            return
        except CALL_ERRORS:
            # Unknown whether the script ran: the compare-and-set on each last run makes
            # the next tick's retry harmless either way.
            logger.warning("beat: no answer while firing %d slot(s); the next tick re-reads "
                           "the schedule", len(batch.journal))
            raise
        for item in batch.items:
            logger.info("beat: fired %s slot=%s by=%s", item.job, item.slot, item.fired_by)

    def _publish_outbox(self) -> None:
        """Publish every decided fire in the outbox (this leader's and any a predecessor
        left), each with Celery's send_task, then remove it. A publish that fails leaves the
        item for the next tick."""
        raw_items = self.client.lrange(OUTBOX_KEY, 0, -1)
        for raw in raw_items:
            self._ensure_lease()
            try:
                item = OutboxItem.loads(raw)
            except (ValueError, TypeError) as exc:
                logger.error("beat: dropping an unreadable outbox item (%s): %r", exc, raw[:200])
                self.client.lrem(OUTBOX_KEY, 1, raw)
                continue
            if time.time() - item.fired_at > BACKFILL_WINDOW_S:
                # Decided longer ago than any handover takes: as for a slot no beat fired,
                # the job's missed-slot policy covers it (a catch-up job's next run does).
                logger.warning("beat: dropping %s slot=%s, decided %.0f s ago by %s and never "
                               "published", item.job, item.slot, time.time() - item.fired_at,
                               item.fired_by)
                self.client.lrem(OUTBOX_KEY, 1, raw)
                continue
            # A message may wait this long in the queue from when it is published (the
            # successor of a leader that died before publishing gives it the same time).
            expires = datetime.fromtimestamp(time.time() + item.expires_s, tz=UTC)
            try:
                self.app.send_task(
                    item.task_name, args=item.args, kwargs=item.kwargs, task_id=item.task_id,
                    expires=expires, producer=self.producer, retry=False,
                    headers={QUEUED_AT_HEADER: time.time()})
            except CALL_ERRORS:
                logger.warning("beat: could not publish %s slot=%s; kept in the outbox for "
                               "the next tick", item.job, item.slot)
                self._drop_broker_connection()
                raise
            self.client.lrem(OUTBOX_KEY, 1, raw)
            if item.fired_by != self.lease.token:
                logger.info("beat: published %s slot=%s fired by %s (a previous leader)",
                            item.job, item.slot, item.fired_by)

    def close(self) -> None:
        self.duties.stop()
        if self._lease is not None and self._lease.held:
            logger.info("beat: releasing the lock")
            self._lease.release()
        super().close()

    @property
    def info(self) -> str:
        return (f"       . redis -> {self.app.redbeat_conf.redis_url.split('@')[-1]}\n"
                f"       . lock -> `{self.election_key}` {self.lock_timeout} s, "
                f"renewed every {self.max_interval} s; backfill {BACKFILL_WINDOW_S:.0f} s")
