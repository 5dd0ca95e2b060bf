"""The document state machine's claim under truly concurrent deliveries, on either engine.

On SQLite one writer at a time serialises every claim; on PostgreSQL two worker processes
claim the same row at the same instant and only the claim's compare-and-set (an UPDATE that
changes the row only if it is still as the claim read it, adr/0043; before, SELECT ... FOR
UPDATE) and the token-fenced UPDATE keep one result per document. Each document's message is
sent twice, back to back, to two workers with two pool processes each, so the copies start
together: the second claim finds the row changed, reads it again, finds the first run alive
and skips (adr/0030).
"""

from __future__ import annotations

import pytest
from celery import Celery

from celery_conf.queues import queue_keys
from tests.documents.tally import sample_text, tally
from tests.procs import wait_until

pytestmark = [pytest.mark.processes, pytest.mark.all_configs]

DOCUMENTS = 12


def test_two_copies_of_each_document_delivered_at_once_give_one_result_each(
        make_stack, measure):
    stack = make_stack(env={"DOCUMENTS_PROCESSING_SECONDS": "0.5"})
    client = stack.start_web(workers=1).session()
    ids = [client.submit(sample_text(n)) for n in range(DOCUMENTS)]
    # Replace the queued messages with two copies of each, adjacent: the two copies are
    # taken by two pool processes within milliseconds of each other.
    stack.redis.client().delete(*queue_keys("documents"))
    app = Celery(broker=stack.redis.url)
    for doc_id in ids:
        for _ in range(2):
            app.send_task("documents.process", args=[doc_id], queue="documents")
    app.close()
    stack.start_worker("w1", concurrency=2, wait=False)
    stack.start_worker("w2", concurrency=2, wait=False)

    wait_until(lambda: tally(stack, ids).completed == DOCUMENTS, timeout=120,
               what="every document done")
    wait_until(lambda: not stack.query(
        "SELECT 1 FROM documents_documentrun WHERE outcome = 'running'"), timeout=30,
        what="every run closed")
    result = tally(stack, ids)
    outcomes = dict(stack.query(
        "SELECT outcome, COUNT(*) FROM documents_documentrun GROUP BY outcome"))
    logs = "\n".join(p.log() for p in stack.procs)
    measure(engine=stack.engine, **result.as_dict(), runs=outcomes,
            copies_skipped_live=logs.count("being processed by a live run"))
    assert (result.completed, result.failed, result.lost, result.doubled) == (DOCUMENTS, 0, 0, 0)
    # One run per document: the second copy of each never took the claim from a live run.
    assert outcomes == {"done": DOCUMENTS}
    # The copies really overlapped: a copy found its document's run going at least once
    # (a copy arriving after the result is skipped without that line).
    assert "being processed by a live run" in logs
    # Every claim counted: without the row lock two claims read the same ``starts`` and one
    # increment is lost (the token fence alone still keeps one result).
    assert sum(outcomes.values()) == DOCUMENTS + result.extra_starts
    assert "IntegrityError" not in logs and "could not serialize" not in logs
