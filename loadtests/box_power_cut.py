"""The whole box loses power: every process SIGKILLed at once with documents in flight and
periodic jobs running, then everything started again the way the box starts at boot.

    .venv/bin/python loadtests/box_power_cut.py [--cuts 3] [--rate 4] [--before 8] [--slow-purge]

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
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.common import new_figure, progress, save_figure, save_json  # noqa: E402
from tests.platform import power_cut as box  # noqa: E402
from tests.procs import Stack, make_template_db, wait_until  # noqa: E402


def one_cut(template: Path, work: Path, args: argparse.Namespace, n: int) -> dict[str, Any]:
    stack = Stack(base_dir=work / f"cut{n}", template_db=template, env_overrides=box.ENV)
    submitter = None
    try:
        web = box.boot(stack, include=box.SLOW_PURGE if args.slow_purge else "")
        submitter = box.Submitter(web.session(), rate=args.rate, label=f"cut {n}")
        time.sleep(args.before)  # the load runs for a fixed time: that is the experiment
        states_at_cut = dict(stack.query("SELECT state, count(*) FROM documents_document "
                                         "GROUP BY state"))
        spread_ms = box.power_cut(stack)
        submitter.stop()
        # With every process dead, what the database says is running was cut off mid-run.
        cut_runs = box.running_runs(stack)
        acked = list(submitter.acked)
        progress(f"cut {n}: SIGKILLed every process within {spread_ms:.1f} ms; "
                 f"{len(acked)} acknowledged, at the cut {states_at_cut}, "
                 f"{len(cut_runs)} periodic runs running")

        restarted = time.monotonic()
        stack.redis.start()
        box.boot(stack)
        wait_until(lambda: box.unfinished(stack, acked) == 0, timeout=args.timeout,
                   what="every acknowledged document finished")
        recovered_s = time.monotonic() - restarted
        # The jobs' next runs mark the runs cut off mid-run as lost.
        wait_until(lambda: box.runs_still_running(stack, cut_runs) == 0, timeout=60,
                   what="interrupted periodic runs resolved")
        result = {**box.count(stack, acked, cut_runs), "refused_or_cut": submitter.refused,
                  "states_at_cut": states_at_cut, "kill_spread_ms": round(spread_ms, 1),
                  "recovered_s": round(recovered_s, 1)}
        progress(f"cut {n}: {result}")
        return result
    finally:
        if submitter is not None:
            submitter.stop()
        stack.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cuts", type=int, default=3)
    parser.add_argument("--rate", type=float, default=4.0)
    parser.add_argument("--before", type=float, default=8.0)
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument("--slow-purge", action="store_true",
                        help="before each cut the purge takes seconds (tests/platform/slow_jobs"
                             ".py), so cuts land mid-run and the lost marking is exercised")
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
