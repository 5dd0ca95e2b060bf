"""The 202's latency at an offered rate: documents submitted on a fixed schedule, not as fast
as the clients can.

    .venv/bin/python loadtests/submit_latency.py [--rate 100] [--seconds 10] [--workers 2]
        [--repeats 2] [--before DIR]

The path as loadtests/ceiling.py runs it (2 uvicorn workers, --workers Celery worker processes
-c 1, DOCUMENTS_PROCESSING_SECONDS=0), processing while documents arrive. A scheduler sends
one submission every 1/--rate seconds from a pool of logged-in clients (enough that a slow
answer never holds the next send back: open loop), for --seconds; each latency is from the
scheduled send time, so a submission that waited for a free client counts that wait too.
Reports the rate actually offered, 202 p50 / p99 / max, and whether every document was done.
--before DIR runs the same from another checkout, interleaved (ceiling.py's --before).
Writes loadtests/results/submit_latency.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tests.procs  # noqa: E402
from loadtests.ceiling import ENV, FINISHED_SQL, WEB_ARGS, WEB_WORKERS, code_at  # noqa: E402
from loadtests.common import progress, save_json, summary  # noqa: E402
from tests.procs import Client, Stack, make_template_db, wait_until  # noqa: E402

CLIENTS = 16  # logged-in sessions; more than are ever busy at once at these rates
WARM_UP_DOCS = 12


def run_one(work: Path, template: Path, name: str, rate: float, seconds: float,
            workers: int) -> dict[str, Any]:
    stack = Stack(base_dir=work / name, template_db=template, env_overrides=ENV)
    try:
        for i in range(1, workers + 1):
            stack.start_worker(f"c{i}", concurrency=1)
        web = stack.start_web(workers=WEB_WORKERS, uvicorn_args=WEB_ARGS)
        free: list[Client] = [Client.login(web.base, "tester", "tester-password-1")
                              for _ in range(CLIENTS)]
        lock = threading.Lock()
        latencies: list[float] = []
        slow: list[tuple[float, float]] = []  # (latency, when it was due)

        def send(n: int, due: float) -> None:
            with lock:
                client = free.pop()
            try:
                client.submit(f"latency document {n} " * 20, title=f"latency {n}")
                latencies.append(time.monotonic() - due)
                slow.append((time.monotonic() - due, due))
            finally:
                with lock:
                    free.append(client)

        for n in range(WARM_UP_DOCS):
            send(n, time.monotonic())
        wait_until(lambda: int(stack.query(FINISHED_SQL)[0]["n"]) >= WARM_UP_DOCS,
                   timeout=120, what="warm-up done")
        latencies.clear()
        slow.clear()
        total = int(rate * seconds)
        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=CLIENTS) as pool:
            for n in range(total):
                due = start + n / rate
                time.sleep(max(0.0, due - time.monotonic()))
                pool.submit(send, n, due)
        sent_for = time.monotonic() - start
        wait_until(lambda: int(stack.query(FINISHED_SQL)[0]["n"]) >= WARM_UP_DOCS + total,
                   timeout=600, interval=0.05, what="every document done")
        lat = {k: v * 1000 if k != "n" else v for k, v in summary(latencies).items()}
        slowest = sorted(slow, reverse=True)[:10]
        return {"offered_per_s": total / sent_for, "documents": total, "latency_ms": lat,
                "slowest": [{"ms": 1000 * ms, "at_s": due - start} for ms, due in slowest]}
    finally:
        stack.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=100.0, help="submissions per second")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--before", type=Path, help="another checkout, run interleaved")
    parser.add_argument("--output", default="submit_latency")
    args = parser.parse_args()
    codes = {"now": tests.procs.ROOT}
    if args.before is not None:
        codes = {"before": args.before.resolve(), "now": tests.procs.ROOT}
    work = Path(tempfile.mkdtemp(prefix="latency-"))
    template = make_template_db(work / "template")
    rows = []
    for repeat in range(1, args.repeats + 1):
        for code, root in codes.items():
            with code_at(root):
                row = run_one(work, template, f"{code}-{repeat}", args.rate, args.seconds,
                              args.workers)
            rows.append({"code": code, "repeat": repeat, **row})
            lat = row["latency_ms"]
            progress(f"[{repeat}/{args.repeats}] {code}: offered {row['offered_per_s']:.1f}/s, "
                     f"202 p50 {lat['p50']:.1f} ms, p99 {lat['p99']:.1f} ms, "
                     f"max {lat['max']:.1f} ms")
    print(f"wrote {save_json(args.output, {'args': vars(args), 'runs': rows})}")


if __name__ == "__main__":
    main()
