"""Transient failures retry with backoff, then the document shows failed with the reason; the
requeue command puts it back. Real worker, real Redis."""

from __future__ import annotations

import pytest

from apps.documents.processing import TRANSIENT_FAILURE_CANARY
from tests.documents.tally import all_finished
from tests.procs import wait_until

pytestmark = pytest.mark.processes


def test_retries_then_failed_then_requeued(make_stack):
    stack = make_stack(env={"DOCUMENTS_PROCESSING_SECONDS": "0", "DOCUMENTS_MAX_RETRIES": "2",
                            "DOCUMENTS_RETRY_BACKOFF": "1"})
    stack.start_worker("w1")
    client = stack.start_web(workers=1).session()
    doc_id = client.submit(f"A canary document.\n{TRANSIENT_FAILURE_CANARY}\n")
    good_id = client.submit("A healthy document. It has words.")
    wait_until(lambda: all_finished(stack, [doc_id, good_id]), timeout=60,
               what="the canary fails after its retries")

    doc = client.get(f"/api/documents/{doc_id}/").json()
    assert doc["state"] == "failed" and "gave up after retries" in doc["failure_reason"]
    assert doc["starts"] == 3  # the first attempt and two retries
    assert client.get(f"/api/documents/{good_id}/").json()["state"] == "done"

    refused = stack.manage("requeue_failed_documents", str(good_id), check=False)
    assert refused.returncode == 1 and "not failed documents" in refused.stderr

    done = stack.manage("requeue_failed_documents", str(doc_id))
    assert f"requeued 1 document(s): [{doc_id}]" in done.stdout
    wait_until(lambda: len(stack.query("SELECT 1 FROM documents_documentrun WHERE document_id=?",
                                       doc_id)) == 6 and all_finished(stack, [doc_id]),
               timeout=60, what="the requeued document runs its retries again")
    assert client.get(f"/api/documents/{doc_id}/").json()["state"] == "failed"
