"""Which slots the beat fires on a first start (no last run recorded): a slot missed by more
than its grace follows the job's missed-slot policy. Pure logic: FencedEntry.due_slots."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from celery_conf import names
from scheduler.jobs import Missed
from scheduler.redbeat import FencedEntry
from scheduler.tables import JOBS


def first_start(name: str) -> FencedEntry:
    entry = FencedEntry.__new__(FencedEntry)  # only the name and the last run matter here
    entry.name, entry.last_run_at = name, None
    return entry


def test_a_first_start_at_1311_fires_no_0210_digest_and_the_next_night_fires():
    at_1311 = datetime(2026, 12, 3, 13, 11, tzinfo=UTC)
    assert first_start(names.REPORTS_DAILY_DIGEST).due_slots(at_1311) == []
    just_after = datetime(2026, 12, 4, 2, 10, 30, tzinfo=UTC)
    assert first_start(names.REPORTS_DAILY_DIGEST).due_slots(just_after) == [
        datetime(2026, 12, 4, 2, 10, tzinfo=UTC)]


@pytest.mark.parametrize("name", sorted(JOBS))
def test_every_job_follows_its_policy_past_its_grace_on_a_first_start(name):
    job = JOBS[name]
    slot = job.slot_start(job.slot_index(datetime(2026, 12, 3, 13, 11, tzinfo=UTC)))
    within = slot + timedelta(seconds=min(job.expires, job.every) * 0.5)
    assert first_start(name).due_slots(within) == [slot]
    past = slot + timedelta(seconds=job.expires + 1)
    if past >= job.next_slot(slot):
        return  # a grace as long as the interval: never missed past it
    expected = [] if job.missed is Missed.SKIP else [slot]
    assert first_start(name).due_slots(past) == expected
