"""Writes for documents: submit, the processing state machine, requeue.

The state machine is the idempotency guarantee. A run *claims* the row (a new token, ``starts``
+1); it may finish the row only while it still holds that token, in one transaction that also
writes the facts. A redelivered message for a finished document is skipped; a second run that
overlaps the first takes the claim, and the first one's result is dropped as superseded. So a
document has at most one result, however often its message is delivered.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone
from kombu.exceptions import OperationalError as KombuOperationalError
from redis.exceptions import RedisError

from apps.events.bus import publish_event_on_commit

from .models import Document, DocumentFact, DocumentRun
from .processing import (
    PermanentProcessingError,
    ProcessingResult,
    TransientProcessingError,
    process_text,
)

State = Document.State
Outcome = DocumentRun.Outcome


class QueueUnavailable(Exception):
    """The broker did not accept the message; the document was not kept."""


@dataclass(frozen=True)
class Claim:
    token: uuid.UUID
    run_id: int
    content: str


def document_submit(
    *, owner: AbstractBaseUser, title: str, content: str, source: str, filename: str = ""
) -> Document:
    """Store a document and queue its processing; returns once both are durable.

    The row is committed first, then the message is published; Redis (appendfsync always)
    replies only once the message is on disk. If the broker refuses, the row is removed and
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
    if claim is None:
        return "skipped"
    try:
        result = process_text(claim.content, work_seconds=settings.DOCUMENTS_PROCESSING_SECONDS)
    except TransientProcessingError as exc:
        if final_attempt:
            return _finish_failed(document_id, claim, f"gave up after retries: {exc}")
        _release_for_retry(document_id, claim, str(exc))
        raise
    except PermanentProcessingError as exc:
        return _finish_failed(document_id, claim, str(exc))
    except SoftTimeLimitExceeded:
        return _finish_failed(document_id, claim, "processing exceeded its time limit")
    return _finish_done(document_id, claim, result)


def _claim(
    *, document_id: int, task_id: str, worker: str, pid: int, redelivered: bool
) -> Claim | None:
    now = timezone.now()
    with transaction.atomic():
        document = Document.objects.select_for_update().filter(pk=document_id).first()
        if document is None or document.state in (State.DONE, State.FAILED):
            return None  # deleted, or a redelivery of finished work: nothing to do
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
            return None
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


def _release_for_retry(document_id: int, claim: Claim, reason: str) -> None:
    with transaction.atomic():
        released = _fenced(document_id, claim).update(
            state=State.QUEUED, failure_reason=f"retrying: {reason}", claim_token=None,
            updated_at=timezone.now(),
        )
        _close_run(claim, Outcome.RETRYING, reason)
        if released:
            _announce(document_id, State.QUEUED)


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


def _announce(document_id: int, state: str) -> None:
    """Tell the owner's open pages about a state change, once it is committed."""
    row = Document.objects.filter(pk=document_id).values("owner_id", "title", "word_count").first()
    if row is not None:
        publish_event_on_commit(kind="document.state", user_id=row["owner_id"], data={
            "id": document_id, "state": str(state), "title": row["title"],
            "word_count": row["word_count"],
        })
