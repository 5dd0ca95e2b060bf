"""The claim's and the finish's SQL write what the ORM would: read back through the ORM.

The statements (apps/documents/statements.py) convert their values with the fields' own
``get_db_prep_value``; these tests read every written column back through the models, on
the test run's database (SQLite in the first pass, PostgreSQL in the second), and compare
dates with dates the ORM wrote, so a stored format that sorted or compared differently
would fail here.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from apps.documents import statements
from apps.documents.models import Document, DocumentFact, DocumentRun

pytestmark = pytest.mark.django_db


@pytest.fixture
def document(django_user_model) -> Document:
    owner = django_user_model.objects.create_user(username="s", password="pw-owner-123")
    return Document.objects.create(owner=owner, title="t", source="paste", content="x y",
                                   size_bytes=3)


def claim(document: Document, *, now, token: uuid.UUID, as_read: dict | None = None):
    write = statements.claim_write(
        document_id=document.pk, token=token, worker="w@h", generation=3, task_id="task-1",
        worker_pid=10, pid=11, redelivered=True, now=now,
        as_read=as_read or {"state": document.state, "generation": document.generation,
                            "starts": document.starts})
    with transaction.atomic():
        return statements.claim(write)


def test_a_claim_writes_the_row_the_run_and_supersedes_running_runs(document: Document):
    dead = DocumentRun.objects.create(document=document, task_id="old", worker="v@h", pid=5)
    now = timezone.now()
    token = uuid.uuid4()
    run_id = claim(document, now=now, token=token)

    row = Document.objects.get(pk=document.pk)
    assert (row.state, row.claim_token, row.starts, row.processed_by, row.retry_at,
            row.updated_at, row.generation) == ("processing", token, 1, "w@h", None, now, 3)
    run = DocumentRun.objects.get(pk=run_id)
    assert (run.document_id, run.task_id, run.worker, run.worker_pid, run.pid, run.redelivered,
            run.outcome, run.started_at, run.detail, run.finished_at) == (
        document.pk, "task-1", "w@h", 10, 11, True, "running", now, "", None)
    dead.refresh_from_db()
    assert (dead.outcome, dead.finished_at, dead.detail) == (
        "superseded", now, statements.SUPERSEDED_DETAIL)
    # Stored as the ORM stores dates: comparisons and ordering against its own rows hold.
    later = DocumentRun.objects.create(document=document, task_id="later", worker="u@h", pid=6)
    assert list(DocumentRun.objects.filter(document=document).order_by("started_at")
                .values_list("task_id", flat=True)) == ["old", "task-1", "later"]
    assert DocumentRun.objects.filter(pk=run_id, started_at__lt=later.started_at,
                                      started_at__gt=now - timedelta(microseconds=1)).exists()
    assert Document.objects.filter(pk=document.pk, claim_token=token).exists()


def test_a_claim_on_a_row_that_moved_writes_nothing(document: Document):
    stale = {"state": "queued", "generation": document.generation, "starts": 7}
    assert claim(document, now=timezone.now(), token=uuid.uuid4(), as_read=stale) is None
    assert not DocumentRun.objects.exists()
    row = Document.objects.get(pk=document.pk)
    assert (row.state, row.starts, row.claim_token) == ("queued", 0, None)


def test_a_finish_writes_the_result_the_facts_and_closes_the_run(document: Document):
    token = uuid.uuid4()
    run_id = claim(document, now=timezone.now(), token=token)
    now = timezone.now()
    facts = [("email", "a@example.com"), ("keyword", "ünïcödé \u2028")]
    write = statements.done_write(document_id=document.pk, token=token, run_id=run_id,
                                  summary="S.", word_count=2, facts=facts, now=now)
    with transaction.atomic():
        assert statements.finish_done(write) is True

    row = Document.objects.get(pk=document.pk)
    assert (row.state, row.summary, row.word_count, row.failure_reason, row.claim_token,
            row.finished_at, row.updated_at) == ("done", "S.", 2, "", None, now, now)
    assert sorted(DocumentFact.objects.filter(document=document)
                  .values_list("kind", "value")) == sorted(facts)
    run = DocumentRun.objects.get(pk=run_id)
    assert (run.outcome, run.finished_at, run.detail) == ("done", now, "")


def test_a_finish_whose_claim_moved_on_only_closes_its_run(document: Document):
    run_id = claim(document, now=timezone.now(), token=uuid.uuid4())
    write = statements.done_write(document_id=document.pk, token=uuid.uuid4(), run_id=run_id,
                                  summary="S.", word_count=2, facts=[("number", "1")],
                                  now=timezone.now())
    with transaction.atomic():
        assert statements.finish_done(write) is False

    assert Document.objects.get(pk=document.pk).state == "processing"
    assert not DocumentFact.objects.exists()
    run = DocumentRun.objects.get(pk=run_id)
    assert (run.outcome, run.detail) == ("superseded", statements.DROPPED_DETAIL)


@pytest.mark.django_db(transaction=True)
def test_a_submit_inserts_the_row_the_orm_would(django_user_model):
    owner = django_user_model.objects.create_user(username="i", password="pw-owner-123")
    fields = dict(owner=owner, title="t\u00e9\U0001f600", source="upload", filename="a.txt",
                  content="x \u4e2d y", size_bytes=7)
    by_orm = Document.objects.create(**fields)
    document = Document(**fields)
    statements.submit(document)
    assert document.pk is not None and document.pk > by_orm.pk
    mine, theirs = (Document.objects.filter(pk=d.pk).values().get() for d in (document, by_orm))
    for row in (mine, theirs):
        del row["id"]
    dates = ("created_at", "updated_at")
    assert {k: v for k, v in mine.items() if k not in dates} == {
        k: v for k, v in theirs.items() if k not in dates}
    assert mine["state"] == "queued" and mine["generation"] == 0 and mine["starts"] == 0
    for name in dates:  # stored as the ORM stores them: compared and ordered with its dates
        assert theirs[name] <= mine[name] <= timezone.now()
        assert Document.objects.filter(**{f"{name}__gte": theirs[name]}).count() == 2
    assert document.created_at == mine["created_at"]  # set on the instance too


def test_a_submit_inside_a_transaction_is_refused(django_user_model):
    owner = django_user_model.objects.create_user(username="j", password="pw-owner-123")
    with transaction.atomic(), pytest.raises(RuntimeError, match="outside atomic"):
        statements.submit(Document(owner=owner, title="t", source="paste", content="x",
                                   size_bytes=1))


def test_the_claims_read_gives_what_the_orm_gives(document: Document):
    Document.objects.filter(pk=document.pk).update(word_count=5, title="\u00e9\U0001f600",
                                                   starts=2, generation=4)
    expected = Document.objects.filter(pk=document.pk).values(*statements.READ_KEYS).get()
    got = statements.read(document.pk)
    assert got == expected
    assert [type(v) for v in got.values()] == [type(v) for v in expected.values()]
    assert statements.read(document.pk + 1000) is None
