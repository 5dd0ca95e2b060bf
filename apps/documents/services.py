"""Writes for documents: submit, the processing state machine, requeue.

The state machine is the idempotency guarantee. A run *claims* the row (a new token, ``starts``
+1); it may finish the row only while it still holds that token, in one transaction that also
writes the facts. A redelivered message for a finished document is skipped; a second run that
overlaps the first takes the claim, and the first one's result is dropped as superseded. So a
document has at most one result, however often its message is delivered.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone
from kombu.exceptions import OperationalError as KombuOperationalError
from redis.exceptions import RedisError

from apps.events.bus import publish_event_on_commit
from celery_conf import names
from celery_conf.broker_scan import task_args_in_broker
from celery_conf.connections import redis_client
from celery_conf.liveness import worker_heartbeats

from .models import Document, DocumentFact, DocumentRun
from .processing import (
    PermanentProcessingError,
    ProcessingResult,
    TransientProcessingError,
    process_text,
)

logger = logging.getLogger(__name__)

State = Document.State
Outcome = DocumentRun.Outcome
# The reconciler looks at the broker twice this far apart before it re-enqueues a document:
# a message between a worker's BRPOP and kombu's write to ``unacked`` (milliseconds) is in
# neither place the first time, and in ``unacked`` (or done) the second.
RECONCILE_SECOND_LOOK_S = 1.0


class QueueUnavailable(Exception):
    """The broker did not accept the message; the document was not kept."""


# What one delivery of a document's processing came to (the task turns them into task states).
SKIPPED = "skipped"  # the document was already finished (or deleted): a redelivery, no claim


@dataclass(frozen=True)
class Claim:
    token: uuid.UUID
    run_id: int
    content: str


def document_submit(
    *, owner: AbstractBaseUser, title: str, content: str, source: str, filename: str = ""
) -> Document:
    """Store a document and queue its processing; returns once both are durable.

    The row is committed first, then the message is published; a message lost to a power cut
    is re-enqueued from the row (adr/0014). If the broker refuses, the row is removed and
    QueueUnavailable is raised, so the caller never acknowledges work that is not queued.
    """
    if transaction.get_connection().in_atomic_block:
        raise RuntimeError("document_submit publishes after its own commit; call it outside atomic")
    document = Document.objects.create(
        owner=owner,
        title=title,
        source=source,
        filename=filename,
        content=content,
        size_bytes=len(content.encode()),
    )
    try:
        document_enqueue(document_id=document.pk)
    except (KombuOperationalError, RedisError, OSError) as exc:
        document.delete()
        raise QueueUnavailable(str(exc)) from exc
    _announce(document.pk, State.QUEUED)
    return document


def document_enqueue(*, document_id: int) -> None:
    from .tasks import process_document  # the task module imports this one

    process_document.apply_async(
        args=[document_id],
        retry=True,
        retry_policy={"max_retries": 2, "interval_start": 0.2, "interval_step": 0.4},
    )


def document_process(
    *, document_id: int, task_id: str, worker: str, pid: int, redelivered: bool, final_attempt: bool
) -> str:
    """Run one delivery of a document's processing; returns the run's outcome.

    Raises TransientProcessingError when a retry should follow (the task's policy retries it).
    """
    claim = _claim(
        document_id=document_id, task_id=task_id, worker=worker, pid=pid, redelivered=redelivered
    )
    if not isinstance(claim, Claim):
        return claim
    try:
        result = process_text(claim.content, work_seconds=settings.DOCUMENTS_PROCESSING_SECONDS)
    except TransientProcessingError as exc:
        if final_attempt:
            return _finish_failed(document_id, claim, f"gave up after retries: {exc}")
        if not _release_for_retry(document_id, claim, str(exc)):
            return Outcome.SUPERSEDED  # the claim moved on: the run holding it decides
        raise
    except PermanentProcessingError as exc:
        return _finish_failed(document_id, claim, str(exc))
    except SoftTimeLimitExceeded:
        return _finish_failed(document_id, claim, "processing exceeded its time limit")
    return _finish_done(document_id, claim, result)


def _claim(
    *, document_id: int, task_id: str, worker: str, pid: int, redelivered: bool
) -> Claim | str:
    """Take the claim; else SKIPPED (nothing to do) or FAILED (too many starts)."""
    now = timezone.now()
    with transaction.atomic():
        document = Document.objects.select_for_update().filter(pk=document_id).first()
        if document is None or document.state in (State.DONE, State.FAILED):
            return SKIPPED  # deleted, or a redelivery of finished work: nothing to do
        if document.starts >= settings.DOCUMENTS_MAX_STARTS:
            document.state = State.FAILED
            document.failure_reason = (
                f"processing started {document.starts} times without finishing "
                "(its worker was lost each time); requeue it once the cause is fixed"
            )
            document.claim_token = None
            document.finished_at = now
            document.save()
            _announce(document_id, State.FAILED)
            return Outcome.FAILED
        # Runs still marked running belong to a worker that died, or to a duplicate delivery
        # that this claim now supersedes.
        document.runs.filter(outcome=Outcome.RUNNING).update(
            outcome=Outcome.SUPERSEDED, finished_at=now, detail="claim taken by a later run"
        )
        document.state = State.PROCESSING
        document.claim_token = uuid.uuid4()
        document.starts += 1
        document.processed_by = worker
        document.save()
        run = DocumentRun.objects.create(
            document=document, task_id=task_id, worker=worker, pid=pid, redelivered=redelivered
        )
        _announce(document_id, State.PROCESSING)
        return Claim(token=document.claim_token, run_id=run.pk, content=document.content)


def _fenced(document_id: int, claim: Claim):  # type: ignore[no-untyped-def]
    return Document.objects.filter(pk=document_id, state=State.PROCESSING, claim_token=claim.token)


def _close_run(claim: Claim, outcome: str, detail: str = "") -> None:
    DocumentRun.objects.filter(pk=claim.run_id).update(
        outcome=outcome, finished_at=timezone.now(), detail=detail[:1000]
    )


def _finish_done(document_id: int, claim: Claim, result: ProcessingResult) -> str:
    now = timezone.now()
    with transaction.atomic():
        won = _fenced(document_id, claim).update(
            state=State.DONE,
            summary=result.summary,
            word_count=result.word_count,
            failure_reason="",
            claim_token=None,
            finished_at=now,
            updated_at=now,
        )
        if not won:
            _close_run(claim, Outcome.SUPERSEDED, "result dropped: the claim had moved on")
            return Outcome.SUPERSEDED
        DocumentFact.objects.bulk_create(
            DocumentFact(document_id=document_id, kind=kind, value=value)
            for kind, value in result.facts
        )
        _close_run(claim, Outcome.DONE)
        _announce(document_id, State.DONE)
    return Outcome.DONE


def _finish_failed(document_id: int, claim: Claim, reason: str) -> str:
    now = timezone.now()
    with transaction.atomic():
        won = _fenced(document_id, claim).update(
            state=State.FAILED, failure_reason=reason, claim_token=None, finished_at=now,
            updated_at=now,
        )
        outcome = Outcome.FAILED if won else Outcome.SUPERSEDED
        _close_run(claim, outcome, reason)
        if won:
            _announce(document_id, State.FAILED)
    return outcome


def _release_for_retry(document_id: int, claim: Claim, reason: str) -> bool:
    """Put the document back to queued for the task's retry; False if the claim moved on.

    If the retry's publish then fails, the row says queued with no message behind it: the
    reconciler (documents_reconcile) puts it back.
    """
    with transaction.atomic():
        released = _fenced(document_id, claim).update(
            state=State.QUEUED, failure_reason=f"retrying: {reason}", claim_token=None,
            updated_at=timezone.now(),
        )
        _close_run(claim, Outcome.RETRYING, reason)
        if released:
            _announce(document_id, State.QUEUED)
    return bool(released)


def documents_requeue_failed(*, document_ids: list[int] | None = None) -> list[int]:
    """Put failed documents back in the queue with a fresh start count; returns their ids."""
    failed = Document.objects.filter(state=State.FAILED)
    if document_ids is not None:
        failed = failed.filter(pk__in=document_ids)
    requeued: list[int] = []
    for document_id in failed.values_list("pk", flat=True):
        updated = Document.objects.filter(pk=document_id, state=State.FAILED).update(
            state=State.QUEUED, starts=0, failure_reason="", finished_at=None,
            updated_at=timezone.now(),
        )
        if updated:
            document_enqueue(document_id=document_id)
            _announce(document_id, State.QUEUED)
            requeued.append(document_id)
    return requeued


@dataclass(frozen=True)
class Reconciled:
    candidates: int  # unfinished documents untouched for longer than the grace period
    requeued: list[int]  # those with no message and no live run behind them, put back


def documents_reconcile(*, grace_seconds: float | None = None) -> Reconciled:
    """Re-enqueue every unfinished document with no live work behind it; the database decides.

    A document left queued or processing, untouched for ``grace_seconds`` (the publish after a
    commit takes milliseconds), is put back only if the broker holds no message for it (queued
    or unacked, whatever its lease: an expired lease is restored by kombu's sweep) and no live
    worker process is running it (its heartbeat lists the run's pool process). So a document
    waiting in a backlog is never enqueued twice, and one whose message Redis lost (between
    BRPOP and ``unacked``, an ack from a superseded copy, a retry whose publish failed, an AOF
    tail lost in a power cut) is finished within grace + the reconciler's period. Raises on a
    broker or Redis error: nothing is re-enqueued on a guess.
    """
    if grace_seconds is None:
        grace_seconds = settings.DOCUMENTS_RECONCILE_AFTER_S
    cutoff = timezone.now() - timedelta(seconds=grace_seconds)
    stale = dict(Document.objects.filter(
        state__in=(State.QUEUED, State.PROCESSING), updated_at__lt=cutoff,
    ).values_list("pk", "updated_at"))
    if not stale:
        return Reconciled(candidates=0, requeued=[])
    orphans = set(stale) - _documents_with_live_work(set(stale))
    if orphans:
        time.sleep(RECONCILE_SECOND_LOOK_S)
        orphans -= _documents_with_live_work(orphans)
    requeued = []
    for document_id in sorted(orphans):
        if _requeue_orphan(document_id, stale[document_id]):
            requeued.append(document_id)
    if requeued:
        logger.warning("documents: re-enqueued %d document(s) with no live work: %s",
                       len(requeued), requeued[:50])
    return Reconciled(candidates=len(stale), requeued=requeued)


def _documents_with_live_work(document_ids: set[int]) -> set[int]:
    """Those of ``document_ids`` that the broker holds a message for or a live process runs."""
    live = {
        args[0] for args in task_args_in_broker(task_name=names.DOCUMENT_PROCESS,
                                                queue=str(names.TASK_QUEUES[
                                                    names.DOCUMENT_PROCESS]))
        if args and isinstance(args[0], int)
    } & document_ids
    beats = worker_heartbeats(redis_client())
    # No run outlives the hard time limit (its pool process is killed there). An older run
    # whose process lives on was cut short by an error it could not record (the database
    # went away under it): that process has moved on, nothing runs this document.
    oldest_live = timezone.now() - timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT)
    running = DocumentRun.objects.filter(
        document_id__in=document_ids - live, outcome=Outcome.RUNNING,
        started_at__gt=oldest_live,
    ).values_list("document_id", "worker", "pid", "started_at")
    for document_id, worker, pid, started_at in running:
        beat = beats.get(worker)
        if beat is None:
            continue
        children = beat.get("children") or [beat["pid"]]
        # A heartbeat older than the run may predate the pool process that runs it.
        if pid in children or float(beat["at"]) <= started_at.timestamp():
            live.add(document_id)
    return live


def _requeue_orphan(document_id: int, seen_updated_at: datetime) -> bool:
    now = timezone.now()
    with transaction.atomic():
        # Unchanged since the reconciler looked: a run that claimed it meanwhile wins.
        moved = Document.objects.filter(
            pk=document_id, state__in=(State.QUEUED, State.PROCESSING),
            updated_at=seen_updated_at,
        ).update(state=State.QUEUED, claim_token=None, updated_at=now)
        if not moved:
            return False
        DocumentRun.objects.filter(document_id=document_id, outcome=Outcome.RUNNING).update(
            outcome=Outcome.SUPERSEDED, finished_at=now,
            detail="no live work behind it: re-enqueued by the reconciler")
        _announce(document_id, State.QUEUED)
    try:
        document_enqueue(document_id=document_id)
    except (KombuOperationalError, RedisError, OSError) as exc:
        # Still queued in the database: the next pass finds it again.
        logger.warning("documents: could not re-enqueue %s: %s", document_id, exc)
        return False
    return True


def _announce(document_id: int, state: str) -> None:
    """Tell the owner's open pages about a state change, once it is committed."""
    row = Document.objects.filter(pk=document_id).values("owner_id", "title", "word_count").first()
    if row is not None:
        publish_event_on_commit(kind="document.state", user_id=row["owner_id"], data={
            "id": document_id, "state": str(state), "title": row["title"],
            "word_count": row["word_count"],
        })
