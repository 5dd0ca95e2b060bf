"""Kill workers under load, over and over, and count what was lost or run twice.

    .venv/bin/python loadtests/worker_kill_loop.py [--kills 24] [--interval 12] [--rate 2]
        [--name worker_kill_loop]

Two real Celery workers (prefork -c 2, the durable policy) process documents submitted
through a real uvicorn web server at --rate per second. Every --interval seconds one worker
that is running a document is SIGKILLed with its whole process group (a crash or OOM kill of
the host's worker), then started again at once, as the supervisor would. Two elected beats
run as shipped (the leader's recovery hands a dead worker's documents on, adr/0030). At the
end every submitted document must be done exactly once. Prints lost, doubled and the
redelivery delay (kill to restart of the interrupted document) and writes
loadtests/results/<--name>.{json,png}.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.common import new_figure, progress, save_figure, save_json, summary  # noqa: E402
from tests.documents.tally import all_finished, sample_text, tally  # noqa: E402
from tests.procs import Stack, make_template_db, wait_until  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=24)
    parser.add_argument("--interval", type=float, default=12.0, help="seconds between kills")
    parser.add_argument("--rate", type=float, default=2.0, help="documents submitted per second")
    parser.add_argument("--work", type=float, default=3.0, help="seconds of work per document")
    parser.add_argument("--name", default="worker_kill_loop", help="results file name")
    args = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="kill-loop-"))
    stack = Stack(base_dir=base / "stack", template_db=make_template_db(base / "template"),
                  env_overrides={"DOCUMENTS_PROCESSING_SECONDS": str(args.work)})
    ids: list[int] = []
    kills: list[tuple[str, float]] = []  # (worker name, wall-clock time of the kill)
    stop = threading.Event()
    try:
        workers = {name: stack.start_worker(name, concurrency=2) for name in ("w1", "w2")}
        for beat in ("b1", "b2"):
            stack.start_elected_beat(beat)
        client = stack.start_web(workers=2).session()

        def submit_forever() -> None:
            n = 0
            while not stop.is_set():
                ids.append(client.submit(sample_text(n)))
                n += 1
                stop.wait(1 / args.rate)

        submitter = threading.Thread(target=submit_forever, daemon=True)
        submitter.start()
        for k in range(args.kills):
            time.sleep(args.interval)  # pacing of the load, not synchronisation
            name = "w1" if k % 2 == 0 else "w2"
            wait_until(lambda name=name: stack.query(
                "SELECT 1 FROM documents_documentrun WHERE outcome='running' AND worker LIKE ?",
                f"{name}@%"), timeout=60, what=f"{name} is running a document")
            workers[name].signal(signal.SIGKILL, group=True)
            kills.append((name, time.time()))
            workers[name].wait_exit(timeout=10)
            workers[name] = stack.start_worker(name, concurrency=2)
            progress(f"kill {k + 1}/{args.kills}: {name}; {len(ids)} submitted so far")
        stop.set()
        submitter.join()
        progress(f"waiting for all {len(ids)} documents to finish")
        wait_until(lambda: all_finished(stack, ids), timeout=300, interval=1,
                   what="every document finishes")
        result = tally(stack, ids)
        delays = redelivery_delays(stack, kills)
    finally:
        stop.set()
        stack.stop()

    stats = summary(delays)
    print(f"\nsubmitted {result.submitted}  completed {result.completed}  lost {result.lost}  "
          f"failed {result.failed}  run twice (doubled effects) {result.doubled}  "
          f"extra starts {result.extra_starts}")
    print(f"kills {len(kills)}; interrupted documents redelivered: {stats['n']}; "
          f"delay kill -> restart p50 {stats['p50']:.1f} s, p99 {stats['p99']:.1f} s, "
          f"max {stats['max']:.1f} s")
    data = {"args": vars(args), "tally": result.as_dict(), "redelivery_s": stats,
            "delays": delays}
    print(f"wrote {save_json(args.name, data)}")
    fig, ax = new_figure(f"Redelivery after SIGKILL of a worker ({len(kills)} kills)")
    ax.hist(delays, bins=20, color="#2a9d8f")
    ax.set_xlabel("seconds from kill to the document starting again")
    ax.set_ylabel("documents")
    print(f"wrote {save_figure(fig, args.name)}")
    if result.lost or result.doubled:
        sys.exit(1)


def redelivery_delays(stack: Stack, kills: list[tuple[str, float]]) -> list[float]:
    """For each run cut short by a kill: seconds from that kill to the document's next start."""
    rows = stack.query("SELECT document_id, worker, started_at, outcome FROM documents_documentrun "
                       "ORDER BY document_id, id")
    delays = []
    for i, row in enumerate(rows):
        if row["outcome"] != "superseded" or i + 1 >= len(rows):
            continue
        nxt = rows[i + 1]
        if nxt["document_id"] != row["document_id"]:
            continue
        started = _ts(row["started_at"])
        name = row["worker"].split("@")[0]
        kill_times = [t for n, t in kills if n == name and t >= started]
        if kill_times:
            delays.append(_ts(nxt["started_at"]) - min(kill_times))
    return delays


def _ts(value: str) -> float:
    # Django stores aware datetimes in SQLite as naive UTC text.
    return datetime.fromisoformat(value).replace(tzinfo=UTC).timestamp()


if __name__ == "__main__":
    main()
