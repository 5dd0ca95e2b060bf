"""Each side effect of a periodic slot happens once: a second run of the slot skips what the
first did (a retry, a second delivery, a takeover of a failed or lost run).

Against the test database; the digest's mail server is a backend that fails on purpose.
"""

from __future__ import annotations

from collections import Counter

import pytest
from django.core import mail
from django.utils import timezone

from apps.reports import services
from apps.reports.models import JobEffect, JobRun
from scheduler.tables import JOBS
from tests.reports.mail_backends import FailsAfterFirstMessage

pytestmark = pytest.mark.django_db
DIGEST, ROLLUP, PURGE = "reports.daily_digest", "reports.usage_rollup", "reports.retention_purge"


def deliver(job: str, slot, task_id: str) -> str:  # type: ignore[no-untyped-def]
    return services.job_run(job_name=job, slot=slot.isoformat(), fired_by=f"beat-{task_id}",
                            task_id=task_id, worker="w@h")


def test_a_digest_slot_delivered_again_after_a_mail_failure_mails_each_user_once(
    django_user_model, settings
):
    for n in range(3):
        django_user_model.objects.create_user(username=f"u{n}", email=f"u{n}@example.com",
                                              password="pw-user-12345")
    slot = JOBS[DIGEST].slot_at(timezone.now())
    settings.EMAIL_BACKEND = "tests.reports.mail_backends.FailsAfterFirstMessage"
    FailsAfterFirstMessage.accepted = 0

    # The mail server fails after the first message: the run fails with one mail sent.
    with pytest.raises(ConnectionError):
        deliver(DIGEST, slot, "first")
    assert [m.to for m in mail.outbox] == [["u0@example.com"]]
    run = JobRun.objects.get(job=DIGEST, slot=slot)
    assert run.outcome == "failed"

    # The slot is delivered again (a second beat's message: another task id); the server is
    # back. It takes over the failed run and mails only the users not mailed yet.
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    assert deliver(DIGEST, slot, "second") == "done"
    per_user = Counter(m.to[0] for m in mail.outbox)
    assert per_user == {"u0@example.com": 1, "u1@example.com": 1, "u2@example.com": 1}
    run.refresh_from_db()
    assert run.outcome == "done" and run.task_id == "second"
    assert "1 already sent by an earlier attempt" in run.detail
    # A third delivery of the finished slot is fenced off: nothing more is sent.
    assert deliver(DIGEST, slot, "third") == "duplicate"
    assert len(mail.outbox) == 3
    assert JobEffect.objects.filter(run=run).count() == 3


def test_a_lost_run_is_taken_over_and_its_recorded_effects_are_skipped():
    slot = JOBS[ROLLUP].slot_at(timezone.now())
    assert deliver(ROLLUP, slot, "a") == "done"
    run = JobRun.objects.get(job=ROLLUP, slot=slot)
    # As if its pool process died after writing the rows: the reconciler marked it lost.
    JobRun.objects.filter(pk=run.pk).update(outcome="lost")
    assert deliver(ROLLUP, slot, "b") == "done"
    run.refresh_from_db()
    assert run.task_id == "b" and "already written by an earlier attempt" in run.detail
    assert JobEffect.objects.filter(run=run).count() == 1


def test_a_purge_taken_over_after_a_failure_does_not_purge_twice():
    slot = JOBS[PURGE].slot_at(timezone.now())
    assert deliver(PURGE, slot, "a") == "done"
    run = JobRun.objects.get(job=PURGE, slot=slot)
    JobRun.objects.filter(pk=run.pk).update(outcome="failed")
    assert deliver(PURGE, slot, "b") == "done"
    run.refresh_from_db()
    assert run.detail == "already purged by an earlier attempt of this slot"
