"""Writes for reports: the slot fence around every periodic run, and the jobs' work.

``job_run`` is what every periodic task calls. It inserts the run record first; the unique
(job, slot) constraint on scheduled runs is the fence, so a slot fired twice does its work
once. The job's missed-slot policy then sets the run's window: a catch-up job covers every
slot since its last finished run, a skip job only its own slot.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import mail
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone
from redis.exceptions import RedisError

from apps.documents.models import Document
from celery_conf import names
from celery_conf.liveness import worker_alive
from scheduler.jobs import Missed, PeriodicJob
from scheduler.tables import JOBS

from .live import run_publish
from .models import JobRun, UsageRollup

logger = logging.getLogger(__name__)

Kind = JobRun.Kind
Outcome = JobRun.Outcome
# A catch-up run after a long outage covers at most this many slots (a week of hours);
# anything older is left to a manual run rather than one huge transaction.
MAX_CATCH_UP_SLOTS = 168
# Titles listed in one digest; the rest are counted.
DIGEST_MAX_TITLES = 20


class UnknownJob(ValueError):
    pass


def job_get(name: str) -> PeriodicJob:
    try:
        return JOBS[name]
    except KeyError:
        raise UnknownJob(
            f"no periodic job named {name!r}; known: {', '.join(sorted(JOBS))}") from None


def job_run(
    *, job_name: str, slot: str | None, fired_by: str, task_id: str, worker: str,
    worker_pid: int | None = None,
) -> str:
    """Run one delivery of a periodic job; returns the outcome ("done", or "duplicate")."""
    job = job_get(job_name)
    job_runs_mark_lost(job=job)
    run = job_run_begin(
        job=job, slot=datetime.fromisoformat(slot) if slot else None, fired_by=fired_by,
        task_id=task_id, worker=worker, worker_pid=worker_pid,
    )
    if run is None:
        return "duplicate"
    run_publish(run_id=run.pk)  # the live pages show it started (apps/reports/live.py)
    # The witness the failure tests count: one line per slot whose work actually runs.
    logger.info("reports: running %s %s slot=%s covers_from=%s", job.name, run.kind,
                run.slot.isoformat(), run.covers_from.isoformat())
    try:
        detail = WORK[job.name](job, run)
    except Exception as exc:
        job_run_finish(run_id=run.pk, outcome=Outcome.FAILED, detail=f"{type(exc).__name__}: {exc}")
        raise
    job_run_finish(run_id=run.pk, outcome=Outcome.DONE, detail=detail)
    return Outcome.DONE


def job_run_begin(
    *, job: PeriodicJob, slot: datetime | None, fired_by: str, task_id: str, worker: str,
    worker_pid: int | None = None,
) -> JobRun | None:
    """Insert the run record; None if this scheduled slot already ran or is running."""
    now = timezone.now()
    if slot is None:  # by hand: never a grid slot, never fenced against one
        return JobRun.objects.create(
            job=job.name, kind=Kind.MANUAL, slot=now, covers_from=now, fired_by=fired_by,
            task_id=task_id, worker=worker, worker_pid=worker_pid,
        )
    fields = {"covers_from": _covers_from(job, slot), "fired_by": fired_by, "task_id": task_id,
              "worker": worker, "worker_pid": worker_pid}
    try:
        with transaction.atomic():
            return JobRun.objects.create(job=job.name, kind=Kind.SCHEDULED, slot=slot, **fields)
    except IntegrityError:
        pass
    # A failed run may be taken over by its own retry; anything else is a second delivery.
    retaken = JobRun.objects.filter(
        job=job.name, kind=Kind.SCHEDULED, slot=slot, outcome=Outcome.FAILED
    ).update(outcome=Outcome.RUNNING, started_at=now, finished_at=None, **fields)
    if retaken:
        return JobRun.objects.get(job=job.name, kind=Kind.SCHEDULED, slot=slot)
    JobRun.objects.filter(job=job.name, kind=Kind.SCHEDULED, slot=slot).update(
        duplicates=F("duplicates") + 1
    )
    logger.warning("reports: %s slot %s fired again (by %s); the fence kept it to one run",
                   job.name, slot.isoformat(), fired_by)
    return None


def job_runs_mark_lost(*, job: PeriodicJob) -> int:
    """Mark this job's runs whose worker died mid-run as lost; returns how many.

    A SIGKILLed or OOM-killed worker leaves its run ``running``; its message, redelivered
    after the visibility timeout, is turned away by the fence (or has expired). The job's next
    run notices, so the page never shows a dead run as running. A catch-up job's next run
    covers the lost run's window anyway (only finished runs end a window); a skip job's slot
    stays lost, which is its declared policy.
    """
    running = JobRun.objects.filter(job=job.name, outcome=Outcome.RUNNING,
                                    worker_pid__isnull=False).values_list("pk", "worker",
                                                                          "worker_pid")
    lost = 0
    for run_id, worker, pid in running:
        try:
            alive = worker_alive(worker, pid)
        except RedisError:
            return lost  # Redis cannot tell: leave the records as they are
        if not alive:
            lost += JobRun.objects.filter(pk=run_id, outcome=Outcome.RUNNING).update(
                outcome=Outcome.LOST, finished_at=timezone.now(),
                detail=f"worker {worker} (pid {pid}) died mid-run; "
                       + ("the next run covers its window" if job.missed is Missed.CATCH_UP
                          else "its slot is skipped, per the job's policy"))
    return lost


def _covers_from(job: PeriodicJob, slot: datetime) -> datetime:
    if job.missed is Missed.SKIP:
        return slot
    last_done = (
        JobRun.objects.filter(job=job.name, kind=Kind.SCHEDULED, outcome=Outcome.DONE,
                              slot__lt=slot)
        .order_by("-slot").values_list("slot", flat=True).first()
    )
    if last_done is None:
        return slot
    earliest = slot - job.period * (MAX_CATCH_UP_SLOTS - 1)
    return max(last_done + job.period, earliest)


def job_run_finish(*, run_id: int, outcome: str, detail: str = "") -> None:
    JobRun.objects.filter(pk=run_id).update(
        outcome=outcome, finished_at=timezone.now(), detail=detail[:2000]
    )
    run_publish(run_id=run_id)  # and how it ended


def job_trigger(*, job_name: str, requested_by: str) -> str:
    """Queue a manual run of a job; returns the task id. Recorded as a manual run."""
    from .tasks import TASKS  # the task module imports this one

    job = job_get(job_name)
    result = TASKS[job.name].apply_async(kwargs={"slot": None, "fired_by": requested_by})
    return str(result.id)


# --- the jobs' work: each takes the job and its run, returns a line for the run record -----
def usage_rollup(job: PeriodicJob, run: JobRun) -> str:
    """Recompute each user's documents and words for every period the run covers.

    The run for slot S covers the period that ended at S; a catch-up run also the periods
    before it back to ``covers_from``. Recomputing from the documents makes it idempotent.
    """
    first = job.slot_at(run.covers_from - job.period)
    end = run.slot if run.kind == Kind.SCHEDULED else job.next_slot(run.slot)
    totals: dict[tuple[int, datetime], list[int]] = defaultdict(lambda: [0, 0])
    documents = Document.objects.filter(created_at__gte=first, created_at__lt=end)
    for owner_id, created_at, words in documents.values_list("owner_id", "created_at",
                                                             "word_count"):
        bucket = totals[(owner_id, job.slot_at(created_at))]
        bucket[0] += 1
        bucket[1] += words or 0
    with transaction.atomic():
        UsageRollup.objects.filter(period_start__gte=first, period_start__lt=end).delete()
        UsageRollup.objects.bulk_create(
            UsageRollup(user_id=owner_id, period_start=period, period_seconds=job.every,
                        documents=count, words=words)
            for (owner_id, period), (count, words) in totals.items()
        )
    periods = round((end - first) / job.period)
    return f"{periods} period(s) from {first:%Y-%m-%d %H:%M:%S}, {len(totals)} row(s)"


def daily_digest(job: PeriodicJob, run: JobRun) -> str:
    """One e-mail per active user with an address: their documents of the period."""
    since = run.slot - job.period
    messages = []
    for user in get_user_model().objects.filter(is_active=True).exclude(email="").order_by("pk"):
        documents = list(
            Document.objects.filter(owner=user, created_at__gte=since, created_at__lt=run.slot)
            .order_by("created_at").values_list("title", "word_count")
        )
        messages.append(_digest_message(user.email, run, since, documents))
    sent = mail.get_connection().send_messages(messages) if messages else 0
    return f"{sent} digest(s) sent"


def _digest_message(
    address: str, run: JobRun, since: datetime, documents: list[tuple[str, int | None]]
) -> mail.EmailMessage:
    lines = [f"Documents submitted {since:%Y-%m-%d %H:%M} - {run.slot:%Y-%m-%d %H:%M} UTC: "
             f"{len(documents)}, {sum(w or 0 for _, w in documents)} words."]
    lines += [f"  - {title}" for title, _ in documents[:DIGEST_MAX_TITLES]]
    if len(documents) > DIGEST_MAX_TITLES:
        lines.append(f"  ... and {len(documents) - DIGEST_MAX_TITLES} more")
    return mail.EmailMessage(
        subject=f"Your digest for {run.slot:%Y-%m-%d %H:%M} UTC",
        body="\n".join(lines) + "\n",
        from_email=settings.REPORTS_DIGEST_FROM,
        to=[address],
        # Which job and slot sent it, so a doubled digest is visible in the mailbox itself.
        headers={"X-Platform-Job": run.job, "X-Platform-Slot": run.slot.isoformat()},
    )


def retention_purge(job: PeriodicJob, run: JobRun) -> str:
    now = timezone.now()
    runs, _ = JobRun.objects.filter(
        slot__lt=now - timedelta(days=settings.REPORTS_RUN_RETENTION_DAYS)
    ).exclude(outcome=Outcome.RUNNING).delete()
    rollups, _ = UsageRollup.objects.filter(
        period_start__lt=now - timedelta(days=settings.REPORTS_USAGE_RETENTION_DAYS)
    ).delete()
    return f"deleted {runs} run record(s), {rollups} roll-up row(s)"


WORK: dict[str, Callable[[PeriodicJob, JobRun], str]] = {
    names.REPORTS_USAGE_ROLLUP: usage_rollup,
    names.REPORTS_DAILY_DIGEST: daily_digest,
    names.REPORTS_RETENTION_PURGE: retention_purge,
}
