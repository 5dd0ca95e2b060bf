"""PostgreSQL SIGKILLed under the platform, down for a while, then started again:
submissions meanwhile get 503, never 500 and never a false 202; they are accepted again soon
after the restart; every acknowledged document completes exactly once, whether its task's
retries outlast the outage or the reconciler finds it afterwards."""

from __future__ import annotations

import signal
import time

import pytest

from tests.documents.broker import FAST_RECONCILER
from tests.documents.tally import sample_text, tally
from tests.procs import wait_until

pytestmark = pytest.mark.processes

DOWN_S = 6
CASES = {
    # The task's retries (2, 4, 8 s) outlast the outage.
    "retried": {},
    # No retries left: the runs the outage cut short stay "running" under live pool
    # processes; past the hard time limit the reconciler knows they are not.
    "reconciled": {"DOCUMENTS_MAX_RETRIES": "0", "CELERY_TASK_SOFT_TIME_LIMIT": "6",
                   "CELERY_TASK_TIME_LIMIT": "8"},
}


@pytest.mark.parametrize("case", CASES)
def test_postgres_sigkilled_and_restarted_loses_nothing_acknowledged(make_stack, measure, case):
    stack = make_stack(postgres=True, env={
        "DATABASE_POOL_TIMEOUT_S": "2", "DOCUMENTS_PROCESSING_SECONDS": "1",
        **FAST_RECONCILER, **CASES[case]})
    stack.start_worker("w1", concurrency=2)
    stack.start_elected_beat("beat1")
    client = stack.start_web(workers=1).session()
    before = [client.submit(sample_text(n)) for n in range(6)]  # two in flight at the kill

    server = stack.postgres.server
    server.kill(signal.SIGKILL)
    killed_at = time.monotonic()
    statuses_during = []
    while time.monotonic() - killed_at < DOWN_S:
        response = client.post("/api/documents/", json={"title": "down", "text": "Down."})
        statuses_during.append(response.status_code)
    server.start()  # same directory and port: crash recovery, then it answers
    restarted_at = time.monotonic()
    probe: list[int] = []

    def accepted() -> bool:
        response = client.post("/api/documents/", json={"title": "probe", "text": "Probe."})
        if response.status_code == 202:
            probe.append(int(response.json()["id"]))
        return response.status_code == 202

    wait_until(accepted, timeout=60, interval=0.2, what="submissions accepted again")
    resumed_s = time.monotonic() - restarted_at
    after = [client.submit(sample_text(100 + n)) for n in range(4)]

    acknowledged = before + probe + after
    wait_until(lambda: tally(stack, acknowledged).completed == len(acknowledged), timeout=120,
               interval=0.5, what="every acknowledged document done")
    result = tally(stack, acknowledged)
    total = stack.query("SELECT count(*) FROM documents_document")[0][0]
    measure(case=case, **result.as_dict(), refused_during_outage=len(statuses_during),
            resumed_after_restart_s=round(resumed_s, 1),
            all_done_after_kill_s=round(time.monotonic() - killed_at, 1))
    assert statuses_during and set(statuses_during) == {503}, statuses_during
    assert (result.lost, result.doubled, result.failed) == (0, 0, 0), result
    assert total == len(acknowledged)  # nothing from the outage was kept
