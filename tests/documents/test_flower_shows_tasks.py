"""Flower still shows tasks though the workers start with task events off (adr/0015).

A real Flower process beside a real worker: Flower switches events on in the workers while it
runs, so a document submitted after it started is listed by Flower's API with its final state.
"""

from __future__ import annotations

import pytest
import requests

from tests.documents.tally import all_finished, sample_text
from tests.procs import BIN, free_port, spawn, wait_until

pytestmark = pytest.mark.processes


def test_flower_lists_documents_tasks_with_events_off_in_the_policy(make_stack, measure):
    stack = make_stack(env={"DOCUMENTS_PROCESSING_SECONDS": "0.2",
                            "FLOWER_UNAUTHENTICATED_API": "true"})  # loopback, test only
    worker = stack.start_worker("w1", concurrency=2)
    assert "task events: OFF" in worker.log(), "the policy starts workers with events off"
    port = free_port()
    stack.procs.append(spawn("flower", [str(BIN / "celery"), "-A", "celery_conf", "flower",
                                        "--address=127.0.0.1", f"--port={port}"],
                             env=stack.env, log_dir=stack.log_dir))
    api = f"http://127.0.0.1:{port}/api/tasks"
    wait_until(lambda: requests.get(api, timeout=5).ok, timeout=60, what="Flower answers")
    client = stack.start_web(workers=1).session()

    # Flower re-sends enable_events every 5 s; keep submitting until it sees one document.
    ids: list[int] = []

    def flower_saw_a_document() -> bool:
        ids.append(client.submit(sample_text(len(ids))))
        wait_until(lambda: all_finished(stack, ids), timeout=30, what="document done")
        tasks = requests.get(api, timeout=5).json().values()
        return any(t["name"] == "documents.process" and t["state"] == "SUCCESS" for t in tasks)

    wait_until(flower_saw_a_document, timeout=60, interval=1,
               what="Flower lists a finished documents.process task")
    # From then on every task shows up.
    later = [client.submit(sample_text(100 + i)) for i in range(3)]
    wait_until(lambda: all_finished(stack, later), timeout=30, what="three more documents done")

    def flower_lists_all() -> bool:
        tasks = requests.get(api, timeout=5).json().values()
        # Events carry the arguments as their repr: "[5]" or "(5,)".
        shown = {t["args"] for t in tasks
                 if t["name"] == "documents.process" and t["state"] == "SUCCESS"}
        return all(f"[{i}]" in shown or f"({i},)" in shown for i in later)

    wait_until(flower_lists_all, timeout=20, what="Flower lists every later document's task")
    measure(submitted_before_flower_saw_one=len(ids), later_listed=len(later))
