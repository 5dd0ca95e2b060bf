"""The schedule tables, one per system, each entry saying why and when.

Intervals come from the environment so tests can run every job every second or two; offsets
stagger the jobs so they never start in the same minute. Jobs name their tasks by the stable
names in celery_conf/names.py: nothing here imports an app.
"""

from __future__ import annotations

from celery_conf import names
from config.env import env_int

from .jobs import Missed, PeriodicJob

HOUR = 3600
DAY = 24 * HOUR

REPORTS: tuple[PeriodicJob, ...] = (
    # Hourly usage roll-up for the usage chart and the digest. At :05, so requests that
    # finished just before the hour are in. A missed hour is caught up by the next run (one
    # run recomputes every hour since the last finished one): the chart must not have holes.
    PeriodicJob(
        name=names.REPORTS_USAGE_ROLLUP,
        every=env_int("REPORTS_ROLLUP_EVERY_S", HOUR),
        offset=5 * 60,
        missed=Missed.CATCH_UP,
        max_late=50 * 60,
        why="hourly usage roll-up per user; missed hours caught up by the next run",
    ),
    # Nightly digest e-mail per user, at 02:10 UTC, off the hour's roll-up minute. A missed
    # night is skipped: a digest that arrives in the afternoon is noise, and the next one
    # covers its own day.
    PeriodicJob(
        name=names.REPORTS_DAILY_DIGEST,
        every=env_int("REPORTS_DIGEST_EVERY_S", DAY),
        offset=2 * HOUR + 10 * 60,
        missed=Missed.SKIP,
        max_late=6 * HOUR,
        why="nightly digest e-mail per user; a missed night is skipped",
    ),
    # Retention purge every 15 minutes, at :02, :17, :32, :47. Skipping a missed slot loses
    # nothing: the next purge deletes everything past the cutoff anyway.
    PeriodicJob(
        name=names.REPORTS_RETENTION_PURGE,
        every=env_int("REPORTS_PURGE_EVERY_S", 15 * 60),
        offset=2 * 60,
        missed=Missed.SKIP,
        max_late=10 * 60,
        why="retention purge of old run records and roll-ups; a missed slot is skipped",
    ),
)

DURABILITY: tuple[PeriodicJob, ...] = (
    # The reconciler, every minute at :30 (off the reports' minutes). The database is the
    # record: documents left queued or processing with no message and no live run behind them
    # are re-enqueued, runs whose process died are marked lost. A missed slot is skipped: the
    # next one does the same work.
    PeriodicJob(
        name=names.PLATFORM_RECONCILE,
        every=env_int("PLATFORM_RECONCILE_EVERY_S", 60),
        offset=30,
        missed=Missed.SKIP,
        max_late=50,
        why="re-enqueue documents with no live work behind them; mark dead runs lost",
    ),
)

TABLES: dict[str, tuple[PeriodicJob, ...]] = {"reports": REPORTS, "durability": DURABILITY}

JOBS: dict[str, PeriodicJob] = {job.name: job for table in TABLES.values() for job in table}
