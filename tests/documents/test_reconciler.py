"""The database is the record: a document acknowledged with 202 is finished whatever Redis
lost, and one merely waiting in a backlog is never enqueued twice.

Real redis-server, workers, an elected beat firing the reconciler; messages removed from Redis
by hand where Redis would lose them.
"""

from __future__ import annotations

import re
import signal
import time
from datetime import datetime
from typing import Any

import pytest

from tests.documents.broker import (
    FAST_RECONCILER,
    FAST_RECOVERY,
    drop_queued_message,
    drop_unacked_message,
)
from tests.documents.tally import all_finished, sample_text, tally
from tests.procs import wait_until

pytestmark = pytest.mark.processes
# Documents submitted at once to one worker that runs one at a time: most wait in the queue
# far longer than the reconciler's grace period (3 s) while it runs every 2 s.
BACKLOG = 60
RECONCILED = re.compile(r"re-enqueued (\d+) document")


def runs_of(stack: Any, doc_id: int) -> list[str]:
    return [r[0] for r in stack.query(
        "SELECT outcome FROM documents_documentrun WHERE document_id = ? ORDER BY id", doc_id)]


def reconciler_runs(stack: Any) -> list[int]:
    """How many documents each finished run of the periodic reconciler re-enqueued."""
    rows = stack.query("SELECT detail FROM reports_jobrun WHERE job = 'platform.reconcile' "
                       "AND outcome = 'done'")
    return [int(m.group(1)) for r in rows if (m := RECONCILED.search(r[0]))]


@pytest.mark.all_configs
def test_documents_whose_messages_redis_lost_are_finished_by_the_reconciler(make_stack,
                                                                           measure):
    stack = make_stack(env={**FAST_RECOVERY, **FAST_RECONCILER,
                            "DOCUMENTS_PROCESSING_SECONDS": "3"})
    client = stack.start_web(workers=1).session()

    # 1. Lost between BRPOP and ``unacked`` (or with an AOF tail): the 202 was sent, the
    #    message is gone. No worker runs yet, so the message is still in the queue to drop.
    lost_in_queue = client.submit(sample_text(1))
    assert drop_queued_message(stack, lost_in_queue)
    # 2. A retry whose publish failed after _release_for_retry committed queued: the row
    #    says queued and retrying, no message exists.
    lost_retry = client.submit(sample_text(2))
    assert drop_queued_message(stack, lost_retry)
    with stack.db() as conn:
        conn.execute("INSERT INTO documents_documentrun (document_id, task_id, worker, pid, "
                     "redelivered, started_at, finished_at, outcome, detail) VALUES "
                     "(?, 't', 'gone@h', 1, FALSE, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, "
                     "'retrying', 'transient')", (lost_retry,))
        conn.execute("UPDATE documents_document SET starts = 1, failure_reason = "
                     "'retrying: transient' WHERE id = ?", (lost_retry,))
        conn.commit()
    dropped_at = time.monotonic()

    # 3. Stranded: running on w1, its in-flight entry gone (kombu's ``unacked``), then w1
    #    dies. Nothing in any queue, nothing in ``unacked``: only the row knows.
    w1 = stack.start_worker("w1", concurrency=1)
    stranded = client.submit(sample_text(3))
    wait_until(lambda: runs_of(stack, stranded) == ["running"], timeout=30,
               what="w1 runs the document")
    assert drop_unacked_message(stack, stranded)
    w1.signal(signal.SIGKILL, group=True)
    w1.wait_exit(timeout=10)
    stranded_at = time.monotonic()

    stack.start_worker("w2", concurrency=2)
    stack.start_elected_beat("b1")
    finished_after: dict[int, float] = {}
    since = {lost_in_queue: dropped_at, lost_retry: dropped_at, stranded: stranded_at}

    def all_done() -> bool:
        for doc_id, t0 in since.items():
            if doc_id not in finished_after and all_finished(stack, [doc_id]):
                finished_after[doc_id] = time.monotonic() - t0
        return len(finished_after) == len(since)

    wait_until(all_done, timeout=90, interval=0.2, what="the reconciler finishes all three")
    result = tally(stack, list(since))
    assert result.completed == 3 and result.doubled == 0
    assert runs_of(stack, lost_in_queue) == ["done"]
    assert runs_of(stack, lost_retry) == ["retrying", "done"]
    # The dead run is closed (superseded by the recovery's requeue), then done once.
    assert runs_of(stack, stranded) == ["superseded", "done"]
    measure(**result.as_dict(), lost_message_done_after_s=finished_after[lost_in_queue],
            lost_retry_done_after_s=finished_after[lost_retry],
            stranded_done_after_kill_s=finished_after[stranded])


def test_a_backlog_many_times_the_workers_capacity_is_never_re_enqueued(make_stack, measure):
    stack = make_stack(env={**FAST_RECOVERY, **FAST_RECONCILER,
                            "DOCUMENTS_PROCESSING_SECONDS": "0.2"})
    client = stack.start_web(workers=1).session()
    stack.start_worker("w1", concurrency=1)  # capacity: one document at a time
    beat = stack.start_elected_beat("b1")
    ids = [client.submit(sample_text(i)) for i in range(BACKLOG)]
    wait_until(lambda: all_finished(stack, ids), timeout=180, interval=0.5,
               what="the backlog drains")

    passes = reconciler_runs(stack)
    result = tally(stack, ids)
    # Most documents waited far longer than the grace period (3 s), while the leader's
    # recovery looked every second and the reconciler every 2 s...
    waits = [(_when(r[1]) - _when(r[0])).total_seconds() for r in stack.query(
        "SELECT d.created_at, r.started_at FROM documents_document d JOIN "
        "documents_documentrun r ON r.document_id = d.id")]
    assert max(waits) > 3 * 3, f"the backlog never waited long: {max(waits):.1f} s"
    assert passes, "the reconciler never ran"
    # ...and put back none of them: each one's message was behind the queue's watermark.
    assert sum(passes) == 0
    assert "re-enqueued" not in beat.log()
    assert result.completed == BACKLOG and result.extra_starts == 0 and result.doubled == 0
    measure(backlog=BACKLOG, worker_capacity=1, reconciler_passes=len(passes),
            re_enqueued=sum(passes), longest_wait_in_queue_s=round(max(waits), 1))


def _when(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)
