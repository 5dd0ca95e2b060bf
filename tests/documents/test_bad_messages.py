"""Messages a worker must refuse: pickled payloads and unknown task names.

Real worker, real Redis.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from kombu import Connection, Exchange, Producer, Queue

from apps.documents.processing import process_text  # noqa: F401  (imports without Django)
from celery_conf.queues import queue_lengths
from tests.documents.tally import all_finished, sample_text
from tests.procs import wait_until

pytestmark = pytest.mark.processes


class WritesAFile:
    """Unpickling this runs code: it would create ``path``. A worker must never unpickle it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (Path.touch, (self.path,))


def publish_raw(redis_url: str, *, task: str, args: list, serializer: str, body=None) -> str:
    task_id = str(uuid.uuid4())
    queue = Queue("documents", Exchange("documents"), routing_key="documents")
    with Connection(redis_url) as conn:
        Producer(conn).publish(
            body if body is not None else (args, {}, {"callbacks": None, "errbacks": None,
                                                     "chain": None, "chord": None}),
            exchange=queue.exchange, routing_key="documents", declare=[queue],
            serializer=serializer,
            headers={"lang": "py", "task": task, "id": task_id, "root_id": task_id,
                     "parent_id": None, "group": None, "retries": 0, "eta": None,
                     "expires": None, "argsrepr": "", "kwargsrepr": "", "origin": "test"},
        )
    return task_id


def test_pickled_message_is_refused_and_never_executed(make_stack, tmp_path, measure):
    stack = make_stack(env={"DOCUMENTS_PROCESSING_SECONDS": "0"})
    worker = stack.start_worker("w1")
    client = stack.start_web(workers=1).session()
    marker = tmp_path / "unpickled-and-ran"

    publish_raw(stack.redis.url, task="documents.process", args=[WritesAFile(marker)],
                serializer="pickle")
    wait_until(lambda: "Refusing to deserialize untrusted content of type pickle" in worker.log(),
               timeout=30, what="the worker refuses the pickled message")

    # The worker is still serving, and the refused message is gone rather than looping.
    doc_id = client.submit(sample_text(1))
    wait_until(lambda: all_finished(stack, [doc_id]), timeout=30, what="a JSON document after it")
    redis = stack.redis.client()
    assert not marker.exists(), "the pickled payload was executed"
    assert queue_lengths(redis, ["documents"]) == {"documents": 0}
    assert redis.hlen("unacked") == 0
    assert worker.alive()
    measure(pickled_refused=1, executed=int(marker.exists()))


def test_unknown_task_name_is_discarded_with_a_clear_log_line(make_stack):
    stack = make_stack(env={"DOCUMENTS_PROCESSING_SECONDS": "0"})
    worker = stack.start_worker("w1")
    publish_raw(stack.redis.url, task="documents.no_such_task", args=[1], serializer="json")
    wait_until(lambda: "Received unregistered task of type 'documents.no_such_task'"
               in worker.log(), timeout=30, what="the worker reports the unknown task")
    redis = stack.redis.client()
    wait_until(lambda: queue_lengths(redis, ["documents"]) == {"documents": 0}
               and redis.hlen("unacked") == 0,
               timeout=10, what="the unknown message is discarded")
    assert worker.alive()
