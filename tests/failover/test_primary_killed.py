"""SIGKILL the Redis primary while documents are submitted and processed.

Replication to the replica is asynchronous, so the promoted replica may lack the newest
writes: the messages of documents already answered 202. The database is the record (adr/0013):
the reconciler finds such a document queued with no message behind it and enqueues it again.
Every document answered 202 must complete exactly once; every submission during the failover
gets 202 or 503, nothing else; the old primary comes back as a replica nobody writes to.

A primary's process killed on a live host loses nothing it wrote to the replica's socket (the
kernel delivers it), so the test plays the case that does lose writes, a primary whose host
goes while the replica is behind: the replica is frozen (SIGSTOP), the primary is given more
than the kernel's socket buffers hold (filler), a few more documents are acknowledged, then
the primary is killed and the replica thawed. Their messages never reach it.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from dataclasses import dataclass, field

import pytest
import requests

from tests.documents.tally import all_finished, sample_text, tally
from tests.failover.conftest import db_time
from tests.procs import Client, wait_until

pytestmark = [pytest.mark.processes, pytest.mark.past_one_box]

ENV = {
    "DOCUMENTS_PROCESSING_SECONDS": "0.3",
    # A write lost in the failover is re-enqueued within a few seconds instead of 30 + 60
    # (the production values only set how long this test would wait).
    "DOCUMENTS_RECONCILE_AFTER_S": "3",
    "PLATFORM_RECONCILE_EVERY_S": "2",
}
# Submissions answered 202 after the promotion before the submitter stops.
AFTER_PROMOTION = 15
FINISH_DEADLINE_S = 90
# Written to the primary while the replica is frozen: more than loopback's socket buffers
# (a few MB each way), so what follows stays in the primary's own replication buffer.
FILLER_MB = 32
# Documents acknowledged behind the filler, whose messages the failover loses.
BEHIND_FILLER = 3
REQUEUED = re.compile(r"documents: re-enqueued (\d+) document")


@dataclass
class Submitter:
    """Submits documents one after another and records each answer with its time."""

    client: Client
    answers: list[tuple[float, int, int | None]] = field(default_factory=list)
    answered_at: list[float] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            sent = time.time()
            try:
                response = self.client.post("/api/documents/",
                                            json={"title": "", "text": sample_text(n)})
                status = response.status_code
                doc = int(response.json()["id"]) if status == 202 else None
            except requests.RequestException:
                status, doc = -1, None  # no answer at all: never an acknowledgement
            self.answers.append((sent, status, doc))
            self.answered_at.append(time.time())
            time.sleep(0.05)

    def timed(self) -> list[tuple[float, int, int | None, float]]:
        return [(*a, at) for a, at in zip(self.answers, self.answered_at, strict=False)]

    def accepted(self) -> list[int]:
        return [doc for _, status, doc in self.answers if status == 202 and doc is not None]


def test_primary_sigkilled_under_submissions_loses_and_doubles_nothing(sentinel_stack, measure):
    stack = sentinel_stack(env=ENV)
    group = stack.redis.group
    web = stack.start_web(workers=2)
    workers = [stack.start_worker(f"w{i}") for i in (1, 2)]
    # Two beats, as the platform runs them: a leader whose lock the failover lost exits
    # (LeaseLost, for its supervisor to restart) and the standby leads on; a beat runs the
    # reconciler that brings the lost messages back.
    beats = [stack.start_elected_beat(f"beat{i}") for i in (1, 2)]
    submitter = Submitter(web.session())
    thread = threading.Thread(target=submitter.run, daemon=True)
    thread.start()
    wait_until(lambda: len(submitter.accepted()) >= 10, timeout=30, what="submissions flow")

    primary = group.primary()
    replica = group.replica_of(primary)
    assert replica.proc is not None
    replica.proc.signal(signal.SIGSTOP)
    filler = primary.client()
    for i in range(FILLER_MB):
        filler.set(f"test:filler:{i}", "x" * (1 << 20))
    behind = len(submitter.accepted()) + BEHIND_FILLER
    wait_until(lambda: len(submitter.accepted()) >= behind, timeout=10,
               what="documents acknowledged behind the filler")
    killed_at = time.time()
    old = group.kill_primary()
    replica.proc.signal(signal.SIGCONT)
    new = group.wait_promotion(old)
    promoted_s = time.time() - killed_at
    wait_until(lambda: sum(1 for sent, status, _ in submitter.answers
                           if sent > killed_at and status == 202) >= AFTER_PROMOTION,
               timeout=60, what="submissions answered 202 again after the failover")
    submitter.stop.set()
    thread.join(timeout=30)

    ids = submitter.accepted()
    wait_until(lambda: all_finished(stack, ids), timeout=FINISH_DEADLINE_S, interval=0.5,
               what="every acknowledged document finishes after the failover")
    all_done_s = time.time() - killed_at
    result = tally(stack, ids)
    statuses = [status for _, status, _ in submitter.answers]
    assert set(statuses) <= {202, 503}, f"answers other than 202/503: {sorted(set(statuses))}"
    assert result.lost == 0 and result.failed == 0, result
    assert result.doubled == 0, result

    # Time to resume: the first submission sent after the kill that got a 202, and the first
    # processing run that started after the kill and finished.
    first_202 = min(sent for sent, status, _ in submitter.answers
                    if sent > killed_at and status == 202)
    runs = stack.query("SELECT started_at, finished_at FROM documents_documentrun "
                       "WHERE outcome = 'done'")
    finished_after = [db_time(r[1]) for r in runs if db_time(r[0]) > killed_at]
    # Messages the failover lost (acknowledged to the web, not yet on the replica) come back
    # through the leader's recovery (or the reconciler); each logs a pass that re-enqueued.
    requeued = sum(int(n) for p in workers + beats for n in REQUEUED.findall(p.log()))
    assert requeued >= 1, "no acknowledged message was lost: the test did not test recovery"

    # The old primary comes back as a replica of the new one; no platform process uses it.
    group.bring_back(old)
    assert old.client().info("replication")["role"] == "slave"
    wait_until(lambda: all(w.alive() for w in workers), timeout=1, what="workers alive")
    platform_clients = [c for c in old.client().client_list()
                        if not c["name"].startswith("sentinel-") and "M" not in c["flags"]
                        and c["cmd"] not in ("client|list", "client")]
    assert platform_clients == [], platform_clients
    assert group.primary() is new

    assert any(b.alive() for b in beats), "no beat left to lead"
    measure(**result.as_dict(), answered_503=statuses.count(503),
            beats_exited=sum(1 for b in beats if not b.alive()),
            promoted_after_s=round(promoted_s, 1),
            submissions_resumed_s=round(first_202 - killed_at, 1),
            processing_resumed_s=round(min(finished_after) - killed_at, 1),
            lost_by_failover_reenqueued=requeued, all_done_after_kill_s=round(all_done_s, 1))


def test_primary_frozen_past_the_failover_then_thawed_loses_and_doubles_nothing(sentinel_stack,
                                                                               measure):
    """SIGSTOP instead of SIGKILL, as a host that stops answering without closing its
    connections: requests on them hang until their socket timeout (5 s, celery_conf/
    connections.py), then go through the sentinels to the promoted replica; each gets 202 or
    503. The old primary stays frozen until submissions flow again, then thaws, runs what
    was stuck in its sockets and is demoted and resynced, which throws that away."""
    stack = sentinel_stack(env=ENV)
    group = stack.redis.group
    web = stack.start_web(workers=2)
    workers = [stack.start_worker(f"w{i}") for i in (1, 2)]
    beats = [stack.start_elected_beat(f"beat{i}") for i in (1, 2)]  # as above
    submitter = Submitter(web.session())
    thread = threading.Thread(target=submitter.run, daemon=True)
    thread.start()
    wait_until(lambda: len(submitter.accepted()) >= 10, timeout=30, what="submissions flow")

    frozen_at = time.time()
    old = group.kill_primary(signal.SIGSTOP)
    group.wait_promotion(old)
    promoted_s = time.time() - frozen_at
    # Still frozen: requests stuck on it must time out and go to the new primary.
    wait_until(lambda: sum(1 for sent, status, _ in submitter.answers
                           if sent > frozen_at + promoted_s and status == 202)
               >= AFTER_PROMOTION, timeout=60,
               what="submissions answered 202 by the new primary while the old one is frozen")
    assert old.proc is not None
    old.proc.signal(signal.SIGCONT)
    submitter.stop.set()
    thread.join(timeout=30)
    group.wait_replica_synced(old)

    ids = submitter.accepted()
    wait_until(lambda: all_finished(stack, ids), timeout=FINISH_DEADLINE_S, interval=0.5,
               what="every acknowledged document finishes after the failover")
    result = tally(stack, ids)
    statuses = [status for _, status, _ in submitter.answers]
    assert set(statuses) <= {202, 503}, f"answers other than 202/503: {sorted(set(statuses))}"
    assert result.lost == 0 and result.failed == 0, result
    assert result.doubled == 0, result
    timed = submitter.timed()
    first_202 = min(at for sent, status, _, at in timed if sent > frozen_at and status == 202)
    requeued = sum(int(n) for p in workers + beats for n in REQUEUED.findall(p.log()))
    assert any(b.alive() for b in beats), "no beat left to lead"
    measure(**result.as_dict(), answered_503=statuses.count(503),
            beats_exited=sum(1 for b in beats if not b.alive()),
            promoted_after_s=round(promoted_s, 1),
            first_202_after_freeze_s=round(first_202 - frozen_at, 1),
            reenqueued_by_reconciler=requeued,
            slowest_answer_s=round(max(at - sent for sent, _, _, at in timed), 1))
