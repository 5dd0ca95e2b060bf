"""A worker SIGKILLed while it holds kombu's restore lock (``unacked_mutex``) still has its
documents restarted within the redelivery bound: the lock's expiry is set in the policy.

Real redis-server and workers. The test watches Redis for the lock (keyspace
events) and, the moment it is taken, pauses Redis writes (CLIENT PAUSE WRITE) so the holder
cannot release it, SIGKILLs the worker that holds it, and unpauses: the dead worker's lock is
left behind, as a kill during its 1-12 ms hold leaves it in production.
"""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest

from tests.documents.broker import FAST_LEASES
from tests.documents.tally import all_finished, sample_text, tally
from tests.procs import Proc, wait_until

pytestmark = pytest.mark.processes
MUTEX = "unacked_mutex"
# Visibility 6 s + sweep 1 s + the rescuer's start-up; the lock's 3 s expiry runs meanwhile.
# With kombu's default expiry (300 s) the documents would wait about five minutes.
RESTART_BOUND_S = 45


def kill_while_holding_restore_lock(redis: Any, victim: Proc, *, timeout: float) -> float:
    """SIGKILL ``victim`` while it holds the restore lock; returns the lock's TTL after.

    Redis pushes a keyspace event the moment the lock is taken (SET NX), so a test process
    starved of CPU by a loaded machine still wakes within the 1-12 ms hold most times; the
    write pause then keeps the holder from releasing it until the kill has landed.
    """
    redis.config_set("notify-keyspace-events", "K$")
    events = redis.pubsub(ignore_subscribe_messages=True)
    events.subscribe(f"__keyspace@0__:{MUTEX}")
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            event = events.get_message(timeout=1.0)
            if event is None or event["data"] != "set":
                continue
            redis.execute_command("CLIENT", "PAUSE", "2000", "WRITE")
            try:
                if redis.exists(MUTEX):  # still held: its holder cannot release it now
                    victim.signal(signal.SIGKILL, group=True)
                    victim.wait_exit(timeout=10)
                    return float(redis.pttl(MUTEX)) / 1000
            finally:
                redis.execute_command("CLIENT", "UNPAUSE")
    finally:
        events.close()
    raise AssertionError(f"the victim never held {MUTEX} when the test looked")


def test_a_worker_killed_holding_the_restore_lock_has_its_documents_restarted(make_stack,
                                                                              measure):
    stack = make_stack(env={**FAST_LEASES, "DOCUMENTS_PROCESSING_SECONDS": "60"})
    client = stack.start_web(workers=1).session()
    victim = stack.start_worker("victim", concurrency=2)  # the only worker, so the only sweeper
    ids = [client.submit(sample_text(i)) for i in range(2)]
    wait_until(lambda: stack.query("SELECT COUNT(*) FROM documents_documentrun WHERE "
                                   "outcome = 'running'")[0][0] == 2,
               timeout=30, what="the victim runs both documents")

    redis = stack.redis.client()
    # The victim sweeps every second; each sweep is a chance, for as long as it runs documents.
    ttl_after_kill = kill_while_holding_restore_lock(redis, victim, timeout=50)
    killed_at = time.monotonic()
    assert ttl_after_kill > 0, "the lock did not outlive its holder"

    stack.start_worker("rescuer", concurrency=2, DOCUMENTS_PROCESSING_SECONDS="1")

    def restarted() -> bool:
        starts = stack.query("SELECT COUNT(*) FROM documents_documentrun")[0][0]
        return starts >= 4
    wait_until(restarted, timeout=RESTART_BOUND_S, interval=0.2,
               what="the dead lock holder's documents start again")
    restarted_after = time.monotonic() - killed_at
    wait_until(lambda: all_finished(stack, ids), timeout=30, what="both documents finish")
    result = tally(stack, ids)
    assert result.completed == 2 and result.doubled == 0 and result.lost == 0
    measure(**result.as_dict(), lock_ttl_left_at_kill_s=ttl_after_kill,
            restarted_after_kill_s=restarted_after)
