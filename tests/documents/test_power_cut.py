"""A power cut of Redis loses the tail of its append-only file; acknowledged documents still finish.

With ``appendfsync everysec`` (adr/0014) a power cut can lose up to about a second of writes
Redis had already answered, among them messages of documents answered 202. The database is
the record: the reconciler (a periodic job of the elected beat) finds those documents queued
with no message behind them and enqueues them again. Real processes throughout; the power
cut is simulated by SIGKILLing Redis and truncating its AOF to where it stood before the last
acknowledged submissions plus a few bytes of the next write (a torn write), which is at most
what an un-fsynced tail can lose.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from celery_conf.queues import queue_lengths
from tests.documents.tally import all_finished, sample_text, tally
from tests.procs import Stack, wait_until

pytestmark = pytest.mark.processes

# Submissions whose messages survive (fsynced before the cut) and whose messages are lost.
KEPT, LOST = 6, 6
# The cut tears the first lost write: a power cut can leave half a command at the file's end.
TORN_BYTES = 11
# Documents done this long after Redis is back, or the test fails: the reconciler's grace and
# period below plus its second look at the broker, with room for a loaded machine. Without a
# reconciler the lost documents stay queued forever and this deadline fails the test.
FINISH_DEADLINE_S = 75
RECONCILER_ENV = {
    # Re-enqueue a queued document untouched this long with no message behind it (the
    # production default, 30 s, only bounds how long the test would wait).
    "DOCUMENTS_RECONCILE_AFTER_S": "3",
    "PLATFORM_RECONCILE_EVERY_S": "5",
}


def aof_tail(stack: Stack) -> Path:
    """The incremental file Redis 7 appends to (multi-part AOF, ``appendonlydir``)."""
    files = sorted((stack.redis.dir / "appendonlydir").glob("*.incr.aof"),
                   key=lambda p: int(p.name.split(".")[-3]))
    assert files, "Redis runs with appendonly yes (platform/redis.conf)"
    return files[-1]


def queued_message_count(stack: Stack) -> int:
    return queue_lengths(stack.redis.client(), ["documents"])["documents"]


def test_power_cut_losing_the_aof_tail_loses_no_acknowledged_document(make_stack, measure):
    stack = make_stack(env={"DOCUMENTS_PROCESSING_SECONDS": "0.2", **RECONCILER_ENV})
    client = stack.start_web(workers=2).session()

    # No worker yet: every message waits in the queue, so the file's tail holds exactly the
    # submissions made after the cut point.
    kept = [client.submit(sample_text(i)) for i in range(KEPT)]
    wait_until(lambda: queued_message_count(stack) == KEPT, timeout=10,
               what="the kept submissions' messages are queued")
    tail = aof_tail(stack)
    cut_at = tail.stat().st_size
    lost = [client.submit(sample_text(KEPT + i)) for i in range(LOST)]  # each answered 202
    assert queued_message_count(stack) == KEPT + LOST

    stack.redis.kill(signal.SIGKILL)
    thrown_away = tail.stat().st_size - cut_at - TORN_BYTES
    assert thrown_away > 0
    with tail.open("r+b") as f:  # the power cut: what was not yet on the disk is gone
        f.truncate(cut_at + TORN_BYTES)
    stack.redis.restart()
    restarted_at = time.monotonic()
    # Redis loaded the shortened file, dropping the torn command (aof-load-truncated): the
    # kept messages are back, the lost ones are not.
    assert "loaded anyway because aof-load-truncated is enabled" in stack.redis.proc.log()
    assert queued_message_count(stack) == KEPT, "Redis restarted from the truncated AOF"

    stack.start_worker("w1", concurrency=2)
    stack.start_elected_beat("beat1")
    ids = kept + lost
    wait_until(lambda: all_finished(stack, ids), timeout=FINISH_DEADLINE_S, interval=0.5,
               what="every acknowledged document finishes after the power cut")
    finished_after = time.monotonic() - restarted_at

    result = tally(stack, ids)
    assert result.lost == 0 and result.failed == 0, result
    assert result.doubled == 0, result
    # The rows behind those 202s were committed with a synced WAL (adr/0014).
    pragma = stack.manage("shell", "-c", "from django.db import connection; "
                          "c = connection.cursor(); c.execute('PRAGMA synchronous'); "
                          "print(c.fetchone()[0])")
    assert pragma.stdout.strip().splitlines()[-1] == "2", "SQLite synchronous=FULL (WAL)"
    measure(**result.as_dict(), aof_bytes_thrown_away=thrown_away, messages_lost_by_redis=LOST,
            all_done_after_restart_s=round(finished_after, 1))
