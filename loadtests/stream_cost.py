"""What an idle event stream costs its web worker: threads, descriptors, database connections,
memory, at 1,000 and 10,000 open streams.

    .venv/bin/python loadtests/stream_cost.py [--counts 1000,10000]

One uvicorn worker (so every stream lands on the measured process), a real Redis and SQLite.
The streams are plain sockets opened from this process 500 at a time, each waiting for its
``ready`` frame; then the worker's /proc entries are read. 10,000 streams need more than the
default 1,024 descriptors in both processes: this script raises its soft limit to the hard
limit (the worker inherits it); see README "Live events" for a machine's limit. Writes
loadtests/results/stream_cost.{json,png}.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.common import new_figure, progress, save_figure, save_json  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--counts", default="1000,10000")
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = max(counts) + 500
    if hard < need:
        sys.exit(f"the hard file limit is {hard}; {need} needed (ulimit -Hn, LimitNOFILE)")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    progress(f"file limit raised from {soft} to {hard}")

    from tests.notifications.conftest import cookie_of
    from tests.notifications.streamcost import WorkerCost, close_streams, open_streams
    from tests.procs import Stack, make_template_db

    base = Path(tempfile.mkdtemp(prefix="stream-cost-"))
    stack = Stack(base_dir=base / "stack", template_db=make_template_db(base / "template"))
    rows = []
    try:
        web = stack.start_web(workers=1)
        cookie = cookie_of(web.session())
        pids: set[int] = set()
        socks = open_streams(web.base, cookie, 1, pids=pids)
        pid = next(iter(pids))
        time.sleep(1)  # let the worker settle after start-up before the baseline
        baseline = WorkerCost.of(pid, stack.db_path)
        rows.append({"streams": 1, **baseline.__dict__})
        progress(f"1 stream: {baseline}")
        for count in counts:
            started = time.monotonic()
            socks += open_streams(web.base, cookie, count - len(socks), batch=500,
                                  timeout=600, pids=pids)
            opened_s = time.monotonic() - started
            cpu_before = WorkerCost.of(pid, stack.db_path).cpu_s
            time.sleep(10)  # idle: what do open streams cost per second (heartbeats aside)?
            cost = WorkerCost.of(pid, stack.db_path)
            row = {"streams": count, **cost.__dict__, "open_s": opened_s,
                   "idle_cpu_pct": (cost.cpu_s - cpu_before) / 10 * 100,
                   "kib_per_stream": (cost.rss_mb - baseline.rss_mb) * 1024 / (count - 1),
                   "fds_per_stream": (cost.fds - baseline.fds) / (count - 1)}
            rows.append(row)
            progress(f"{count} streams (opened in {opened_s:.1f} s): {row}")
        assert pids == {pid}
        close_streams(socks)
    finally:
        stack.stop()
    result = {"machine": "2 cores, shared with other engineers' tests (loaded)",
              "workers": 1, "rows": rows}
    save_json("stream_cost", result)
    fig, axes = new_figure("Idle SSE streams: cost in one web worker", ncols=2)
    xs = [r["streams"] for r in rows]
    axes[0].plot(xs, [r["threads"] for r in rows], "o-", label="threads")
    axes[0].plot(xs, [r["db_files"] for r in rows], "s-", label="database files open")
    axes[0].set_xscale("log")
    axes[0].set_xlabel("open streams")
    axes[0].set_ylabel("count")
    axes[0].legend()
    axes[1].plot(xs, [r["rss_mb"] for r in rows], "o-", label="resident memory (MiB)")
    axes[1].set_xscale("log")
    axes[1].set_xlabel("open streams")
    axes[1].set_ylabel("MiB")
    axes[1].legend()
    progress(f"wrote {save_figure(fig, 'stream_cost')}")


if __name__ == "__main__":
    main()
