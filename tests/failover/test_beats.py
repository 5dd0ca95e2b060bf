"""SIGKILL the Redis primary under three elected beats: one leader, no slot run twice.

The lock, the schedule's last runs and the fence's journal live in Redis, so a failover can
lose their newest writes. The fence refuses every write of a beat whose token is not in the
lock on the server that receives it, and the run record (one row per job and slot) turns away
a slot fired again from a lost last-run update. Missed slots are counted and reported.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

import pytest

from tests.failover.conftest import db_time
from tests.procs import Proc
from tests.scheduler.beats import (
    BEAT_ENV,
    DIGEST,
    ROLLUP,
    fired,
    tally,
    wait_leader,
    wait_runs,
)

pytestmark = [pytest.mark.processes, pytest.mark.past_one_box]

# Celery's log line: "[2026-11-30 15:45:45,123: INFO/MainProcess] beat: fired <job> slot=.. by=.."
FIRED_AT = re.compile(r"^\[([\d-]+ [\d:,]+): INFO/\S+\] beat: fired \S+ slot=\S+ by=(\S+)$",
                      re.MULTILINE)


def leadership_runs(beats: list[Proc]) -> list[str]:
    """The leaders' tokens in the order they fired, one entry per uninterrupted run of fires.

    One leader at a time gives each token once (A, B); two leaders at once interleave their
    fires (A, B, A).
    """
    fires = sorted((at, token) for b in beats for at, token in FIRED_AT.findall(b.log()))
    runs: list[str] = []
    for _, token in fires:
        if not runs or runs[-1] != token:
            runs.append(token)
    return runs


def test_primary_sigkilled_under_three_beats_one_leader_no_slot_twice(sentinel_stack, measure):
    stack = sentinel_stack(env=BEAT_ENV)
    group = stack.redis.group
    workers = [stack.start_worker("w1", concurrency=2)]
    beats = [stack.start_elected_beat(f"b{i}") for i in (1, 2, 3)]
    wait_leader(stack, timeout=60)
    wait_runs(stack, ROLLUP, after=datetime.now(UTC), count=3, timeout=30)

    killed_at = time.time()
    old = group.kill_primary()
    group.wait_promotion(old)
    promoted = datetime.now(UTC)
    wait_runs(stack, ROLLUP, after=promoted, count=3, timeout=60)
    wait_runs(stack, DIGEST, after=promoted, count=1, timeout=30)
    token, since = wait_leader(stack, timeout=30)
    first = stack.query("SELECT MIN(started_at) FROM reports_jobrun WHERE slot > ?",
                        promoted.replace(tzinfo=None).strftime("%Y-%m-%d %H:%M:%S"))[0][0]

    result = tally(stack, beats, workers)
    runs = leadership_runs(beats)
    # The log lines are the witness: none read (a changed format) must fail, not pass empty.
    assert runs, "no beat logged a fire: the log format changed?"
    assert len(runs) == len(set(runs)), f"two beats fired interleaved (two leaders): {runs}"
    assert result.doubled == 0, result  # no slot's work ran twice, by any witness
    leaders_after = {by for _, slot, by in fired(beats)
                     if datetime.fromisoformat(slot).timestamp() > killed_at}
    assert leaders_after, "no beat fired a slot after the failover"
    assert token in runs, f"the lock's holder {token} never fired: {runs}"
    measure(**result.as_dict(), leaders=len(runs), leaders_after_failover=len(leaders_after),
            scheduling_resumed_s=round(db_time(first) - killed_at, 1),
            same_leader_before_and_after=since < killed_at)
