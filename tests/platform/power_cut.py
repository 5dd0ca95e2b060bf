"""The whole box losing power, shared by the suite's test (tests/platform/test_power_cut.py)
and the benchmark (loadtests/box_power_cut.py): boot, the cut, the load, and the counting.

The box: Redis, 2 Celery workers (-c 2), 2 elected beats (jobs due every 1-2 s) and 2 web
workers, started with the command lines of ``platform/supervisord.conf`` / the units, Redis
first. The cut: SIGKILL to every process group in one loop. What is counted: documents
acknowledged (202), completed once, lost, completed twice (``documents_documentrun``);
periodic runs per (job, slot) from the workers' "reports: running" lines (more than one is a
slot run twice; the database's fence is checked too); runs cut off mid-run and whether they
now show as ``lost``. SIGKILL loses what the processes held, not the kernel's unwritten
pages: the disk side of a power cut is issue 8b's test.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections import Counter
from typing import Any

from celery_conf import names
from tests.procs import BIN, QUEUES, Client, Stack, Web, spawn

ENV = {
    "REPORTS_ROLLUP_EVERY_S": "1", "REPORTS_DIGEST_EVERY_S": "2", "REPORTS_PURGE_EVERY_S": "2",
    "DOCUMENTS_PROCESSING_SECONDS": "2",
    # The interrupted documents' runs name worker processes that died with the box: the
    # leading beat's recovery hands them on once the restarted Redis has seen the new
    # workers' heartbeats (adr/0030).
}
WORKERS = ("w1", "w2")
BEATS = ("b1", "b2")
# A test-only module a worker can load (celery --include) so the purge is mid-run for seconds.
SLOW_PURGE = "tests.platform.slow_jobs"
RAN = re.compile(r"reports: running (\S+) scheduled slot=(\S+)")


def boot(stack: Stack, *, include: str = "") -> Web:
    """Start everything but Redis (the caller's, first), in the units' order."""
    for name in WORKERS:
        argv = [str(BIN / "celery"), "-A", "celery_conf", "worker", "-n", f"{name}@%h",
                "-Q", QUEUES, "-c", "2", "--loglevel", "INFO"]
        proc = spawn(name, argv + (["--include", include] if include else []),
                     env=stack.env, log_dir=stack.log_dir)
        stack.procs.append(proc)
        stack.wait_worker_ready(name, proc)
    for name in BEATS:
        stack.start_elected_beat(name)
    return stack.start_web(workers=2)


def power_cut(stack: Stack) -> float:
    """SIGKILL every process group of the box in one loop; returns the loop's spread in ms."""
    pids = [p.pid for p in stack.procs if p.alive()]
    assert stack.redis.proc is not None
    pids.append(stack.redis.proc.pid)
    started = time.perf_counter()
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    spread_ms = (time.perf_counter() - started) * 1000
    for proc in stack.procs:
        proc.popen.wait()
    stack.redis.proc.popen.wait()
    stack.procs.clear()
    return spread_ms


class Submitter:
    """A client posting documents at ``rate`` per second; keeps the acknowledged ids."""

    def __init__(self, client: Client, *, rate: float, label: str) -> None:
        self.client, self.rate, self.label = client, rate, label
        self.acked: list[int] = []
        self.refused = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self) -> None:
        i = 0
        while not self.done.is_set():
            i += 1
            try:
                response = self.client.post("/api/documents/", json={
                    "title": f"{self.label} doc {i}", "text": "x" * 200})
                if response.status_code == 202:
                    self.acked.append(int(response.json()["id"]))
                else:
                    self.refused += 1
            except Exception:  # the server is gone: not acknowledged, not counted
                self.refused += 1
            self.done.wait(1 / self.rate)

    def stop(self) -> None:
        self.done.set()
        self.thread.join()


def purge_started_mid_run(stack: Stack, *, within_s: float) -> bool:
    """A purge run started less than ``within_s`` ago is still running (under SLOW_PURGE it
    runs for SLOW_S seconds, so a cut now certainly lands mid-run)."""
    return bool(stack.query(
        "SELECT count(*) FROM reports_jobrun WHERE job = ? AND outcome = 'running' "
        "AND started_at > strftime('%Y-%m-%d %H:%M:%f', 'now', ?)",
        names.REPORTS_RETENTION_PURGE, f"-{within_s} seconds")[0][0])


def running_runs(stack: Stack) -> list[int]:
    return [r[0] for r in stack.query("SELECT id FROM reports_jobrun WHERE outcome = 'running'")]


def processing(stack: Stack) -> int:
    return stack.query("SELECT count(*) FROM documents_document WHERE state = 'processing'")[0][0]


def unfinished(stack: Stack, acked: list[int]) -> int:
    ids = ",".join(map(str, acked)) or "0"
    return stack.query(f"SELECT count(*) FROM documents_document WHERE id IN ({ids}) "
                       "AND state NOT IN ('done', 'failed')")[0][0]


def runs_still_running(stack: Stack, run_ids: list[int]) -> int:
    if not run_ids:
        return 0
    return stack.query(f"SELECT count(*) FROM reports_jobrun WHERE outcome = 'running' "
                       f"AND id IN ({','.join(map(str, run_ids))})")[0][0]


def count(stack: Stack, acked: list[int], cut_runs: list[int]) -> dict[str, Any]:
    """What happened to every acknowledged document and every periodic slot."""
    ids = ",".join(map(str, acked)) or "0"
    done_runs = dict(stack.query(
        f"SELECT document_id, count(*) FROM documents_documentrun WHERE outcome = 'done' "
        f"AND document_id IN ({ids}) GROUP BY document_id"))
    failed = stack.query(f"SELECT count(*) FROM documents_document WHERE id IN ({ids}) "
                         "AND state = 'failed'")[0][0]
    ran = Counter(m.groups() for name in WORKERS
                  for m in RAN.finditer((stack.log_dir / f"{name}.log").read_text(
                      errors="replace")))
    fenced_twice = stack.query(
        "SELECT count(*) FROM (SELECT job, slot FROM reports_jobrun WHERE kind = 'scheduled'"
        " GROUP BY job, slot HAVING count(*) > 1)")[0][0]
    cut_ids = ",".join(map(str, cut_runs)) or "0"
    return {
        "acknowledged": len(acked),
        "completed_once": sum(1 for i in acked if done_runs.get(i) == 1),
        "completed_twice": sum(1 for i in acked if done_runs.get(i, 0) > 1),
        "failed": failed,
        "lost": sum(1 for i in acked if i not in done_runs) - failed,
        "periodic_slots_run": len(ran),
        "slots_run_twice": sum(1 for n in ran.values() if n > 1) + fenced_twice,
        "periodic_running_at_cut": len(cut_runs),
        "periodic_marked_lost": stack.query(
            f"SELECT count(*) FROM reports_jobrun WHERE outcome = 'lost' "
            f"AND id IN ({cut_ids})")[0][0],
        # Slots that fell in the dark: a skip job records them as lost, a catch-up job's next
        # run covers them (ADR 7).
        "periodic_runs_shown_lost": stack.query(
            "SELECT count(*) FROM reports_jobrun WHERE outcome = 'lost'")[0][0],
    }
