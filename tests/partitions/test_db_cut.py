"""PostgreSQL unreachable from one worker host mid-commit, Redis still reachable.

PostgreSQL listens on a segment of its own (tests/netns.py's db segment), so hostB's link to
the database alone is cut, two thirds into a long document: its result's commit meets the
cut. The worker stays alive by Redis (its heartbeat goes on), so nothing hands the document
on; the commit fails once the connection drops (``DATABASE_TCP_USER_TIMEOUT_S``), the task's
retry policy retries it, and after the heal it is done: once, nothing lost, no effect twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.documents.tally import sample_text
from tests.history import History, check, documents_history
from tests.hosts.cluster import running
from tests.partitions.conftest import Apart, start_apart
from tests.partitions.worker_cut import finished, runs_of, timeline
from tests.procs import Web, wait_until

pytestmark = [pytest.mark.processes, pytest.mark.partitions]

WORK_S = 6
CUT_AT_S = 4  # into the document's work: its commit comes 2 s into the cut
CUT_S = 20  # longer than the connection's 10 s before it drops


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Apart, Web]]:
    cluster = start_apart(tmp_path_factory.mktemp("dbcut"), db_segment=True)
    with running(cluster):
        b, c = cluster.hosts["hostB"], cluster.hosts["hostC"]
        web = c.start_web(workers=1)
        worker = b.start_worker()
        c.start_beat()
        b.wait_worker(worker, cluster.data.redis.client())
        c.wait_web(web)
        yield cluster, web


def test_postgresql_cut_from_a_worker_mid_commit_the_document_is_done_once_after_the_heal(
        started: tuple[Apart, Web], measure) -> None:
    apart, web = started
    history = History()
    doc = web.session().submit(f"#!canary:work-seconds={WORK_S}\n" + sample_text(7),
                               title="db cut")
    history.add("acked", doc, host="client")
    wait_until(lambda: [r for r in runs_of(apart, [doc]) if r[2] == "running"], timeout=30,
               interval=0.05, what="hostB runs the document")
    started_at = time.time()
    while time.time() < started_at + CUT_AT_S:
        time.sleep(0.05)  # into the work: the scenario's timing, not a wait for a condition
    apart.net.cut("hostB", "db")
    cut_at = time.time()
    client = apart.data.redis.client()
    while time.time() < cut_at + CUT_S:
        # Redis is reachable: hostB's worker keeps its heartbeat all through the cut.
        assert client.exists("platform:worker:worker1@hostB"), "hostB's heartbeat lapsed"
        time.sleep(0.5)
    apart.net.heal("hostB", "db")
    healed_at = time.time()
    wait_until(lambda: finished(apart.data, [doc]), timeout=120, interval=0.2,
               what="the document finished after the heal")
    done_after_s = time.time() - healed_at
    documents_history(apart.data, history, [doc])
    verdict = check(history)
    runs = runs_of(apart, [doc])
    measure(cut_s=CUT_S, commit_due_s_into_cut=WORK_S - CUT_AT_S,
            done_after_heal_s=round(done_after_s, 1), runs=len(runs),
            timeline=timeline(apart, [doc], cut_at), **verdict.counts())
    verdict.assert_ok()
    assert verdict.done == 1
    generation = apart.data.query("SELECT generation FROM documents_document WHERE id = ?",
                                  doc)[0][0]
    assert generation == 0, "the recovery handed on a document whose worker was alive"
