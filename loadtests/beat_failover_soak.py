"""Kill the leading beat over and over; measure each handover and count doubled and missed slots.

    .venv/bin/python loadtests/beat_failover_soak.py [--failovers 200] [--hold 1]

A real Redis, one Celery worker and two beats running the platform's scheduler (lock 5 s,
loop 1 s) with the reports' jobs due every 1-2 s. Each round waits until the leader has fired
a slot, holds it --hold more seconds, SIGKILLs it and starts a replacement at once (as the
supervisor would), and measures the handover: from the kill to the standby taking the lock.
At the end every slot must have run at most once; the roll-up (catch-up policy) must have no
uncovered slot. Writes loadtests/results/beat_failover_soak.json and .png.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.common import new_figure, progress, save_figure, save_json, summary  # noqa: E402
from tests.procs import Stack, make_template_db, wait_until  # noqa: E402
from tests.scheduler.beats import (  # noqa: E402
    BEAT_ENV,
    HANDOVER_DEADLINE_S,
    ROLLUP,
    leader_proc,
    tally,
    wait_leader,
    wait_runs,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--failovers", type=int, default=200)
    parser.add_argument("--hold", type=float, default=1.0,
                        help="seconds a new leader leads before it is killed")
    args = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="beat-soak-"))
    stack = Stack(base_dir=base / "stack", template_db=make_template_db(base / "template"),
                  env_overrides=BEAT_ENV)
    handovers: list[float] = []
    try:
        workers = [stack.start_worker("w1", concurrency=2)]
        beats = [stack.start_elected_beat(name) for name in ("b1", "b2")]
        token, _ = wait_leader(stack, timeout=60)
        for n in range(args.failovers):
            current = leader_proc(beats, token)
            wait_until(lambda: f"by={token}" in current.log(),  # noqa: B023
                       timeout=30, what=f"leader {n} fires a slot")
            time.sleep(args.hold)  # how long each leader leads: pacing, not synchronisation
            leader = current
            killed_at = time.time()
            leader.signal(signal.SIGKILL, group=True)
            leader.wait_exit(timeout=10)
            beats.append(stack.start_elected_beat(f"b{len(beats) + 1}"))
            token, since = wait_leader(stack, other_than=token, timeout=HANDOVER_DEADLINE_S)
            handovers.append(since - killed_at)
            if (n + 1) % 10 == 0 or n + 1 == args.failovers:
                s = summary(handovers)
                progress(f"failover {n + 1}/{args.failovers}: handover p50 {s['p50']:.2f} s, "
                         f"max {s['max']:.2f} s")
        wait_runs(stack, ROLLUP, after=datetime.fromtimestamp(since, UTC), count=2, timeout=60)
        result = tally(stack, beats, workers)
    finally:
        stack.stop()

    stats = summary(handovers)
    print(f"\nfailovers {len(handovers)}  handover p50 {stats['p50']:.2f} s  "
          f"p99 {stats['p99']:.2f} s  max {stats['max']:.2f} s")
    print(f"scheduled runs {result.runs}  doubled {result.doubled}  "
          f"fired twice {result.fired_twice}  fenced {result.fenced}  "
          f"missed (roll-up, catch-up) {result.missed[ROLLUP]}  "
          f"missed (skip jobs) {sum(v for k, v in result.missed.items() if k != ROLLUP)}")
    data = {"args": vars(args), "handover_s": stats, "handovers": handovers,
            "tally": result.as_dict()}
    print(f"wrote {save_json('beat_failover_soak', data)}")
    fig, (hist, series) = new_figure(f"Beat handover after SIGKILL ({len(handovers)} failovers)",
                                     ncols=2)
    hist.hist(handovers, bins=30, color="#457b9d")
    hist.set_xlabel("seconds from kill to the standby holding the lock")
    hist.set_ylabel("failovers")
    series.plot(range(1, len(handovers) + 1), handovers, ".", color="#e63946")
    series.axhline(10, color="#999", linestyle="--", label="bound (10 s)")
    series.set_xlabel("failover")
    series.set_ylabel("handover (s)")
    series.legend()
    print(f"wrote {save_figure(fig, 'beat_failover_soak')}")
    if result.doubled or result.missed[ROLLUP]:
        sys.exit(1)


if __name__ == "__main__":
    main()
