"""Writes for documents: submit, the processing state machine, requeue.

The state machine is the idempotency guarantee. A run *claims* the row (a new token, ``starts``
+1); it may finish the row only while it still holds that token, in one transaction that also
writes the facts. A redelivered message for a finished document is skipped; so is a copy of an
older message (its generation is behind the row's: the recovery re-enqueued the document since)
and a copy delivered while a live run holds the claim. A copy that finds the claim holder dead
takes the claim, and a result the dead run might still commit is dropped as superseded. So a
document has at most one result, however often its message is delivered. Documents whose
worker died, or whose message Redis lost, are put back by apps/documents/recovery.py.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone
from kombu.exceptions import OperationalError as KombuOperationalError
from redis.exceptions import RedisError

from apps.events.bus import publish_event_on_commit
from apps.transactions import flushed_after_the_lock, unsynced_commits
from celery_conf.liveness import run_alive, worker_heartbeat
from celery_conf.queues import QUEUED_AT_HEADER

from . import statements
from .models import Document, DocumentRun
from .processing import (
    PermanentProcessingError,
    ProcessingResult,
    TransientProcessingError,
    process_text,
)

logger = logging.getLogger(__name__)

State = Document.State
Outcome = DocumentRun.Outcome
# The message header naming the generation a document message runs (models.Document).
GENERATION_HEADER = "platform_generation"


class QueueUnavailable(Exception):
    """The broker did not accept the message; the document was not kept."""


# A claim whose row changed between its read and its write reads and judges again, this many
# times in all: each change is another run's claim or finish, so a few are already unlikely.
CLAIM_ATTEMPTS = 5
# What one delivery of a document's processing came to (the task turns them into task states).
SKIPPED = "skipped"  # finished or deleted, an older generation, or a live run holds it


@dataclass(frozen=True)
class Claim:
    token: uuid.UUID
    run_id: int
    content: str
    owner_id: int
    title: str


def document_submit(
    *, owner: AbstractBaseUser, title: str, content: str, source: str, filename: str = ""
) -> Document:
    """Store a document and queue its processing; returns once both are durable.

    The row is committed first, then the message is published; a message lost to a power cut
    is re-enqueued from the row (adr/0014). If the publish fails in any way, the row is
    removed and QueueUnavailable is raised, so the caller never acknowledges work that is not
    queued, and no document the client was refused stays behind to be processed.
    """
    if transaction.get_connection().in_atomic_block:
        raise RuntimeError("document_submit publishes after its own commit; call it outside atomic")
    document = Document(
        owner=owner,
        title=title,
        source=source,
        filename=filename,
        content=content,
        size_bytes=len(content.encode()),
    )
    with flushed_after_the_lock():  # flushed before the message is published
        statements.submit(document)  # Document.objects.create, as SQL built once
    try:
        document_enqueue(document_id=document.pk, generation=document.generation)
    except Exception as exc:
        # Not only the broker's errors: under a network split kombu once failed with an
        # AttributeError on a channel its own retry had closed (tests/partitions/
        # test_sentinel_cut.py). That was a 500 that left the row to be processed unasked.
        # Whatever failed, the message is not known to be queued; one that did go out
        # finds no row and is skipped.
        if not isinstance(exc, KombuOperationalError | RedisError | OSError):
            logger.exception("document %s: publishing failed unexpectedly: not queued, removed",
                             document.pk)
        document.delete()
        raise QueueUnavailable(str(exc)) from exc
    _announce(document_id=document.pk, owner_id=document.owner_id, title=document.title,
              word_count=None, state=State.QUEUED)
    return document


def document_enqueue(*, document_id: int, generation: int, priority: int | None = None) -> None:
    """Publish the document's message for ``generation``, stamped with the time it is queued
    (the recovery's watermark, celery_conf/queues.py). The arguments stay ``[document_id]``:
    a worker of the previous release runs the message unchanged (an upgrade's rollback).
    ``priority`` None is the policy's default step; the recovery passes RECOVERY_PRIORITY."""
    from .tasks import process_document  # the task module imports this one

    process_document.apply_async(
        args=[document_id],
        headers={GENERATION_HEADER: generation, QUEUED_AT_HEADER: time.time()},
        **({} if priority is None else {"priority": priority}),
        retry=True,
        retry_policy={"max_retries": 2, "interval_start": 0.2, "interval_step": 0.4},
    )


def document_process(
    *, document_id: int, generation: int | None, task_id: str, worker: str, worker_pid: int,
    pid: int, redelivered: bool, final_attempt: bool, retry_in_s: float,
) -> str:
    """Run one delivery of a document's processing; returns the run's outcome.

    ``generation`` is the message's (None: a message from before generations existed, taken
    as current); ``retry_in_s`` how long the task's retry would wait. Raises
    TransientProcessingError when a retry should follow (the task's policy retries it).
    """
    claim = _claim(
        document_id=document_id, generation=generation, task_id=task_id, worker=worker,
        worker_pid=worker_pid, pid=pid, redelivered=redelivered,
    )
    if not isinstance(claim, Claim):
        return claim
    try:
        result = process_text(claim.content, work_seconds=settings.DOCUMENTS_PROCESSING_SECONDS)
    except TransientProcessingError as exc:
        if final_attempt:
            return _finish_failed(document_id, claim, f"gave up after retries: {exc}")
        if not _release_for_retry(document_id, claim, str(exc), retry_in_s=retry_in_s):
            return Outcome.SUPERSEDED  # the claim moved on: the run holding it decides
        raise
    except PermanentProcessingError as exc:
        return _finish_failed(document_id, claim, str(exc))
    except SoftTimeLimitExceeded:
        return _finish_failed(document_id, claim, "processing exceeded its time limit")
    return _finish_done(document_id, claim, result)


def _claim(
    *, document_id: int, generation: int | None, task_id: str, worker: str, worker_pid: int,
    pid: int, redelivered: bool,
) -> Claim | str:
    """Take the claim; else SKIPPED (nothing to do) or FAILED (too many starts).

    The row is read and judged outside any transaction (whether a holder lives may take a
    Redis round trip), then written in one short transaction that changes it only if it still
    is as read: a compare-and-set on (state, generation, starts), which every change of the
    claim moves (adr/0043). SQLite's one writer and PostgreSQL's row lock are held for those
    few statements only; a row that moved meanwhile is read and judged again.
    """
    for _ in range(CLAIM_ATTEMPTS):
        outcome = _claim_once(document_id=document_id, generation=generation, task_id=task_id,
                              worker=worker, worker_pid=worker_pid, pid=pid,
                              redelivered=redelivered)
        if outcome is not None:
            return outcome
    # Another run changed the row every time: it holds the claim, or finished the document.
    logger.warning("documents: %s changed under %d claims in a row; this copy is skipped",
                   document_id, CLAIM_ATTEMPTS)
    return SKIPPED


def _claim_once(
    *, document_id: int, generation: int | None, task_id: str, worker: str, worker_pid: int,
    pid: int, redelivered: bool,
) -> Claim | str | None:
    """One read, judgement and compare-and-set; None when the row moved in between."""
    row = statements.read(document_id)
    if row is None or row["state"] in (State.DONE, State.FAILED):
        return SKIPPED  # deleted, or a redelivery of finished work: nothing to do
    if generation is not None and generation < row["generation"]:
        # A copy of a message the recovery has replaced since (one kombu restored after
        # its worker died, or a late duplicate): the newer message runs it.
        logger.info("documents: %s generation %s skipped, the document is at %s",
                    document_id, generation, row["generation"])
        return SKIPPED
    if row["state"] == State.PROCESSING and _holder_alive(
            document_id, worker=worker, worker_pid=worker_pid, pid=pid,
            retry_of=None if redelivered else task_id):
        # A second copy of the message while its run goes on (never by kombu's timeout,
        # which outlasts any run): that run finishes it, or the recovery hands it on.
        logger.warning("documents: %s is being processed by a live run; this copy is "
                       "skipped", document_id)
        return SKIPPED
    now = timezone.now()
    announce = {"document_id": document_id, "owner_id": row["owner_id"],
                "title": row["title"], "word_count": row["word_count"]}
    if row["starts"] >= settings.DOCUMENTS_MAX_STARTS:
        as_read = Document.objects.filter(pk=document_id, state=row["state"],
                                          generation=row["generation"], starts=row["starts"])
        with transaction.atomic():
            if not as_read.update(
                    state=State.FAILED, claim_token=None, finished_at=now, updated_at=now,
                    failure_reason=(
                        f"processing started {row['starts']} times without finishing "
                        "(its worker was lost each time); requeue it once the cause is fixed")):
                return None
            _announce(**announce, state=State.FAILED)
        return Outcome.FAILED
    token = uuid.uuid4()
    write = statements.claim_write(
        document_id=document_id, as_read=row, token=token, worker=worker,
        # Higher in the message: the row was restored from an older backup.
        generation=max(row["generation"], generation or 0),
        task_id=task_id, worker_pid=worker_pid, pid=pid, redelivered=redelivered, now=now)
    # Not flushed at its commit (apps/transactions.py): a crash that loses the claim loses
    # everything after it too (the finish commits through the same log, flushed), and puts
    # the row back as it was before, queued or held by a dead run, which the recovery hands
    # on; the message is acked only after the finish. One flush per document saved. The
    # statements are prepared above: inside, no Python but their execution (statements.py).
    with unsynced_commits(), transaction.atomic():
        run_id = statements.claim(write)
        if run_id is None:
            return None
        _announce(**announce, state=State.PROCESSING)
    return Claim(token=token, run_id=run_id, content=row["content"],
                 owner_id=row["owner_id"], title=row["title"])


def _holder_alive(document_id: int, *, worker: str, worker_pid: int, pid: int,
                  retry_of: str | None) -> bool:
    """Is a run of ``document_id`` still going in a live process?

    ``retry_of``: this delivery's task id when it is a fresh message (not one kombu restored,
    which it marks redelivered: a broken connection's channel restores its unacked messages
    at once, while their runs go on). A fresh message under an existing run's task id is that
    task's retry, which Celery sends only as the attempt returns (after an error such as the
    database going away mid-transaction, when the run could not even be closed): that run is
    over, though its process may be alive and idle, and must not hold the document
    (tests/hosts/test_partitions.py).

    A run of this same worker's pool (a sibling pool process, the usual case after a pool
    process was killed and its message requeued at once) is judged by asking the kernel;
    another worker's by its heartbeat (celery_conf/liveness.py). Runs older than the hard time
    limit are over: no process runs a task past it. Redis unable to say counts as alive: the
    copy is skipped and the recovery decides once Redis answers.
    """
    oldest = timezone.now() - timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT)
    runs = DocumentRun.objects.filter(document_id=document_id, outcome=Outcome.RUNNING,
                                      started_at__gt=oldest)
    if retry_of is not None:
        runs = runs.exclude(task_id=retry_of)
    for run in runs.only("worker", "worker_pid", "pid", "started_at"):
        if run.worker == worker and run.worker_pid == worker_pid:
            if run.pid != pid and _process_exists(run.pid):
                return True
            continue
        try:
            beat = worker_heartbeat(run.worker)
        except RedisError:
            return True
        if run_alive(beat, worker_pid=run.worker_pid, pool_pid=run.pid,
                     since=run.started_at.timestamp()):
            return True
    return False


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, under another user
    return True


def _fenced(document_id: int, claim: Claim):  # type: ignore[no-untyped-def]
    return Document.objects.filter(pk=document_id, state=State.PROCESSING, claim_token=claim.token)


def _close_run(claim: Claim, outcome: str, detail: str = "") -> None:
    DocumentRun.objects.filter(pk=claim.run_id).update(
        outcome=outcome, finished_at=timezone.now(), detail=detail[:1000]
    )


def _finish_done(document_id: int, claim: Claim, result: ProcessingResult) -> str:
    write = statements.done_write(
        document_id=document_id, token=claim.token, run_id=claim.run_id,
        summary=result.summary, word_count=result.word_count, facts=result.facts,
        now=timezone.now())
    with flushed_after_the_lock() as flush, transaction.atomic():
        transaction.on_commit(flush)  # first: durable before the announcement, and the ack
        if not statements.finish_done(write):
            return Outcome.SUPERSEDED
        _announce(document_id=document_id, owner_id=claim.owner_id, title=claim.title,
                  word_count=result.word_count, state=State.DONE)
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
            _announce(document_id=document_id, owner_id=claim.owner_id, title=claim.title,
                      word_count=None, state=State.FAILED)
    return outcome


def _release_for_retry(document_id: int, claim: Claim, reason: str, *,
                       retry_in_s: float) -> bool:
    """Put the document back to queued for the task's retry; False if the claim moved on.

    The retry's message waits out its countdown in the worker that fetches it, in no queue:
    ``retry_at`` tells the recovery so. If the retry's publish fails, the row says queued with
    no message behind it, and the recovery puts it back once ``retry_at`` has passed.
    """
    now = timezone.now()
    with transaction.atomic():
        released = _fenced(document_id, claim).update(
            state=State.QUEUED, failure_reason=f"retrying: {reason}", claim_token=None,
            retry_at=now + timedelta(seconds=retry_in_s), updated_at=now,
        )
        _close_run(claim, Outcome.RETRYING, reason)
        if released:
            _announce(document_id=document_id, owner_id=claim.owner_id, title=claim.title,
                      word_count=None, state=State.QUEUED)
    return bool(released)


def documents_requeue_failed(*, document_ids: list[int] | None = None) -> list[int]:
    """Put failed documents back in the queue with a fresh start count; returns their ids."""
    failed = Document.objects.filter(state=State.FAILED)
    if document_ids is not None:
        failed = failed.filter(pk__in=document_ids)
    requeued: list[int] = []
    for document_id, generation in failed.values_list("pk", "generation"):
        updated = Document.objects.filter(pk=document_id, state=State.FAILED).update(
            state=State.QUEUED, starts=0, failure_reason="", finished_at=None, retry_at=None,
            generation=generation + 1, updated_at=timezone.now(),
        )
        if updated:
            document_enqueue(document_id=document_id, generation=generation + 1)
            document_announce(document_id=document_id, state=State.QUEUED)
            requeued.append(document_id)
    return requeued


def document_announce(*, document_id: int, state: str) -> None:
    """Tell the owner's open pages about a state change, once it is committed."""
    row = Document.objects.filter(pk=document_id).values("owner_id", "title", "word_count").first()
    if row is not None:
        _announce(document_id=document_id, state=state, **row)


def _announce(*, document_id: int, owner_id: int, title: str, word_count: int | None,
              state: str) -> None:
    """document_announce from what the caller already holds: no read inside its transaction."""
    publish_event_on_commit(kind="document.state", user_id=owner_id, data={
        "id": document_id, "state": str(state), "title": title, "word_count": word_count,
    })
