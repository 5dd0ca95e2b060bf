"""Task states mean what they say, in Celery's own event stream (what Flower shows).

Real worker and Redis, and a real event receiver: a failed document is task-failed, a
finished one task-succeeded ("done"), a redelivery of a finished document task-succeeded
("skipped"), and a copy whose claim was taken by a later copy task-rejected.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any

import pytest
from celery import Celery

from tests.documents.tally import all_finished, sample_text
from tests.procs import wait_until

pytestmark = pytest.mark.processes


class EventLog:
    """A real celery.events.Receiver on the Stack's Redis, on a thread, collecting task events."""

    def __init__(self, broker_url: str) -> None:
        self.app = Celery(broker=broker_url)
        self.app.conf.broker_connection_retry_on_startup = True
        self.by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.worker_events = 0
        self.receiver: Any = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _on_event(self, event: dict[str, Any]) -> None:
        if "uuid" in event:
            self.by_task[event["uuid"]].append(event)
        elif event.get("type", "").startswith("worker-"):
            self.worker_events += 1

    def _run(self) -> None:
        with self.app.connection() as conn:
            self.receiver = self.app.events.Receiver(conn, handlers={"*": self._on_event})
            self.receiver.capture(limit=None, timeout=None, wakeup=True)

    def types(self, task_id: str) -> list[str]:
        return [e["type"] for e in self.by_task.get(task_id, [])]

    def close(self) -> None:
        if self.receiver is not None:
            self.receiver.should_stop = True
        self.thread.join(timeout=10)


def task_ids(stack: Any, doc_id: int) -> list[str]:
    return [r[0] for r in stack.query(
        "SELECT task_id FROM documents_documentrun WHERE document_id = ? ORDER BY id", doc_id)]


@pytest.mark.all_configs
def test_failed_skipped_and_superseded_deliveries_show_as_such_in_celery_events(make_stack):
    stack = make_stack(env={"DOCUMENTS_PROCESSING_SECONDS": "3"})
    events = EventLog(stack.redis.url)
    try:
        stack.start_worker("w1", concurrency=2)
        # Flower turns events on this way, whatever the worker's own setting.
        events.app.control.enable_events()
        # The receiver is bound once the worker's own events reach it.
        wait_until(lambda: events.worker_events, timeout=30, what="worker events arrive")
        client = stack.start_web(workers=1).session()
        good = client.submit(sample_text(1))
        bad = client.submit("12 34 !!")  # no words: fails without retry
        wait_until(lambda: all_finished(stack, [good, bad]), timeout=60, what="both finish")
        [good_task], [bad_task] = task_ids(stack, good), task_ids(stack, bad)

        # A second message for the finished document: a redelivery, skipped.
        skipped = events.app.send_task("documents.process", args=[good], queue="documents")
        # Two copies of one document at once: the later claim supersedes the earlier copy.
        twice = client.submit(sample_text(2))
        wait_until(lambda: task_ids(stack, twice), timeout=30, what="the first copy starts")
        events.app.send_task("documents.process", args=[twice], queue="documents")
        # Each event is sent after its row is committed: wait for the events themselves.
        wait_until(lambda: all_finished(stack, [twice]) and
                   len(runs := task_ids(stack, twice)) == 2 and
                   len(events.types(runs[0])) >= 3 and
                   "task-succeeded" in events.types(runs[1]) and
                   "task-succeeded" in events.types(skipped.id),
                   timeout=60, what="every delivery reported")
        first_copy, second_copy = task_ids(stack, twice)

        assert "task-failed" in events.types(bad_task)
        assert "task-succeeded" not in events.types(bad_task)
        failed = next(e for e in events.by_task[bad_task] if e["type"] == "task-failed")
        assert "DocumentFailed" in failed["exception"] and "no words" in failed["exception"]
        succeeded = {t: e["result"] for t, evs in events.by_task.items() for e in evs
                     if e["type"] == "task-succeeded"}
        assert succeeded[good_task] == "'done'"
        assert succeeded[skipped.id] == "'skipped'"
        assert "task-rejected" in events.types(first_copy)
        assert "task-succeeded" not in events.types(first_copy)
        assert succeeded[second_copy] == "'done'"
        outcomes = [r[0] for r in stack.query(
            "SELECT outcome FROM documents_documentrun WHERE document_id = ? ORDER BY id",
            twice)]
        assert outcomes == ["superseded", "done"]
    finally:
        events.close()
