"""One beat leads, a standby takes over within the bound, and no slot ever runs twice.

Real redis-server, real `celery beat` (the platform's scheduler class) and `celery worker`
processes, jobs due every 1-2 s. Leaders are SIGKILLed, SIGSTOPped past their lock and
resumed, and Redis is killed under them; every test counts doubled and missed slots from
three witnesses (tests/scheduler/beats.py) and records the handover it measured.
"""

from __future__ import annotations

import json
import signal
import statistics
import time
from datetime import UTC, datetime

import pytest

from scheduler.lease import read_journal
from scheduler.outbox import OUTBOX_KEY
from tests.procs import Proc, Stack, wait_until
from tests.scheduler.beats import (
    BEAT_ENV,
    DIGEST,
    EVERY,
    HANDOVER_BOUND_S,
    PURGE,
    ROLLUP,
    Tally,
    fired,
    leader_proc,
    skipped_gaps,
    tally,
    wait_leader,
    wait_runs,
)

pytestmark = pytest.mark.processes


def start_platform(make_stack, *, beats: int = 2) -> tuple[Stack, list[Proc], list[Proc]]:  # type: ignore[no-untyped-def]
    stack = make_stack(env=BEAT_ENV)
    workers = [stack.start_worker("w1", concurrency=2)]
    started = [stack.start_elected_beat(f"b{i + 1}") for i in range(beats)]
    return stack, workers, started


def fired_jobs(beats: list[Proc], token: str) -> set[str]:
    return {job for job, _, t in fired(beats) if t == token}


def now() -> datetime:
    return datetime.now(UTC)


def assert_no_slot_lost(stack: Stack, result: Tally) -> None:
    """No job, skip or catch-up, has a slot no run covered: the new leader fired the slots
    that fell due during the handover (backfill), and skip jobs never widened a run."""
    assert all(n == 0 for n in result.missed.values()), f"slots missed: {result.missed}"
    for job in (DIGEST, PURGE):
        assert skipped_gaps(stack, job, EVERY[job]) == [], f"{job} lost slots"
        widened = stack.query("SELECT COUNT(*) FROM reports_jobrun WHERE job = ? "
                              "AND kind = 'scheduled' AND covers_from != slot", job)[0][0]
        assert widened == 0, f"{job} is a skip job but a run caught up"


def backfilled(stack: Stack, token: str) -> int:
    """Slots the beat with ``token`` fired that started before it was elected."""
    journal = read_journal(stack.redis.client())
    elected = next(e.at for e in journal if e.kind == "elected" and e.token == token)
    return sum(1 for e in journal if e.kind == "fired" and e.token == token
               and datetime.fromisoformat(e.detail.split("|")[1]).timestamp() < elected)


def test_two_beats_started_at_the_same_instant_exactly_one_leads(make_stack, measure):
    stack, workers, beats = start_platform(make_stack)
    token, since = wait_leader(stack, timeout=60)
    wait_runs(stack, ROLLUP, after=now(), count=4, timeout=30)

    elected = [p.name for p in beats if "beat: elected leader" in p.log()]
    publishers = {t for _, _, t in fired(beats)}
    assert elected == [leader_proc(beats, token).name]
    assert publishers == {token}
    assert all(p.alive() for p in beats)

    # A third beat with a different table (a rolling deploy's new version) starts as standby:
    # it must not rewrite the live schedule (RedBeat #198).
    late = stack.start_elected_beat("b3", REPORTS_PURGE_EVERY_S="7")
    wait_until(lambda: "beat: Starting..." in late.log(), timeout=60, what="b3 starts")
    wait_runs(stack, PURGE, after=now(), count=2, timeout=30)
    definition = json.loads(stack.redis.client().hget(f"platform:beat:{PURGE}", "definition"))
    assert definition["schedule"]["every"] == 2.0
    assert "beat: elected leader" not in late.log()

    result = tally(stack, beats + [late], workers)
    assert result.doubled == 0 and result.fired_twice == 0
    measure(beats_started=2, leaders=len(elected), **result.as_dict())


def test_sigkill_leader_standby_takes_over_within_bound(make_stack, measure):
    stack, workers, beats = start_platform(make_stack)
    token, _ = wait_leader(stack, timeout=60)
    wait_runs(stack, ROLLUP, after=now(), count=3, timeout=30)

    leader = leader_proc(beats, token)
    killed_at = time.time()
    leader.signal(signal.SIGKILL, group=True)
    leader.wait_exit(timeout=10)
    new_token, since = wait_leader(stack, other_than=token, timeout=HANDOVER_BOUND_S)
    handover = since - killed_at
    took_over = datetime.fromtimestamp(since, UTC)
    wait_runs(stack, ROLLUP, after=took_over, count=3, timeout=30)
    wait_runs(stack, PURGE, after=took_over, count=1, timeout=30)

    result = tally(stack, beats, workers)
    assert result.doubled == 0 and result.fired_twice == 0
    # Every slot that fell due while no beat led was fired by the new leader, once.
    assert_no_slot_lost(stack, result)
    assert backfilled(stack, new_token) >= 1
    assert {t for _, _, t in fired(beats)} == {token, new_token}
    measure(handover_s=handover, backfilled=backfilled(stack, new_token), **result.as_dict())


def test_sigstop_leader_past_its_lock_then_sigcont_it_schedules_nothing(make_stack, measure):
    stack, workers, beats = start_platform(make_stack)
    token, _ = wait_leader(stack, timeout=60)
    wait_runs(stack, ROLLUP, after=now(), count=3, timeout=30)

    leader = leader_proc(beats, token)
    stopped_at = time.time()
    leader.signal(signal.SIGSTOP)
    new_token, since = wait_leader(stack, other_than=token, timeout=HANDOVER_BOUND_S)
    wait_runs(stack, ROLLUP, after=datetime.fromtimestamp(since, UTC), count=2, timeout=30)

    resumed_from = len(leader.log())
    leader.signal(signal.SIGCONT)
    exit_code = leader.wait_exit(timeout=30)
    after_wake = leader.log()[resumed_from:]
    wait_runs(stack, ROLLUP, after=now(), count=2, timeout=30)

    result = tally(stack, beats, workers)
    assert exit_code != 0, "a leader that lost its lock exits so the supervisor restarts it"
    assert "beat: fired" not in after_wake
    assert "no longer ours" in after_wake or "lease deadline passed" in after_wake
    assert result.doubled == 0 and result.fired_twice == 0
    assert_no_slot_lost(stack, result)
    measure(handover_s=since - stopped_at, stale_leader_exit_code=exit_code,
            **result.as_dict())


def test_redis_restarted_under_the_beats_scheduling_resumes_without_doubles(make_stack,
                                                                            measure):
    stack, workers, beats = start_platform(make_stack)
    token, _ = wait_leader(stack, timeout=60)
    wait_runs(stack, ROLLUP, after=now(), count=3, timeout=30)

    killed_at = time.time()
    stack.redis.kill(signal.SIGKILL)
    stack.redis.restart()
    restarted = now()
    wait_runs(stack, ROLLUP, after=restarted, count=3, timeout=60)
    wait_runs(stack, DIGEST, after=restarted, count=1, timeout=30)
    first = stack.query("SELECT MIN(started_at) FROM reports_jobrun WHERE slot > ?",
                        restarted.replace(tzinfo=None).strftime("%Y-%m-%d %H:%M:%S"))[0][0]
    resumed_after = datetime.fromisoformat(first).replace(tzinfo=UTC).timestamp() - killed_at
    leader_now, _ = wait_leader(stack, timeout=HANDOVER_BOUND_S)

    result = tally(stack, beats, workers)
    assert result.doubled == 0 and result.fired_twice == 0
    assert_no_slot_lost(stack, result)
    measure(resumed_after_s=resumed_after, same_leader=leader_now == token, **result.as_dict())


FAILOVERS = 20


def test_twenty_failovers_in_a_row(make_stack, measure):
    stack, workers, beats = start_platform(make_stack)
    token, _ = wait_leader(stack, timeout=60)
    handovers: list[float] = []
    for n in range(FAILOVERS):
        # The leader has published a slot of every job before it dies. Killed after its first
        # publish only, it may die between two jobs' slots of the same tick, and consecutive
        # handovers then add up to one gap that no single handover explains. "Fired" is the
        # decision; the message follows from the outbox (scheduler/outbox.py). Killed between
        # the two every time, each leader would leave its slots to a successor that is killed
        # the same way, until they are older than the backfill window: wait for the publish.
        wait_until(lambda: fired_jobs(beats, token) >= set(EVERY)  # noqa: B023
                   and stack.redis.client().llen(OUTBOX_KEY) == 0, timeout=15,
                   what=f"leader {n} fires and publishes a slot of every job")
        leader = leader_proc(beats, token)
        killed_at = time.time()
        leader.signal(signal.SIGKILL, group=True)
        leader.wait_exit(timeout=10)
        beats.append(stack.start_elected_beat(f"b{len(beats) + 1}"))  # the supervisor's restart
        token, since = wait_leader(stack, other_than=token, timeout=HANDOVER_BOUND_S)
        handovers.append(since - killed_at)
    wait_runs(stack, ROLLUP, after=datetime.fromtimestamp(since, UTC), count=2, timeout=30)

    result = tally(stack, beats, workers)
    assert result.doubled == 0 and result.fired_twice == 0
    assert_no_slot_lost(stack, result)
    measure(failovers=len(handovers), handover_p50_s=statistics.median(handovers),
            handover_max_s=max(handovers), **result.as_dict())


def test_two_leaders_at_once_the_slot_fence_still_runs_each_slot_once(make_stack, measure):
    # A split brain, as after a Redis failover to a replica that never saw the lock: two
    # beats that do not share a lock both lead and both fire every slot. The run record is
    # the only thing left between them and doubled work.
    stack = make_stack(env=BEAT_ENV)
    workers = [stack.start_worker("w1", concurrency=2)]
    beats = [stack.start_elected_beat("b1"),
             stack.start_elected_beat("b2", BEAT_KEY_PREFIX="split:beat:")]
    wait_until(lambda: all("beat: elected leader" in p.log() for p in beats), timeout=60,
               what="both beats lead")
    wait_runs(stack, DIGEST, after=now(), count=3, timeout=30)
    wait_until(lambda: tally(stack, beats, workers).fenced >= 3, timeout=30,
               what="second deliveries reach the fence")

    result = tally(stack, beats, workers)
    assert result.fired_twice > 0, "both beats should have fired the same slots"
    assert result.doubled == 0
    assert result.missed[ROLLUP] == 0
    measure(**result.as_dict())
