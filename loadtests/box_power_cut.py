"""The whole box loses power: every process SIGKILLed at once with documents in flight and
periodic jobs running, then everything started again the way the box starts at boot.

    .venv/bin/python loadtests/box_power_cut.py [--cuts 3] [--rate 4] [--before 8]

Each cut: Redis, 2 Celery workers (-c 2), 2 elected beats (jobs due every 1-2 s) and 2 web
workers run; a client submits documents at --rate per second; after --before seconds every
process gets SIGKILL in one loop (no process outlives another by more than a few ms); then
Redis (from its AOF), the workers, the beats and the web server start again with the same
command lines. Counted: documents acknowledged (202), completed once, lost, completed twice;
periodic runs fired per (job, slot) (more than one would be a slot run twice), runs cut off
mid-run and whether the job's next run marked them lost; the time from restart until every
acknowledged document is done. SIGKILL of every process loses what the processes held, not
the kernel's unwritten pages: a real power cut's disk side is loadtests of issue 8b's.
Prints progress and a table; writes loadtests/results/box_power_cut.{json,png}.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.common import new_figure, progress, save_figure, save_json  # noqa: E402
from tests.procs import Stack, Web, make_template_db, wait_until  # noqa: E402

ENV = {
    "REPORTS_ROLLUP_EVERY_S": "1", "REPORTS_DIGEST_EVERY_S": "2", "REPORTS_PURGE_EVERY_S": "2",
    "DOCUMENTS_PROCESSING_SECONDS": "2",
    # Redelivery after a dead worker: the whole box died, so the restarted workers' sweep
    # returns the interrupted messages after this (leases renew every 5 s while a worker lives).
    "CELERY_VISIBILITY_TIMEOUT": "15",
}


def boot(stack: Stack) -> Web:
    """Start everything, in the units' order: Redis first (by the caller), then the rest."""
    for name in ("w1", "w2"):
        stack.start_worker(name, concurrency=2)
    for name in ("b1", "b2"):
        stack.start_elected_beat(name)
    return stack.start_web(workers=2)


def power_cut(stack: Stack) -> float:
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


def one_cut(template: Path, work: Path, args: argparse.Namespace, n: int) -> dict[str, Any]:
    stack = Stack(base_dir=work / f"cut{n}", template_db=template, env_overrides=ENV)
    acked: list[int] = []
    refused = 0
    stop = threading.Event()
    try:
        web = boot(stack)
        client = web.session()

        def submit() -> None:
            nonlocal refused
            i = 0
            while not stop.is_set():
                i += 1
                try:
                    response = client.post("/api/documents/",
                                           json={"title": f"cut {n} doc {i}", "text": "x" * 200})
                    if response.status_code == 202:
                        acked.append(int(response.json()["id"]))
                    else:
                        refused += 1
                except Exception:  # the server is gone: not acknowledged, not counted
                    refused += 1
                stop.wait(1 / args.rate)

        submitter = threading.Thread(target=submit)
        submitter.start()
        time.sleep(args.before)  # the load runs for a fixed time: that is the experiment
        states_at_cut = dict(stack.query("SELECT state, count(*) FROM documents_document "
                                         "GROUP BY state"))
        running_runs = [r[0] for r in stack.query(
            "SELECT id FROM reports_jobrun WHERE outcome = 'running'")]
        spread_ms = power_cut(stack)
        stop.set()
        submitter.join()
        progress(f"cut {n}: SIGKILLed every process within {spread_ms:.1f} ms; "
                 f"{len(acked)} acknowledged, at the cut {states_at_cut}, "
                 f"{len(running_runs)} periodic runs running")

        restarted = time.monotonic()
        stack.redis.start()
        boot(stack)

        def all_done() -> bool:
            ids = ",".join(map(str, acked)) or "0"
            done = stack.query(f"SELECT count(*) FROM documents_document WHERE id IN ({ids}) "
                               "AND state IN ('done', 'failed')")[0][0]
            return done == len(acked)

        wait_until(all_done, timeout=args.timeout, what="every acknowledged document finished")
        recovered_s = time.monotonic() - restarted
        # The jobs' next runs mark the runs cut off mid-run as lost.
        wait_until(lambda: not running_runs or stack.query(
            f"SELECT count(*) FROM reports_jobrun WHERE outcome = 'running' AND id IN "
            f"({','.join(map(str, running_runs))})")[0][0] == 0, timeout=60,
            what="interrupted periodic runs resolved")
        ids = ",".join(map(str, acked)) or "0"
        done_runs = dict(stack.query(
            f"SELECT document_id, count(*) FROM documents_documentrun WHERE outcome = 'done' "
            f"AND document_id IN ({ids}) GROUP BY document_id"))
        failed = stack.query(f"SELECT count(*) FROM documents_document WHERE id IN ({ids}) "
                             "AND state = 'failed'")[0][0]
        slots_twice = stack.query(
            "SELECT count(*) FROM (SELECT job, slot FROM reports_jobrun WHERE kind = 'scheduled'"
            " GROUP BY job, slot HAVING count(*) > 1)")[0][0]
        marked_lost = (stack.query(
            f"SELECT count(*) FROM reports_jobrun WHERE outcome = 'lost' AND id IN "
            f"({','.join(map(str, running_runs))})")[0][0] if running_runs else 0)
        # Slots that fell in the dark: a skip job records them as lost, a catch-up job's next
        # run covers them (ADR 7).
        lost_rows = stack.query("SELECT count(*) FROM reports_jobrun WHERE outcome = 'lost'")[0][0]
        result = {
            "acknowledged": len(acked), "refused_or_cut": refused, "states_at_cut": states_at_cut,
            "completed_once": sum(1 for i in acked if done_runs.get(i) == 1),
            "completed_twice": sum(1 for i in acked if done_runs.get(i, 0) > 1),
            "failed": failed,
            "lost": sum(1 for i in acked if i not in done_runs) - failed,
            "periodic_running_at_cut": len(running_runs), "periodic_marked_lost": marked_lost,
            "periodic_runs_shown_lost": lost_rows,
            "slots_run_twice": slots_twice, "kill_spread_ms": round(spread_ms, 1),
            "recovered_s": round(recovered_s, 1),
        }
        progress(f"cut {n}: {result}")
        return result
    finally:
        stop.set()
        stack.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cuts", type=int, default=3)
    parser.add_argument("--rate", type=float, default=4.0)
    parser.add_argument("--before", type=float, default=8.0)
    parser.add_argument("--timeout", type=float, default=180.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="power-cut-"))
    template = make_template_db(work / "template")
    cuts = [one_cut(template, work, args, n) for n in range(1, args.cuts + 1)]
    totals = {k: sum(c[k] for c in cuts) for k in (
        "acknowledged", "completed_once", "completed_twice", "lost", "failed",
        "periodic_running_at_cut", "periodic_marked_lost", "periodic_runs_shown_lost",
        "slots_run_twice")}
    save_json("box_power_cut", {"args": vars(args), "cuts": cuts, "totals": totals})
    fig, axes = new_figure("Whole-box power cut (SIGKILL every process), per cut", ncols=2)
    xs = [str(i + 1) for i in range(len(cuts))]
    axes[0].bar(xs, [c["acknowledged"] for c in cuts], label="acknowledged")
    axes[0].bar(xs, [c["lost"] + c["completed_twice"] for c in cuts], label="lost or doubled")
    axes[0].legend()
    axes[1].bar(xs, [c["recovered_s"] for c in cuts])
    axes[1].set_title("seconds from restart to every document done")
    save_figure(fig, "box_power_cut")
    print("totals:", totals)


if __name__ == "__main__":
    main()
