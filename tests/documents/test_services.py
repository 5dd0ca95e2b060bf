"""The processing state machine: one result per document, however often it is delivered.

Pure state logic against the test database; the broker is not involved (the process tests in
test_durability.py prove the same property with real redeliveries).
"""

from __future__ import annotations

import pytest
from django.test import override_settings

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


def deliver(document: Document, *, task_id: str = "t1", final: bool = False) -> str:
    return services.document_process(document_id=document.pk, task_id=task_id, worker="w@h",
                                     pid=1, redelivered=False, final_attempt=final)


@override_settings(DOCUMENTS_PROCESSING_SECONDS=0)
def test_a_delivery_finishes_the_document_with_one_set_of_facts(document: Document):
    assert deliver(document) == "done"
    document.refresh_from_db()
    assert document.state == "done" and document.starts == 1
    assert document.summary.startswith("Ship it.")
    assert ("email", "a@example.com") in document.facts.values_list("kind", "value")


@override_settings(DOCUMENTS_PROCESSING_SECONDS=0)
def test_a_redelivery_after_done_is_skipped_and_adds_nothing(document: Document):
    deliver(document)
    facts = document.facts.count()
    assert deliver(document, task_id="t1") == "skipped"
    document.refresh_from_db()
    assert document.starts == 1 and document.facts.count() == facts
    assert document.runs.count() == 1


@override_settings(DOCUMENTS_PROCESSING_SECONDS=0)
def test_overlapping_runs_leave_exactly_one_result(document: Document):
    first = services._claim(document_id=document.pk, task_id="a", worker="w1", pid=1,
                            redelivered=False)
    second = services._claim(document_id=document.pk, task_id="a", worker="w2", pid=2,
                             redelivered=True)
    assert first and second and first.token != second.token
    result = services.process_text(TEXT)
    assert services._finish_done(document.pk, second, result) == "done"
    assert services._finish_done(document.pk, first, result) == "superseded"
    document.refresh_from_db()
    assert document.facts.count() == len(result.facts)
    outcomes = list(document.runs.order_by("id").values_list("outcome", flat=True))
    assert outcomes == ["superseded", "done"]


@override_settings(DOCUMENTS_PROCESSING_SECONDS=0, DOCUMENTS_MAX_STARTS=3)
def test_a_document_whose_worker_is_always_lost_fails_after_max_starts(document: Document):
    for n in range(3):  # three starts that never finish (the worker died each time)
        assert services._claim(document_id=document.pk, task_id="t", worker="w", pid=n,
                               redelivered=bool(n))
    # Failed, not skipped: the task turns it into a FAILURE state (apps/documents/tasks.py).
    assert deliver(document) == "failed"
    document.refresh_from_db()
    assert document.state == "failed" and "started 3 times" in document.failure_reason


@override_settings(DOCUMENTS_PROCESSING_SECONDS=0)
def test_transient_failure_requeues_then_fails_on_the_final_attempt(document: Document):
    document.content = f"Some words.\n{TRANSIENT_FAILURE_CANARY}\n"
    document.save()
    with pytest.raises(TransientProcessingError):
        deliver(document)
    document.refresh_from_db()
    assert document.state == "queued" and document.failure_reason.startswith("retrying:")
    assert deliver(document, final=True) == "failed"
    document.refresh_from_db()
    assert document.state == "failed" and "gave up after retries" in document.failure_reason
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
    assert services.document_process(document_id=pk, task_id="t", worker="w", pid=1,
                                     redelivered=False, final_attempt=False) == "skipped"


@override_settings(DOCUMENTS_PROCESSING_SECONDS=0)
def test_a_retry_of_a_run_that_lost_its_claim_is_superseded_not_retried(document: Document):
    document.content = f"Some words.\n{TRANSIENT_FAILURE_CANARY}\n"
    document.save()
    first = services._claim(document_id=document.pk, task_id="a", worker="w1", pid=1,
                            redelivered=False)
    services._claim(document_id=document.pk, task_id="a", worker="w2", pid=2, redelivered=True)
    assert isinstance(first, services.Claim)
    assert services._release_for_retry(document.pk, first, "boom") is False
    document.refresh_from_db()
    assert document.state == "processing"  # the later run's claim stands
