"""A lease lasts exactly as long as the work: renewed through a warm shutdown, and never
removed by the ack of a copy that lost its claim.

Real redis-server and workers; a deploy's SIGTERM, a frozen main process (SIGSTOP) to force a
second copy of one message, and a SIGKILL of the copy that holds the claim.
"""

from __future__ import annotations

import signal
from typing import Any

import pytest

from tests.documents.broker import FAST_LEASES, unacked_tags
from tests.documents.tally import all_finished, sample_text, tally
from tests.procs import wait_until

pytestmark = pytest.mark.processes


def runs_of(stack: Any, doc_id: int) -> list[tuple[str, str]]:
    return [(r[0].split("@")[0], r[1]) for r in stack.query(
        "SELECT worker, outcome FROM documents_documentrun WHERE document_id = ? ORDER BY id",
        doc_id)]


def test_a_deploy_keeps_renewing_a_long_document_until_it_is_done_once(make_stack, measure):
    # 14 s of work against a 6 s visibility timeout: without renewal through the warm
    # shutdown, w2's sweep would restore and start it again about 7 s after the SIGTERM.
    stack = make_stack(env={**FAST_LEASES, "DOCUMENTS_PROCESSING_SECONDS": "14"})
    w1 = stack.start_worker("w1", concurrency=1)
    client = stack.start_web(workers=1).session()
    doc_id = client.submit(sample_text(1))
    wait_until(lambda: runs_of(stack, doc_id) == [("w1", "running")], timeout=30,
               what="w1 runs the document")
    stack.start_worker("w2", concurrency=1)  # sweeping for expired leases the whole time
    w1.signal(signal.SIGTERM)  # warm shutdown: the consumer stops, the pool finishes
    wait_until(lambda: all_finished(stack, [doc_id]), timeout=60, what="the document ends")
    assert w1.wait_exit(timeout=30) == 0

    result = tally(stack, [doc_id])
    assert runs_of(stack, doc_id) == [("w1", "done")]
    assert result.completed == 1 and result.extra_starts == 0 and result.doubled == 0
    assert unacked_tags(stack, doc_id) == []
    measure(**result.as_dict(), task_seconds=14, visibility_timeout_s=6)


def test_the_ack_of_a_superseded_copy_leaves_the_claim_holders_lease(make_stack, measure):
    stack = make_stack(env={**FAST_LEASES, "DOCUMENTS_PROCESSING_SECONDS": "10"})
    w1 = stack.start_worker("w1", concurrency=1)
    w2 = stack.start_worker("w2", concurrency=1)
    client = stack.start_web(workers=1).session()
    doc_id = client.submit(sample_text(1))
    first = wait_until(lambda: [w for w, o in runs_of(stack, doc_id) if o == "running"],
                       timeout=30, what="a worker runs the document")[0]
    holder, other = (w1, w2) if first == "w1" else (w2, w1)

    # Freeze the first worker's main process (its pool child keeps running the document):
    # its lease lapses, the other worker restores the message and takes the claim. Both
    # copies now share one delivery tag.
    holder.signal(signal.SIGSTOP)
    wait_until(lambda: len(runs_of(stack, doc_id)) == 2, timeout=30,
               what="the other worker starts a second copy")
    holder.signal(signal.SIGCONT)
    tag = unacked_tags(stack, doc_id)
    assert len(tag) == 1

    # The first copy finishes: its result is dropped and it must not ack the shared tag.
    wait_until(lambda: runs_of(stack, doc_id)[0][1] == "superseded", timeout=30,
               what="the first copy finishes, superseded")
    wait_until(lambda: "superseded" in holder.log(), timeout=10,
               what="the first worker handled its superseded copy")
    assert unacked_tags(stack, doc_id) == tag, "the superseded copy removed the live lease"

    # Kill the copy holding the claim: its lease expires and the first worker runs it again.
    other.signal(signal.SIGKILL, group=True)
    wait_until(lambda: all_finished(stack, [doc_id]), timeout=60,
               what="the document is finished after the claim holder died")
    result = tally(stack, [doc_id])
    outcomes = [o for _, o in runs_of(stack, doc_id)]
    assert outcomes == ["superseded", "superseded", "done"]
    assert result.completed == 1 and result.doubled == 0
    measure(**result.as_dict(), runs=len(outcomes))
