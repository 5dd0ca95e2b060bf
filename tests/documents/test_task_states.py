"""Task states mean what they say, in Celery's own event stream (what Flower shows).

Real worker and Redis, and a real event receiver: a failed document is task-failed, a
finished one task-succeeded ("done"), a redelivery of a finished document task-succeeded
("skipped"), a second copy while the first runs task-succeeded ("skipped"), and a copy whose
claim was taken by a later run (its worker frozen past its heartbeat) task-rejected.
"""

from __future__ import annotations

import signal
import threading
from collections import defaultdict
from typing import Any

import pytest
from celery import Celery

from tests.documents.broker import FAST_RECOVERY
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
    stack = make_stack(env={"DOCUMENTS_PROCESSING_SECONDS": "3", **FAST_RECOVERY})
    events = EventLog(stack.redis.url)
    try:
        stack.start_worker("w1", concurrency=2)
        # Flower turns events on this way, whatever the worker's own setting. Task events are
        # on once a probe's own events arrive (worker events flow either way): a probe is a
        # message for no document, skipped at once.
        probes: list[str] = []

        def task_events_on() -> bool:
            events.app.control.enable_events()
            probes.append(events.app.send_task("documents.process", args=[10**9],
                                               queue="documents").id)
            return any("task-succeeded" in events.types(p) for p in probes)

        wait_until(task_events_on, timeout=30, interval=1.0, what="task events arrive")
        client = stack.start_web(workers=1).session()
        good = client.submit(sample_text(1))
        bad = client.submit("12 34 !!")  # no words: fails without retry
        wait_until(lambda: all_finished(stack, [good, bad]), timeout=60, what="both finish")
        [good_task], [bad_task] = task_ids(stack, good), task_ids(stack, bad)

        # A second message for the finished document: a redelivery, skipped.
        skipped = events.app.send_task("documents.process", args=[good], queue="documents")
        # A second copy of one document while its first copy runs: skipped, the first stands.
        twice = client.submit(sample_text(2))
        wait_until(lambda: task_ids(stack, twice), timeout=30, what="the first copy starts")
        duplicate = events.app.send_task("documents.process", args=[twice], queue="documents")
        # Each event is sent after its row is committed: wait for the events themselves.
        wait_until(lambda: all_finished(stack, [twice]) and
                   "task-succeeded" in events.types(task_ids(stack, twice)[0]) and
                   "task-succeeded" in events.types(duplicate.id) and
                   "task-succeeded" in events.types(skipped.id),
                   timeout=60, what="every delivery reported")

        # A copy whose worker froze past its heartbeat: the leader hands the document on, and
        # the thawed copy's result is dropped.
        w2 = stack.start_worker("w2", concurrency=1)
        # w2 started after the first broadcast: Flower's broadcast again, until w2 has taken
        # it (a broadcast sent before w2 consumes its control queue is lost to it, and it
        # would run the handed-on copy without sending its events).
        wait_until(lambda: " ready." in w2.log(), timeout=60, what="w2 is ready")

        def w2_sends_events() -> bool:
            events.app.control.enable_events()
            return "Events of group {task} enabled by remote" in w2.log()

        wait_until(w2_sends_events, timeout=30, interval=1.0, what="w2 sends task events")
        stack.start_elected_beat("b1")
        frozen = client.submit(sample_text(3) + "\n#!canary:work-seconds=6\n")
        first = wait_until(lambda: stack.query(
            "SELECT worker FROM documents_documentrun WHERE document_id = ?", frozen),
            timeout=30, what="the frozen copy starts")[0][0]
        victim = next(p for p in stack.procs if first.startswith(p.name + "@"))
        victim.signal(signal.SIGSTOP, group=True)
        wait_until(lambda: len(task_ids(stack, frozen)) == 2, timeout=30,
                   what="the leader hands it on")
        victim.signal(signal.SIGCONT, group=True)
        wait_until(lambda: all_finished(stack, [frozen]) and
                   "task-rejected" in events.types(task_ids(stack, frozen)[0]) and
                   "task-succeeded" in events.types(task_ids(stack, frozen)[1]),
                   timeout=60, what="the frozen copy reported")
        first_copy, second_copy = task_ids(stack, frozen)

        assert "task-failed" in events.types(bad_task)
        assert "task-succeeded" not in events.types(bad_task)
        failed = next(e for e in events.by_task[bad_task] if e["type"] == "task-failed")
        assert "DocumentFailed" in failed["exception"] and "no words" in failed["exception"]
        succeeded = {t: e["result"] for t, evs in events.by_task.items() for e in evs
                     if e["type"] == "task-succeeded"}
        assert succeeded[good_task] == "'done'"
        assert succeeded[skipped.id] == "'skipped'"
        assert succeeded[duplicate.id] == "'skipped'"
        assert succeeded[task_ids(stack, twice)[0]] == "'done'"
        assert "task-rejected" in events.types(first_copy)
        # The frozen worker's message may come back once more as its connection recovers
        # (kombu returns a closed channel's unacked messages): an older generation, skipped.
        assert succeeded.get(first_copy) in (None, "'skipped'")
        assert succeeded[second_copy] == "'done'"
        outcomes = [r[0] for r in stack.query(
            "SELECT outcome FROM documents_documentrun WHERE document_id = ? ORDER BY id",
            frozen)]
        assert outcomes == ["superseded", "done"]
    finally:
        events.close()
