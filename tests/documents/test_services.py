"""The processing state machine: one result per document, however often it is delivered.

State logic against the test database. Whether a claim holder is alive comes from worker
heartbeats in a real Redis (the ``heartbeats`` fixture) or, for a sibling pool process, from
the kernel; the process tests in test_durability.py and test_recovery.py prove the same
property with real redeliveries.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from apps.documents import services
from apps.documents.models import Document, DocumentRun
from apps.documents.processing import TRANSIENT_FAILURE_CANARY, TransientProcessingError

pytestmark = pytest.mark.django_db
TEXT = "Ship it. Write to a@example.com about 12 crates. Then celebrate the launch."


@pytest.fixture
def document(django_user_model) -> Document:
    owner = django_user_model.objects.create_user(username="o", password="pw-owner-123")
    return Document.objects.create(owner=owner, title="t", source="paste", content=TEXT,
                                   size_bytes=len(TEXT))


def deliver(document: Document, *, task_id: str = "t1", final: bool = False,
            generation: int | None = 0, worker: str = "w@h", worker_pid: int = 100,
            pid: int = 1) -> str:
    return services.document_process(
        document_id=document.pk, generation=generation, task_id=task_id, worker=worker,
        worker_pid=worker_pid, pid=pid, redelivered=False, final_attempt=final, retry_in_s=4)


def claim(document: Document, *, worker: str, worker_pid: int, pid: int,
          generation: int | None = 0, redelivered: bool = True) -> services.Claim | str:
    """A delivery of the document's one message (task id "a"): copies kombu put back are
    marked redelivered; ``redelivered=False`` after a first claim is that task's retry."""
    return services._claim(document_id=document.pk, generation=generation, task_id="a",
                           worker=worker, worker_pid=worker_pid, pid=pid,
                           redelivered=redelivered)


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@override_settings(DOCUMENTS_PROCESSING_SECONDS=0)
def test_a_delivery_finishes_the_document_with_one_set_of_facts(document: Document):
    assert deliver(document) == "done"
    document.refresh_from_db()
    assert document.state == "done" and document.starts == 1
    assert document.summary.startswith("Ship it.")
    assert ("email", "a@example.com") in document.facts.values_list("kind", "value")
    assert DocumentRun.objects.get().worker_pid == 100


@override_settings(DOCUMENTS_PROCESSING_SECONDS=0)
def test_a_redelivery_after_done_is_skipped_and_adds_nothing(document: Document):
    deliver(document)
    facts = document.facts.count()
    assert deliver(document, task_id="t1") == "skipped"
    document.refresh_from_db()
    assert document.starts == 1 and document.facts.count() == facts
    assert document.runs.count() == 1


@override_settings(DOCUMENTS_PROCESSING_SECONDS=0)
def test_a_copy_of_an_older_generation_is_skipped_and_a_message_without_one_runs(
        document: Document):
    Document.objects.filter(pk=document.pk).update(generation=2)
    assert deliver(document, generation=1) == "skipped"  # a late copy the recovery replaced
    assert document.runs.count() == 0
    assert deliver(document, generation=None) == "done"  # sent by the release before


@override_settings(DOCUMENTS_PROCESSING_SECONDS=0)
def test_a_second_copy_while_a_live_run_holds_the_claim_is_skipped(document, heartbeats):
    heartbeats("w1@h", 100, children=[11, 12])
    first = claim(document, worker="w1@h", worker_pid=100, pid=11)
    assert isinstance(first, services.Claim)
    assert claim(document, worker="w2@h", worker_pid=200, pid=21) == services.SKIPPED
    result = services.process_text(TEXT)
    assert services._finish_done(document.pk, first, result) == "done"
    outcomes = list(document.runs.values_list("outcome", flat=True))
    assert outcomes == ["done"]


@override_settings(DOCUMENTS_PROCESSING_SECONDS=0)
@pytest.mark.parametrize("holder", ["key gone", "restarted", "pool process gone"])
def test_a_copy_takes_over_from_a_dead_holder_whose_late_result_is_dropped(
        document, heartbeats, holder):
    first = claim(document, worker="w1@h", worker_pid=100, pid=11)
    # Heartbeats written after the run started (an older one could predate its pool process).
    if holder == "restarted":
        heartbeats("w1@h", 101, children=[13])  # the same name, a new main process
    elif holder == "pool process gone":
        heartbeats("w1@h", 100, children=[12, 13])  # pool process 11 was replaced
    second = claim(document, worker="w2@h", worker_pid=200, pid=21)
    assert isinstance(first, services.Claim) and isinstance(second, services.Claim)
    result = services.process_text(TEXT)
    # The first run was only frozen, not dead: its result arrives late and is dropped.
    assert services._finish_done(document.pk, first, result) == "superseded"
    assert services._finish_done(document.pk, second, result) == "done"
    document.refresh_from_db()
    assert document.facts.count() == len(result.facts)
    outcomes = list(document.runs.order_by("id").values_list("outcome", flat=True))
    assert outcomes == ["superseded", "done"]


@override_settings(DOCUMENTS_PROCESSING_SECONDS=0)
def test_a_sibling_pool_process_is_judged_by_the_kernel(document: Document):
    # The run's pool process died and its message came straight back to the same worker
    # (reject on worker lost), before the heartbeat could list the new pool: no Redis asked.
    gone = claim(document, worker="w1@h", worker_pid=100, pid=dead_pid())
    assert isinstance(gone, services.Claim)
    taken = claim(document, worker="w1@h", worker_pid=100, pid=os.getpid())
    assert isinstance(taken, services.Claim)
    # A sibling that is alive (this test process stands for it) keeps the claim.
    assert claim(document, worker="w1@h", worker_pid=100, pid=dead_pid()) == services.SKIPPED


@override_settings(DOCUMENTS_PROCESSING_SECONDS=0)
def test_a_retry_takes_over_from_its_own_run_whose_process_lives_on(document: Document):
    # The attempt raised (the database dropped mid-transaction) and could not close its run;
    # its pool process (this test process stands for it) lives on, idle. The retry, a fresh
    # message under the same task id, runs on a sibling: it is not held by that run.
    first = claim(document, worker="w1@h", worker_pid=100, pid=os.getpid())
    assert isinstance(first, services.Claim)
    assert claim(document, worker="w1@h", worker_pid=100, pid=dead_pid()) == services.SKIPPED
    retry = claim(document, worker="w1@h", worker_pid=100, pid=dead_pid(), redelivered=False)
    assert isinstance(retry, services.Claim)
    outcomes = list(document.runs.order_by("id").values_list("outcome", flat=True))
    assert outcomes == ["superseded", "running"]


@override_settings(DOCUMENTS_PROCESSING_SECONDS=0, DOCUMENTS_MAX_STARTS=3)
def test_a_document_whose_worker_is_always_lost_fails_after_max_starts(document, heartbeats):
    for n in range(3):  # three starts that never finish (no heartbeat: the worker died)
        assert isinstance(claim(document, worker="w@h", worker_pid=100 + n, pid=n + 1),
                          services.Claim)
    # Failed, not skipped: the task turns it into a FAILURE state (apps/documents/tasks.py).
    assert deliver(document, worker_pid=200) == "failed"
    document.refresh_from_db()
    assert document.state == "failed" and "started 3 times" in document.failure_reason


@override_settings(DOCUMENTS_PROCESSING_SECONDS=0)
def test_transient_failure_requeues_with_its_countdown_then_fails_on_the_final_attempt(
        document: Document):
    document.content = f"Some words.\n{TRANSIENT_FAILURE_CANARY}\n"
    document.save()
    before = timezone.now()
    with pytest.raises(TransientProcessingError):
        deliver(document)
    document.refresh_from_db()
    assert document.state == "queued" and document.failure_reason.startswith("retrying:")
    # The recovery leaves it alone until its retry's countdown (4 s here) has run out.
    assert before + timedelta(seconds=4) <= document.retry_at <= timezone.now() + timedelta(
        seconds=4)
    assert deliver(document, final=True) == "failed"
    document.refresh_from_db()
    assert document.state == "failed" and "gave up after retries" in document.failure_reason
    assert document.retry_at is None
    assert list(document.runs.values_list("outcome", flat=True)) == ["retrying", "failed"]


@override_settings(DOCUMENTS_PROCESSING_SECONDS=0)
def test_a_document_without_words_fails_without_retry(document: Document):
    document.content = "12 34 !!"
    document.save()
    assert deliver(document) == "failed"
    document.refresh_from_db()
    assert document.failure_reason == "the document contains no words to process"
    assert DocumentRun.objects.get().outcome == "failed"


def test_a_deleted_document_is_skipped(document: Document):
    pk = document.pk
    document.delete()
    assert services.document_process(
        document_id=pk, generation=0, task_id="t", worker="w", worker_pid=1, pid=1,
        redelivered=False, final_attempt=False, retry_in_s=1) == "skipped"


@override_settings(DOCUMENTS_PROCESSING_SECONDS=0)
def test_a_retry_of_a_run_that_lost_its_claim_is_superseded_not_retried(document, heartbeats):
    document.content = f"Some words.\n{TRANSIENT_FAILURE_CANARY}\n"
    document.save()
    first = claim(document, worker="w1@h", worker_pid=100, pid=1)  # w1's heartbeat is gone
    claim(document, worker="w2@h", worker_pid=200, pid=2)
    assert isinstance(first, services.Claim)
    assert services._release_for_retry(document.pk, first, "boom", retry_in_s=2) is False
    document.refresh_from_db()
    assert document.state == "processing"  # the later run's claim stands


# The heartbeats fixture's Redis has just started: the pass would wait out a heartbeat's
# lifetime before judging any worker dead (recovery._redis_just_started). Not here.
@override_settings(DOCUMENTS_PROCESSING_SECONDS=0, CELERY_PLATFORM_HEARTBEAT_TTL=0,
                   CELERY_PLATFORM_HEARTBEAT_INTERVAL=0)
def test_a_recovery_pass_that_read_the_row_before_a_takeover_changes_nothing(document, heartbeats):
    # Found by CI (a pool process SIGKILLed while the leader's pass ran): the pass read the
    # document as abandoned, then the killed run's message, put back at once, took over on a
    # sibling (same state, same generation, one more start), then the pass's compare-and-set
    # still matched and superseded that live run. It must see the start and do nothing.
    from apps.documents import recovery
    from celery_conf.connections import redis_client

    assert isinstance(claim(document, worker="w1@h", worker_pid=100, pid=dead_pid()),
                      services.Claim)
    seen = recovery._abandoned(redis_client(), grace=60)  # no heartbeat: its worker is gone
    assert seen == [(document.pk, 0, 1)]
    taken = claim(document, worker="w1@h", worker_pid=100, pid=os.getpid())
    assert isinstance(taken, services.Claim)
    doc, generation, starts = seen[0]
    assert not recovery._requeue(doc, state="processing", generation=generation, starts=starts,
                                 why="test")
    document.refresh_from_db()
    assert (document.state, document.generation, document.starts) == ("processing", 0, 2)
    outcomes = list(document.runs.order_by("id").values_list("outcome", flat=True))
    assert outcomes == ["superseded", "running"]
    assert services._finish_done(document.pk, taken, services.process_text(TEXT)) == "done"


@pytest.mark.django_db(transaction=True)  # commits for real: their callbacks run
@override_settings(DOCUMENTS_PROCESSING_SECONDS=0)
def test_the_finish_is_flushed_before_it_is_announced(document: Document, monkeypatch):
    """The finish commits and then flushes (on SQLite in WAL mode, after the write lock;
    apps/transactions.py): the flush is its first callback, before its announcement and
    before the task returns (Celery acks after). The test databases (SQLite in memory,
    PostgreSQL) have nothing to flush this way, so the flush is watched as the service calls
    it here, and what it does to a file in tests/test_flush_after_the_lock.py."""
    from contextlib import contextmanager

    from apps.events import bus

    order: list[str] = []
    flushed_after_the_lock, publish_event = services.flushed_after_the_lock, bus.publish_event

    @contextmanager
    def watched(*args, **kwargs):  # type: ignore[no-untyped-def]
        with flushed_after_the_lock(*args, **kwargs) as flush:
            def recorded() -> None:
                order.append("flush")
                flush()
            yield recorded

    def publish_spy(**event):  # type: ignore[no-untyped-def]
        order.append(f"announce {event['data']['state']}")
        return publish_event(**event)

    monkeypatch.setattr(services, "flushed_after_the_lock", watched)
    monkeypatch.setattr(bus, "publish_event", publish_spy)
    assert deliver(document) == DocumentRun.Outcome.DONE
    assert order == ["announce processing", "flush", "announce done"]
