"""RedBeat, elected and fenced: one beat publishes, only while its lease is provably live.

Differences from ``redbeat.RedBeatScheduler``, each closing a hazard in FIELD-NOTES.md:

- The lock is taken in ``tick()``, not by RedBeat's ``beat_init`` handler, which blocks in
  ``lock.acquire()`` and dies on the first Redis error; a standby here simply polls once per
  loop interval and rides out a Redis restart.
- Static entries are written only by the beat that has just won the lock, never in
  ``setup_schedule()`` (RedBeat #198: a standby started by a rolling deploy rewrote the live
  schedule).
- Every publish first checks the lease's local deadline, so a leader that was frozen past its
  lock timeout publishes nothing when it wakes; a leader that cannot renew stops and exits,
  and the supervisor restarts it as a standby.
- Slots sit on the job's fixed grid (scheduler/jobs.py); each message carries ``slot`` and
  ``fired_by``, and the reports' run record is unique per (job, slot): the database fence
  behind the lock, for the moments no lock can cover.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import redis
from celery.schedules import schedstate
from redbeat.schedulers import RedBeatScheduler, RedBeatSchedulerEntry, get_redis

from .jobs import PeriodicJob
from .lease import Lease, beat_identity
from .tables import JOBS

logger = logging.getLogger("celery.beat")


class LeaseLost(Exception):
    """The lock is gone or unrenewable past its deadline: this beat must stop scheduling."""


# RedBeat asks "is this key configured?" by exact name, so under Django's CELERY_ namespace it
# misses CELERY_REDBEAT_REDIS_URL: it warns, falls back to the broker's URL and drops
# redbeat_redis_options (our socket timeouts). Copying them under their plain names fixes both.
REDBEAT_SETTINGS = ("redbeat_redis_url", "redbeat_redis_options", "redbeat_key_prefix",
                    "redbeat_lock_timeout")


def _expose_redbeat_settings(app: Any) -> None:
    for name in REDBEAT_SETTINGS:
        value = app.conf.get(name)
        if value is not None:
            app.conf[name] = value


class FencedEntry(RedBeatSchedulerEntry):
    """A RedBeat entry that is due once per grid slot, whenever the last one was fired."""

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


class FencedRedBeatScheduler(RedBeatScheduler):
    Entry = FencedEntry

    def __init__(self, app: Any, **kwargs: Any) -> None:
        _expose_redbeat_settings(app)
        super().__init__(app, **kwargs)
        # With lock_key None, RedBeat's beat_init handler returns at once and RedBeat's own
        # tick() would not touch the lock: this class owns the election.
        self.election_key: str = self.lock_key
        self.lock_key = None
        self.identity = beat_identity()
        self._lease: Lease | None = None

    # --- the election ----------------------------------------------------------------
    @property
    def lease(self) -> Lease:
        if self._lease is None:
            self._lease = Lease(
                get_redis(self.app), key=self.election_key, timeout=float(self.lock_timeout),
                identity=self.identity,
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
            except redis.exceptions.LockError as exc:
                raise LeaseLost(f"the beat lock is no longer ours ({exc})") from exc
            except redis.RedisError as exc:
                if not lease.valid():
                    raise LeaseLost(
                        f"could not renew the beat lock before it expired: {exc}") from exc
                logger.warning("beat: cannot renew the lock (%s); %.1f s of lease left, not "
                               "scheduling until Redis answers", exc, lease.remaining())
                return False
            return True
        try:
            if not lease.try_acquire():
                return False
            self._on_elected()
        except redis.RedisError as exc:
            logger.warning("beat: standby cannot reach Redis (%s); trying again", exc)
            lease.forget()
            return False
        return True

    def _on_elected(self) -> None:
        lease = self.lease
        # RedBeat's setup: write the static entries (keeping each one's last run), drop those
        # no longer configured. Only now, as the one beat allowed to change the schedule.
        RedBeatScheduler.setup_schedule(self)
        lease.record_leadership()
        logger.info("beat: elected leader %s (lock %s, %.1f s, renewed every %.1f s)",
                    lease.token, self.election_key, lease.timeout, self.max_interval)

    def tick(self, min: Any = min, **kwargs: Any) -> float:
        if not self._lead():
            return self.max_interval
        remaining: list[float] = []
        try:
            for entry in self.schedule.values():
                self._ensure_lease()
                next_time_to_run = self.maybe_due(entry, **self._maybe_due_kwargs)
                if next_time_to_run:
                    remaining.append(next_time_to_run)
        except redis.RedisError as exc:
            logger.warning("beat: cannot read the schedule (%s); trying again", exc)
        self._ensure_lease()
        return min(remaining + [self.max_interval])

    def _ensure_lease(self) -> None:
        if not self.lease.valid():
            raise LeaseLost(
                f"lease deadline passed ({-self.lease.remaining():.1f} s ago, a frozen or "
                "stalled process): stopping without publishing"
            )

    # --- publishing ------------------------------------------------------------------
    def apply_async(self, entry: Any, producer: Any = None, advance: bool = True,
                    **kwargs: Any) -> Any:
        if not self.lease.valid():
            logger.error("beat: not publishing %s: the lease is not live", entry.name)
            return None
        job = JOBS.get(entry.name)
        if job is None or not advance:
            return super().apply_async(entry, producer=producer, advance=advance, **kwargs)
        slot = job.slot_at(entry.default_now())
        # The slot is recorded as fired before the message is sent, as RedBeat does: a crash
        # between the two loses this slot (the job's missed policy covers it) but never
        # fires it twice.
        entry._next_instance(last_run_at=slot)
        fired = entry.__class__(**dict(entry, kwargs={
            **(entry.kwargs or {}), "slot": slot.isoformat(), "fired_by": self.lease.token,
        }))
        result = super().apply_async(fired, producer=producer, advance=False, **kwargs)
        logger.info("beat: fired %s slot=%s by=%s", job.name, slot.isoformat(), self.lease.token)
        return result

    def close(self) -> None:
        if self._lease is not None and self._lease.held:
            logger.info("beat: releasing the lock")
            self._lease.release()
        super().close()

    @property
    def info(self) -> str:
        return (f"       . redis -> {self.app.redbeat_conf.redis_url.split('@')[-1]}\n"
                f"       . lock -> `{self.election_key}` {self.lock_timeout} s, "
                f"renewed every {self.max_interval} s")
