"""Kill the leading beat over and over; measure each handover and count doubled and missed slots.

    .venv/bin/python loadtests/beat_failover_soak.py [--failovers 200] [--hold 1]

A real Redis, one Celery worker and two beats running the platform's scheduler (lock 5 s,
loop 1 s) with the reports' jobs due every 1-2 s. Each round waits until the leader has fired
a slot, holds it --hold more seconds, SIGKILLs it and starts a replacement at once (as the
supervisor would), and measures the handover: from the kill to the standby taking the lock.
At the end every slot must have run at most once and no slot of any job may be missing: the
new leader fires the slots that fell due during each handover (the backfill), so "slots
missed to handovers" is the number of grid slots, over all jobs, that no run covers (goal 0).
The fence's journal also says whether any publish landed under a token after a newer election.
Writes loadtests/results/beat_failover_soak.json and .png.
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
from scheduler.lease import read_journal  # noqa: E402
from tests.procs import Stack, make_template_db, wait_until  # noqa: E402
from tests.scheduler.beats import (  # noqa: E402
    BEAT_ENV,
    EVERY,
    HANDOVER_DEADLINE_S,
    leader_proc,
    tally,
    wait_leader,
    wait_runs,
)
from tests.scheduler.netfaults import belief_intervals, max_overlap  # noqa: E402


def late_publishes(stack: Stack) -> int:
    """Fires that landed under a token other than the latest elected one."""
    owner, late = None, 0
    for entry in read_journal(stack.redis.client()):
        if entry.kind == "elected":
            owner = entry.token
        elif entry.kind == "fired" and entry.token != owner:
            late += 1
    return late


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
        for job in EVERY:
            wait_runs(stack, job, after=datetime.fromtimestamp(since, UTC), count=2, timeout=60)
        result = tally(stack, beats, workers)
        journal = read_journal(stack.redis.client())
        late = late_publishes(stack)
        believers = max_overlap(belief_intervals(journal))
    finally:
        stack.stop()

    stats = summary(handovers)
    print(f"\nfailovers {len(handovers)}  handover p50 {stats['p50']:.2f} s  "
          f"p99 {stats['p99']:.2f} s  max {stats['max']:.2f} s")
    missed = sum(result.missed.values())
    print(f"scheduled runs {result.runs}  doubled {result.doubled}  "
          f"fired twice {result.fired_twice}  fenced {result.fenced}  "
          f"slots missed to handovers {missed} ({result.missed})  "
          f"publishes after a newer election {late}  most beats leading at once {believers}")
    data = {"args": vars(args), "handover_s": stats, "handovers": handovers,
            "tally": result.as_dict(), "slots_missed_to_handovers": missed,
            "publish_after_newer_election": late, "max_believers": believers}
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
    if result.doubled or result.fired_twice or missed or late or believers > 1:
        sys.exit(1)


if __name__ == "__main__":
    main()
