"""Writes for reports: the slot fence around every periodic run, and the jobs' work.

``job_run`` is what every periodic task calls. It inserts the run record first; the unique
(job, slot) constraint on scheduled runs is the fence, so a slot fired twice does its work
once. The job's missed-slot policy then sets the run's window: a catch-up job covers every
slot since its last finished run, a skip job only its own slot.
"""

from __future__ import annotations

import logging
import os
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import mail
from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import F
from django.utils import timezone
from redis.exceptions import RedisError

from apps.documents.models import Document
from apps.documents.recovery import documents_recover
from celery_conf import names
from celery_conf.liveness import worker_alive
from scheduler.jobs import Missed, PeriodicJob
from scheduler.tables import JOBS

from .live import run_publish
from .models import JobEffect, JobRun, UsageRollup

logger = logging.getLogger(__name__)

Kind = JobRun.Kind
Outcome = JobRun.Outcome
# A catch-up run after a long outage covers at most this many slots (a week of hours);
# anything older is left to a manual run rather than one huge transaction.
MAX_CATCH_UP_SLOTS = 168
# Titles listed in one digest; the rest are counted.
DIGEST_MAX_TITLES = 20
# Deliveries one run may take: a pool process that dies on it every time (a job that runs out
# of memory) stops after this many, failed, instead of looping without bound.
MAX_ATTEMPTS = 3
# A redelivered message finds its run still "running" until the worker's heartbeat (every
# lease renewal, 5 s by default) stops naming the dead pool process: wait this long at most
# for that proof before treating the delivery as a second, live copy.
TAKEOVER_WAIT_S = 20.0
# job_run_finish's own retries of a database error: the work has committed, so the record of
# how it ended must land too (backoff 0.2, 0.4, ... s; about 6 s in all).
FINISH_ATTEMPTS = 5


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
    worker_pid: int | None = None, pool_pid: int | None = None,
) -> str:
    """Run one delivery of a periodic job; returns the outcome ("done", or "duplicate")."""
    job = job_get(job_name)
    job_runs_mark_lost(job=job)
    run = job_run_begin(
        job=job, slot=datetime.fromisoformat(slot) if slot else None, fired_by=fired_by,
        task_id=task_id, worker=worker, worker_pid=worker_pid, pool_pid=pool_pid,
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
    worker_pid: int | None = None, pool_pid: int | None = None,
) -> JobRun | None:
    """Insert the run record; None if this run already ran or is running elsewhere.

    The fence: one row per scheduled slot, and one per manual run's task id. A failed or lost
    run is taken over by the next delivery (a retry, a second beat's message, a redelivery
    after a pool child died), and so is a "running" one whose attempt is provably over (its
    pool process is this one, or the heartbeat no longer names it): the run's recorded
    effects (JobEffect) make the takeover skip what the earlier attempt already did.
    """
    now = timezone.now()
    fields = {"fired_by": fired_by, "task_id": task_id, "worker": worker,
              "worker_pid": worker_pid, "pool_pid": pool_pid}
    if slot is None:
        if not task_id:  # no id to fence by (called directly, not by a task)
            return JobRun.objects.create(job=job.name, kind=Kind.MANUAL, slot=now,
                                         covers_from=now, **fields)
        fence = {"job": job.name, "kind": Kind.MANUAL, "task_id": task_id}
        create = {"slot": now, "covers_from": now}
    else:
        fence = {"job": job.name, "kind": Kind.SCHEDULED, "slot": slot}
        create = {"covers_from": _covers_from(job, slot)}
    try:
        with transaction.atomic():
            return JobRun.objects.create(**{**fields, **create, **fence})
    except IntegrityError:
        pass
    existing = JobRun.objects.filter(**fence).first()
    if existing is not None and existing.outcome == Outcome.RUNNING \
            and _attempt_over(job=job, run=existing):
        JobRun.objects.filter(pk=existing.pk, outcome=Outcome.RUNNING).update(
            outcome=Outcome.LOST, finished_at=timezone.now(),
            detail="its attempt ended without finishing (its process died or it was retried)")
    if existing is not None and existing.attempts >= MAX_ATTEMPTS \
            and existing.outcome in (Outcome.FAILED, Outcome.LOST):
        JobRun.objects.filter(pk=existing.pk).update(
            outcome=Outcome.FAILED, finished_at=timezone.now(),
            detail=f"given up after {existing.attempts} attempts: {existing.detail}"[:2000])
        logger.error("reports: %s run %s given up after %d attempts", job.name, existing.pk,
                     existing.attempts)
        return None
    # A failed or lost run is taken over; a running or done one makes this a second delivery.
    retaken = JobRun.objects.filter(**fence, outcome__in=(Outcome.FAILED, Outcome.LOST)).update(
        outcome=Outcome.RUNNING, started_at=now, finished_at=None, attempts=F("attempts") + 1,
        **fields, **({} if slot is None else create))
    if retaken:
        return JobRun.objects.get(**fence)
    JobRun.objects.filter(**fence).update(duplicates=F("duplicates") + 1)
    logger.warning("reports: %s %s delivered again (by %s); the fence kept it to one run",
                   job.name, slot.isoformat() if slot else f"task {task_id}", fired_by)
    return None


def _attempt_over(*, job: PeriodicJob, run: JobRun) -> bool:
    """Is the "running" attempt of ``run`` provably over? Yes if it ran in this very pool
    process (one task at a time: it was this task's earlier try, e.g. a retry after its
    finish failed); else once the worker's heartbeat stops naming its process, waited for up
    to TAKEOVER_WAIT_S (a redelivery after a SIGKILL comes before the next heartbeat)."""
    if run.pool_pid is not None and run.pool_pid == os.getpid() and \
            run.worker_pid == os.getppid():
        return True
    if run.worker_pid is None:
        return False
    deadline = time.monotonic() + TAKEOVER_WAIT_S
    while True:
        try:
            if not worker_alive(run.worker, run.worker_pid, run.pool_pid,
                                since=run.started_at.timestamp()):
                return True
        except RedisError:
            return False
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.25)


def job_runs_mark_lost(*, job: PeriodicJob) -> int:
    """Mark this job's runs whose process died mid-run as lost; returns how many.

    A SIGKILLed or OOM-killed worker, or pool process, leaves its run ``running``. A run is
    alive only while its worker's heartbeat names both its main process and the pool process
    that runs it (a pool child killed alone leaves the main heartbeat alive). The job's next
    run and the reconciler notice, so the page never shows a dead run as running. A catch-up
    job's next run covers the lost run's window anyway (only finished runs end a window); a
    lost scheduled run is taken over by a later delivery of its slot, which skips the effects
    already recorded.
    """
    running = JobRun.objects.filter(job=job.name, outcome=Outcome.RUNNING,
                                    worker_pid__isnull=False).values_list(
        "pk", "worker", "worker_pid", "pool_pid", "started_at")
    lost = 0
    for run_id, worker, pid, pool_pid, started_at in running:
        try:
            alive = worker_alive(worker, pid, pool_pid, since=started_at.timestamp())
        except RedisError:
            return lost  # Redis cannot tell: leave the records as they are
        if not alive:
            who = f"worker {worker} (pid {pid}" + (f", pool process {pool_pid})" if pool_pid
                                                   else ")")
            lost += JobRun.objects.filter(pk=run_id, outcome=Outcome.RUNNING).update(
                outcome=Outcome.LOST, finished_at=timezone.now(),
                detail=f"{who} died mid-run; "
                       + ("the next run covers its window" if job.missed is Missed.CATCH_UP
                          else "its slot is skipped, per the job's policy"))
    return lost


def job_run_lock(*, run: JobRun) -> None:
    """Hold ``run``'s row lock until the transaction ends (call inside ``atomic``).

    Two attempts of one run (a takeover while the first still runs) then check and record
    their effects one after the other: on SQLite the single writer did that by itself, on
    PostgreSQL both would see the effect missing, both write, and the second fail on the
    unique (run, key) constraint instead of skipping.
    """
    list(JobRun.objects.select_for_update().filter(pk=run.pk).values_list("pk", flat=True))


def job_effect_done(*, run: JobRun, key: str) -> bool:
    return JobEffect.objects.filter(run=run, key=key).exists()


def job_effect_record(*, run: JobRun, key: str, detail: str = "") -> None:
    """Record one effect of ``run`` as done (call inside the effect's transaction if it has one).

    Raises IntegrityError if it was already recorded: the caller checked, so that is a bug.
    """
    JobEffect.objects.create(run=run, key=key, detail=detail[:500])


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
    """Record how the run ended. The work has committed by now, so a database error is
    retried here (FINISH_ATTEMPTS); if it still fails it is raised, and the task's retry
    takes the run over as its own earlier attempt (job_run_begin), never as a duplicate."""
    for attempt in range(FINISH_ATTEMPTS):
        try:
            JobRun.objects.filter(pk=run_id).update(
                outcome=outcome, finished_at=timezone.now(), detail=detail[:2000])
            break
        except DatabaseError:
            if attempt == FINISH_ATTEMPTS - 1:
                raise
            logger.warning("reports: recording run %s as %s failed; trying again", run_id,
                           outcome, exc_info=True)
            time.sleep(0.2 * 2 ** attempt)
    run_publish(run_id=run_id)  # and how it ended


def job_trigger(*, job_name: str, requested_by: str) -> str:
    """Queue a manual run of a job; returns the task id. Recorded as a manual run."""
    from celery import current_app

    job = job_get(job_name)
    # By its stable name, routed like the beat's messages (celery_conf/names.py): every job
    # in the schedule tables, the reports' own and ops.backup alike.
    result = current_app.send_task(job.name, kwargs={"slot": None, "fired_by": requested_by})
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
    periods = round((end - first) / job.period)
    line = f"{periods} period(s) from {first:%Y-%m-%d %H:%M:%S}, {len(totals)} row(s)"
    key = f"rollup:{first.isoformat()}/{end.isoformat()}"
    with transaction.atomic():
        # The rows and their effect record commit together: a second run of the slot skips.
        job_run_lock(run=run)
        if job_effect_done(run=run, key=key):
            return f"{line}: already written by an earlier attempt of this slot"
        UsageRollup.objects.filter(period_start__gte=first, period_start__lt=end).delete()
        UsageRollup.objects.bulk_create(
            UsageRollup(user_id=owner_id, period_start=period, period_seconds=job.every,
                        documents=count, words=words)
            for (owner_id, period), (count, words) in totals.items()
        )
        job_effect_record(run=run, key=key, detail=line)
    return line


def daily_digest(job: PeriodicJob, run: JobRun) -> str:
    """One e-mail per active user with an address: their documents of the period.

    Each mail is recorded as an effect of the run right after the backend accepted it; a
    second run of the slot skips the users already mailed. The one window left: a crash
    between the backend accepting a mail and the record's commit mails that user again
    (adr/0013: no design closes it without the mail server taking part).
    """
    since = run.slot - job.period
    sent = skipped = 0
    with mail.get_connection() as connection:
        for user in (get_user_model().objects.filter(is_active=True).exclude(email="")
                     .order_by("pk")):
            key = f"digest:user:{user.pk}"
            with transaction.atomic():
                # The run's row lock, like the roll-up and the purge: two attempts of one run
                # check and record each user one after the other. The record commits right
                # after the backend accepted the mail (or not at all if it refused).
                job_run_lock(run=run)
                if job_effect_done(run=run, key=key):
                    skipped += 1
                    continue
                documents = list(
                    Document.objects.filter(owner=user, created_at__gte=since,
                                            created_at__lt=run.slot)
                    .order_by("created_at").values_list("title", "word_count")
                )
                job_effect_record(run=run, key=key, detail=user.email)
                if not connection.send_messages([_digest_message(user.email, run, since,
                                                                 documents)]):
                    transaction.set_rollback(True)
                    continue
                sent += 1
    return f"{sent} digest(s) sent" + (f", {skipped} already sent by an earlier attempt"
                                        if skipped else "")


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
    with transaction.atomic():
        job_run_lock(run=run)
        if job_effect_done(run=run, key="purge"):
            return "already purged by an earlier attempt of this slot"
        runs = JobRun.objects.filter(
            slot__lt=now - timedelta(days=settings.REPORTS_RUN_RETENTION_DAYS)
        ).exclude(outcome=Outcome.RUNNING).exclude(pk=run.pk)
        # Count run records, not the effects that cascade with them.
        runs_deleted = runs.count()
        runs.delete()
        rollups, _ = UsageRollup.objects.filter(
            period_start__lt=now - timedelta(days=settings.REPORTS_USAGE_RETENTION_DAYS)
        ).delete()
        line = f"deleted {runs_deleted} run record(s), {rollups} roll-up row(s)"
        job_effect_record(run=run, key="purge", detail=line)
    return line


def reconcile(job: PeriodicJob, run: JobRun) -> str:
    """The database is the record: put back documents with no live work, mark dead runs lost.

    The leading beat runs the documents' recovery every second (scheduler/duties.py); this
    periodic pass runs it too, as a second path that needs no beat duty, and marks dead runs
    of the periodic jobs lost."""
    started = time.monotonic()
    result = documents_recover()
    lost = sum(job_runs_mark_lost(job=other) for other in JOBS.values())
    # The run record is the witness the backlog measurement reads: "re-enqueued N".
    return (f"re-enqueued {len(result.requeued)} document(s) (abandoned "
            f"{result.abandoned[:20]}, orphaned {result.orphaned[:20]}); marked {lost} run(s) "
            f"lost; {time.monotonic() - started:.2f} s")


WORK: dict[str, Callable[[PeriodicJob, JobRun], str]] = {
    names.REPORTS_USAGE_ROLLUP: usage_rollup,
    names.REPORTS_DAILY_DIGEST: daily_digest,
    names.REPORTS_RETENTION_PURGE: retention_purge,
    names.PLATFORM_RECONCILE: reconcile,
}
