"""The slot fence and the jobs' work, against the test database (no broker involved).

The process tests in tests/scheduler and test_periodic_runs.py prove the same fence with
real beats firing real messages.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core import mail
from django.core.management import CommandError, call_command
from django.utils import timezone

from apps.documents.models import Document
from apps.reports import services
from apps.reports.models import JobRun, UsageRollup
from scheduler.tables import JOBS

pytestmark = pytest.mark.django_db
ROLLUP, DIGEST, PURGE = "reports.usage_rollup", "reports.daily_digest", "reports.retention_purge"


def slot_of(job: str, when: datetime | None = None) -> datetime:
    return JOBS[job].slot_at(when or timezone.now())


def run(job: str, slot: datetime | None, *, task_id: str = "t") -> str:
    return services.job_run(job_name=job, slot=slot.isoformat() if slot else None,
                            fired_by="test", task_id=task_id, worker="w@h")


@pytest.fixture
def user(django_user_model):  # type: ignore[no-untyped-def]
    return django_user_model.objects.create_user(username="u", email="u@example.com",
                                                 password="pw-user-12345")


def document(owner, created_at: datetime, words: int) -> Document:  # type: ignore[no-untyped-def]
    doc = Document.objects.create(owner=owner, title=f"d{words}", source="paste", content="x",
                                  size_bytes=1, word_count=words)
    Document.objects.filter(pk=doc.pk).update(created_at=created_at)
    return doc


def test_a_slot_fired_twice_runs_once_and_counts_the_second_delivery():
    slot = slot_of(PURGE)
    assert run(PURGE, slot, task_id="a") == "done"
    assert run(PURGE, slot, task_id="b") == "duplicate"
    rows = JobRun.objects.filter(job=PURGE)
    assert rows.count() == 1
    assert rows.get().task_id == "a" and rows.get().duplicates == 1


def test_manual_runs_never_take_or_block_a_scheduled_slot():
    slot = slot_of(PURGE)
    assert run(PURGE, None, task_id="m1") == "done" and run(PURGE, None, task_id="m2") == "done"
    assert run(PURGE, slot) == "done"
    kinds = sorted(JobRun.objects.values_list("kind", flat=True))
    assert kinds == ["manual", "manual", "scheduled"]


def test_a_catch_up_job_covers_every_slot_since_its_last_finished_run():
    job = JOBS[ROLLUP]
    first = slot_of(ROLLUP) - 10 * job.period
    run(ROLLUP, first)
    later = first + 4 * job.period  # three slots nobody fired
    run(ROLLUP, later)
    caught_up = JobRun.objects.get(job=ROLLUP, slot=later)
    assert caught_up.covers_from == first + job.period


def test_a_skip_job_covers_its_own_slot_only():
    job = JOBS[PURGE]
    first = slot_of(PURGE) - 10 * job.period
    run(PURGE, first)
    run(PURGE, first + 4 * job.period)
    assert JobRun.objects.get(job=PURGE, slot=first + 4 * job.period).covers_from == (
        first + 4 * job.period)


def test_the_rollup_counts_each_period_and_recomputing_it_changes_nothing(user):
    job = JOBS[ROLLUP]
    slot = slot_of(ROLLUP)
    period = slot - job.period
    document(user, period + timedelta(seconds=1), 10)
    document(user, period + timedelta(seconds=2), 5)
    document(user, slot + timedelta(seconds=1), 99)  # the next period: not this run's
    run(ROLLUP, slot)
    rows = list(UsageRollup.objects.values_list("period_start", "documents", "words"))
    assert rows == [(period, 2, 15)]
    JobRun.objects.all().delete()
    run(ROLLUP, slot)
    assert list(UsageRollup.objects.values_list("period_start", "documents", "words")) == rows


def test_the_digest_mails_each_user_once_with_the_slot_in_a_header(user, django_user_model):
    django_user_model.objects.create_user(username="no-mail", password="pw-user-12345")
    slot = slot_of(DIGEST)
    document(user, slot - timedelta(seconds=1), 7)
    run(DIGEST, slot)
    run(DIGEST, slot)  # fired again: fenced, no second e-mail
    assert [m.to for m in mail.outbox] == [["u@example.com"]]
    message = mail.outbox[0]
    assert message.extra_headers["X-Platform-Slot"] == slot.isoformat()
    assert "1, 7 words" in message.body


def test_a_failed_run_is_taken_over_by_its_retry(monkeypatch: pytest.MonkeyPatch):
    slot = slot_of(PURGE)

    def broken(job, run):  # type: ignore[no-untyped-def]
        raise RuntimeError("disk full")

    monkeypatch.setitem(services.WORK, PURGE, broken)
    with pytest.raises(RuntimeError):
        run(PURGE, slot)
    assert JobRun.objects.get(job=PURGE).outcome == "failed"
    monkeypatch.undo()
    assert run(PURGE, slot) == "done"
    assert JobRun.objects.get(job=PURGE).outcome == "done"


def test_the_purge_deletes_old_finished_runs_and_keeps_running_ones(settings):
    old = timezone.now() - timedelta(days=settings.REPORTS_RUN_RETENTION_DAYS + 1)
    for outcome in ("done", "running"):
        JobRun.objects.create(job=ROLLUP, kind="scheduled", slot=old, covers_from=old,
                              outcome=outcome)
        old -= timedelta(hours=1)
    run(PURGE, slot_of(PURGE))
    assert sorted(JobRun.objects.values_list("outcome", flat=True)) == ["done", "running"]
    assert JobRun.objects.filter(job=ROLLUP).get().outcome == "running"


def test_an_unknown_job_is_a_clear_error_and_queues_nothing():
    with pytest.raises(CommandError, match="no periodic job named"):
        call_command("run_periodic_job", "reports.nope")
    with pytest.raises(CommandError, match="--wait"):
        call_command("run_periodic_job", ROLLUP, "--wait", "-1")
    assert not JobRun.objects.exists()


def test_the_page_needs_a_login_and_lists_runs(client, user):
    assert client.get("/reports/").status_code == 302
    run(PURGE, slot_of(PURGE))
    client.force_login(user)
    response = client.get("/reports/")
    assert response.status_code == 200
    body = response.content.decode()
    assert 'data-job="reports.retention_purge"' in body
    assert "reports.usage_rollup" in body  # every job listed with its next slot


def test_slots_are_stored_as_given_in_utc():
    slot = datetime(2030, 1, 1, 10, 5, tzinfo=UTC)
    run(ROLLUP, slot)
    assert JobRun.objects.get().slot == slot


def test_a_manual_run_delivered_again_is_the_same_run():
    assert run(PURGE, None, task_id="manual-1") == "done"
    assert run(PURGE, None, task_id="manual-1") == "duplicate"
    manual = JobRun.objects.get(job=PURGE, kind="manual")
    assert manual.duplicates == 1 and manual.attempts == 1


def test_a_failed_finish_is_retried_and_the_task_retry_takes_its_own_run_over(monkeypatch):
    import os

    from django.db import DatabaseError

    slot = slot_of(PURGE)
    real_finish = services.job_run_finish
    calls = {"n": 0}

    def finish_fails_after_the_work(**kwargs):  # the database goes away after the commit
        calls["n"] += 1
        raise DatabaseError("database is locked")

    monkeypatch.setattr(services, "job_run_finish", finish_fails_after_the_work)
    with pytest.raises(DatabaseError):
        services.job_run(job_name=PURGE, slot=slot.isoformat(), fired_by="test", task_id="t1",
                         worker="w@h", worker_pid=os.getppid(), pool_pid=os.getpid())
    assert JobRun.objects.get(job=PURGE).outcome == "running"
    monkeypatch.setattr(services, "job_run_finish", real_finish)
    # Celery's retry: same task id, same pool process. Not a duplicate: the run is finished.
    again = services.job_run(job_name=PURGE, slot=slot.isoformat(), fired_by="test",
                             task_id="t1", worker="w@h", worker_pid=os.getppid(),
                             pool_pid=os.getpid())
    final = JobRun.objects.get(job=PURGE)
    assert again == "done" and final.outcome == "done" and final.attempts == 2
    assert "already purged by an earlier attempt" in final.detail


def test_a_run_whose_attempts_keep_dying_is_given_up_not_repeated():
    slot = slot_of(PURGE)
    assert run(PURGE, slot, task_id="a") == "done"
    JobRun.objects.filter(job=PURGE).update(outcome="lost", attempts=services.MAX_ATTEMPTS)
    assert run(PURGE, slot, task_id="a") == "duplicate"
    given_up = JobRun.objects.get(job=PURGE)
    assert given_up.outcome == "failed" and "given up after 3 attempts" in given_up.detail


def test_job_run_finish_retries_a_database_error(monkeypatch):
    from django.db import DatabaseError

    slot = slot_of(PURGE)
    assert run(PURGE, slot) == "done"
    row = JobRun.objects.get(job=PURGE)
    real_filter = JobRun.objects.filter
    failures = {"left": 2}

    class Flaky:
        def __init__(self, qs):  # type: ignore[no-untyped-def]
            self.qs = qs

        def __getattr__(self, name):  # type: ignore[no-untyped-def]
            return getattr(self.qs, name)

        def update(self, **kwargs):  # type: ignore[no-untyped-def]
            if failures["left"]:
                failures["left"] -= 1
                raise DatabaseError("database is locked")
            return self.qs.update(**kwargs)

    monkeypatch.setattr(JobRun.objects, "filter", lambda *a, **k: Flaky(real_filter(*a, **k)))
    monkeypatch.setattr(services.time, "sleep", lambda s: None)
    services.job_run_finish(run_id=row.pk, outcome="failed", detail="x")
    monkeypatch.undo()
    assert JobRun.objects.get(pk=row.pk).outcome == "failed" and failures["left"] == 0
