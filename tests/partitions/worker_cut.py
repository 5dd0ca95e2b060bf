"""The worker-host cut scenario, shared by tests/partitions/test_worker_cut.py (5 s, 30 s)
and loadtests/partitions.py (120 s and repeats): four long documents over two workers of two
slots, hostB cut while it runs two of them, healed after ``cut_s``; returns what happened."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from tests.documents.tally import sample_text
from tests.history import Database, History, Verdict, check, db_time, documents_history
from tests.partitions.conftest import Apart
from tests.procs import Proc, Web, wait_until

DOCS = 4  # two slots per worker, two workers
WORK_S = 10  # each document's simulated work: four heartbeat TTLs (2.5 s)


def start_worker_cut_hosts(apart: Apart) -> tuple[Web, dict[str, Proc]]:
    """hostC: web, a worker (2 slots), the only beat; hostB: a worker (2 slots)."""
    b, c = apart.hosts["hostB"], apart.hosts["hostC"]
    web = c.start_web(workers=1)
    workers = {"hostB": b.start_worker(concurrency=2), "hostC": c.start_worker(concurrency=2)}
    c.start_beat()
    client = apart.data.redis.client()
    for name, proc in workers.items():
        apart.hosts[name].wait_worker(proc, client)
    c.wait_web(web)
    return web, workers


def runs_of(apart: Apart, ids: list[int]) -> list[tuple[int, str, str, datetime]]:
    marks = ",".join("?" * len(ids))
    return [(r[0], r[1], r[2], db_time(r[3])) for r in apart.data.query(
        f"SELECT document_id, worker, outcome, started_at FROM documents_documentrun "
        f"WHERE document_id IN ({marks}) ORDER BY id", *ids)]


def worker_cut(apart: Apart, web: Web, workers: dict[str, Proc], *,
               cut_s: float) -> tuple[Verdict, dict[str, Any]]:
    """Run the scenario once; the history's verdict and the measured numbers."""
    history = History()
    session = web.session()
    ids = []
    for i in range(DOCS):
        doc = session.submit(f"#!canary:work-seconds={WORK_S}\n" + sample_text(i),
                             title=f"cut {cut_s} s #{i}")
        history.add("acked", doc, host="client", at=time.time())
        ids.append(doc)

    def on_b() -> list[int]:
        running = [d for d, worker, outcome, _ in runs_of(apart, ids)
                   if outcome == "running" and worker.endswith("@hostB")]
        return running if len(running) == 2 else []

    cut_docs = wait_until(on_b, timeout=30, interval=0.1, what="hostB runs two documents")
    cut_at = time.time()
    apart.net.cut("hostB")
    # The leading beat (hostC) hands them on once hostB's heartbeat key expires: the
    # generation counts up (heartbeat TTL + at most one recovery pass).
    marks = ",".join("?" * len(cut_docs))
    wait_until(lambda: apart.data.query(
        f"SELECT COUNT(*) FROM documents_document WHERE generation > 0 AND id IN ({marks})",
        *cut_docs)[0][0] == len(cut_docs), timeout=cut_s + 20, interval=0.05,
        what="the recovery hands hostB's documents on")
    handed_on_s = time.time() - cut_at
    # hostC starts them as soon as a slot of its own is free.
    handed_on = wait_until(
        lambda: all(any(d == doc and w.endswith("@hostC") for d, w, _, _ in runs_of(apart, ids))
                    for doc in cut_docs) and runs_of(apart, ids),
        timeout=cut_s + 20, interval=0.1, what="hostC runs what hostB was running")
    taken_over_s = max(at.timestamp() for d, w, _, at in handed_on
                       if d in cut_docs and w.endswith("@hostC")) - cut_at
    while time.time() < cut_at + cut_s:
        time.sleep(0.1)  # the cut lasts its stated time: the scenario, not a wait
    apart.net.heal("hostB")
    healed_at = time.time()
    # hostB's worker rejoins: its heartbeat key is back (the recovery counts it alive).
    client = apart.data.redis.client()
    wait_until(lambda: client.exists("platform:worker:worker1@hostB"), timeout=60,
               interval=0.1, what="hostB's worker heartbeats again after the heal")
    rejoined_s = time.time() - healed_at
    wait_until(lambda: finished(apart.data, ids), timeout=90, interval=0.2,
               what="every document finished")
    finished_s = time.time() - healed_at
    # hostB's late runs end too (dropped by the fence), not left running forever.
    wait_until(lambda: not [r for r in runs_of(apart, ids) if r[2] == "running"],
               timeout=90, interval=0.2, what="hostB's late runs end")
    settled_s = time.time() - healed_at

    documents_history(apart.data, history, ids)
    verdict = check(history)
    late = [(d, o) for d, w, o, _ in runs_of(apart, ids) if d in cut_docs
            and w.endswith("@hostB")]
    return verdict, {
        "cut_s": cut_s, "documents": DOCS, "cut_mid_run": len(cut_docs),
        "handed_on_after_s": round(handed_on_s, 1),
        "started_again_after_s": round(taken_over_s, 1), "late_runs": dict(late),
        "all_done_after_heal_s": round(finished_s, 1),
        "late_runs_ended_after_heal_s": round(settled_s, 1),
        "heartbeat_back_after_heal_s": round(rejoined_s, 1),
        "hostB_worker_alive": workers["hostB"].alive(),
        "timeline": timeline(apart, ids, cut_at), **verdict.counts()}


def finished(db: Database, ids: list[int]) -> bool:
    """Every document done or failed (tests/documents/tally.py's ``all_finished`` re-runs
    each document's processing to count its facts: a long document's whole work time)."""
    marks = ",".join("?" * len(ids))
    return db.query(
        f"SELECT COUNT(*) FROM documents_document WHERE state IN ('done', 'failed') "
        f"AND id IN ({marks})", *ids)[0][0] == len(ids)


def timeline(apart: Apart, ids: list[int], since: float) -> list[str]:
    """Each run: document, node, outcome, start and end in seconds from ``since``."""
    marks = ",".join("?" * len(ids))
    rows = apart.data.query(
        f"SELECT document_id, worker, outcome, started_at, finished_at "
        f"FROM documents_documentrun WHERE document_id IN ({marks}) ORDER BY id", *ids)
    return [f"{r[0]} {r[1]} {r[2]} {db_time(r[3]).timestamp() - since:+.1f}.."
            f"{(db_time(r[4]).timestamp() - since) if r[4] else float('nan'):+.1f}"
            for r in rows]
