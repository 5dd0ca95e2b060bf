"""The slot grid: every beat names a slot the same way, whenever it fires it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduler.jobs import MIN_EXPIRES_SECONDS, Missed, PeriodicJob
from scheduler.settings import beat_schedule, beat_settings
from scheduler.tables import JOBS

HOURLY_AT_05 = PeriodicJob(name="j", every=3600, offset=300, missed=Missed.SKIP,
                           max_late=3000, why="")


def at(h: int, m: int, s: float = 0) -> datetime:
    return datetime(2030, 1, 1, h, m, tzinfo=UTC) + timedelta(seconds=s)


def test_any_moment_inside_a_slot_names_the_same_slot():
    slots = {HOURLY_AT_05.slot_at(at(10, 5) + timedelta(seconds=x)) for x in (0, 1, 1800, 3599.9)}
    assert slots == {at(10, 5)}
    assert HOURLY_AT_05.slot_at(at(10, 4, 59.9)) == at(9, 5)
    assert HOURLY_AT_05.next_slot(at(10, 30)) == at(11, 5)


def test_offsets_reduce_modulo_the_interval_so_short_test_intervals_still_work():
    job = PeriodicJob(name="j", every=2, offset=300, missed=Missed.SKIP, max_late=10, why="")
    assert job.slot_at(at(10, 0, 1.5)) == at(10, 0)
    assert job.expires == MIN_EXPIRES_SECONDS  # never below a worker's pick-up latency


def test_expiry_never_outlives_the_next_slot():
    assert HOURLY_AT_05.expires == 3000
    assert PeriodicJob(name="j", every=900, offset=0, missed=Missed.SKIP, max_late=3600,
                       why="").expires == 810


def test_a_job_needs_a_positive_interval():
    with pytest.raises(ValueError):
        PeriodicJob(name="j", every=0, offset=0, missed=Missed.SKIP, max_late=1, why="")


def test_the_reports_table_staggers_its_jobs_and_declares_a_policy_for_each():
    by_name = {j.name: j for j in JOBS.values()}
    assert by_name["reports.usage_rollup"].missed is Missed.CATCH_UP
    assert by_name["reports.daily_digest"].missed is Missed.SKIP
    assert by_name["reports.retention_purge"].missed is Missed.SKIP
    minutes = [(j.phase // 60) % 60 for j in JOBS.values()]
    assert len(set(minutes)) == len(minutes), "two jobs start in the same minute"
    entries = beat_schedule()
    assert set(entries) == set(JOBS)
    assert all(e["options"]["expires"] > 0 and e["task"] == n for n, e in entries.items())


def test_the_lock_must_outlive_several_renewals(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("BEAT_LOOP_INTERVAL_S", "2")
    monkeypatch.setenv("BEAT_LOCK_TIMEOUT_S", "5")
    with pytest.raises(ValueError):
        beat_settings(redis_url="redis://x")
    monkeypatch.setenv("BEAT_LOCK_TIMEOUT_S", "6")
    conf = beat_settings(redis_url="redis://x")
    assert conf["CELERY_REDBEAT_REDIS_URL"] == "redis://x"
    assert conf["CELERY_REDBEAT_LOCK_TIMEOUT"] == 6.0
