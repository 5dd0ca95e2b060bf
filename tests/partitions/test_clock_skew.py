"""A beat host whose clock is 30 s ahead of or behind the data host's.

Measured before the check (adr/0044): a beat 30 s behind never took the lock and said nothing
(every fenced write lands past its deadline); one 30 s ahead led, fired each slot 30 s early,
and its lock outlived it by 30 s (a handover far past its bound). Now a standby compares its
clock with Redis's ``TIME`` before it tries the lock and refuses to lead, with a clear error,
while it is certainly beyond the bound (``Lease.max_clock_offset``, 0.5 s at a 5 s lock). The
other host's beat leads; across both, no slot is published twice or missed.

The skewed beat runs under libfaketime (Debian's ``libfaketime``), with
tests/partitions/clockshim as its ``sitecustomize``. Over TLS as shipped: platform/certs
starts every certificate an hour before it is made, so a host 30 s or 5 min behind accepts
one made seconds ago (before, it refused it as "not yet valid", and these tests ran without
TLS), and the platform's own clock check is what speaks.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from scheduler.fence import JournalEntry, parse_journal
from tests.history import History, Verdict, check, journal_history, slots_history
from tests.hosts.cluster import running
from tests.partitions.conftest import Apart, start_apart
from tests.partitions.test_beat_cut import JOURNAL_KEY, host_of, leader, slot_runs
from tests.procs import wait_until
from tests.scheduler.beats import EVERY, ROLLUP

pytestmark = [pytest.mark.processes, pytest.mark.partitions]

LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"
SHIM = Path(__file__).resolve().parent / "clockshim"
REFUSED = "not leading until the clock is fixed"


def jumpable(clock: Path) -> dict[str, str]:
    """The environment of a process whose wall clock is off by what ``clock`` says (``+0``
    at first), read again every second: writing ``+30s`` there makes its clock jump."""
    return {"LD_PRELOAD": LIBFAKETIME, "FAKETIME_TIMESTAMP_FILE": str(clock),
            "FAKETIME_CACHE_DURATION": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "PYTHONPATH": str(SHIM)}


def judged_slots(apart: Apart) -> tuple[list[JournalEntry], History, Verdict]:
    """The beats' journal and the slots' runs through the history checker, which must pass."""
    journal = parse_journal(apart.data.redis.client().lrange(JOURNAL_KEY, 0, -1))
    history = History()
    journal_history(journal, history, jobs=list(EVERY))
    slots_history(apart.data, history, jobs=list(EVERY))
    verdict = check(history, every={ROLLUP: EVERY[ROLLUP]})
    verdict.assert_ok()
    return journal, history, verdict


def skewed(offset: str) -> dict[str, str]:
    """The environment of a process whose wall clock is ``offset`` (``+30s``) off."""
    return {"LD_PRELOAD": LIBFAKETIME, "FAKETIME": offset,
            "FAKETIME_DONT_FAKE_MONOTONIC": "1", "PYTHONPATH": str(SHIM)}


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Apart]:
    cluster = start_apart(tmp_path_factory.mktemp("skew"))
    with running(cluster):
        c = cluster.hosts["hostC"]
        worker = c.start_worker()
        c.wait_worker(worker, cluster.data.redis.client())
        yield cluster


@pytest.mark.parametrize("offset", ["-30s", "+30s", "-5m", "+5m"])
def test_a_beat_with_a_skewed_clock_refuses_to_lead_and_no_slot_is_doubled_or_missed(
        plain: Apart, offset: str, tmp_path, measure) -> None:
    apart = plain
    b, c = apart.hosts["hostB"], apart.hosts["hostC"]
    apart.data.redis.client().delete(JOURNAL_KEY)
    # The skewed beat first, alone: it must refuse the lock, and say so.
    skewed_beat = b.start_beat(f"beat-{offset}", **skewed(offset))
    started = time.time()
    try:
        wait_until(lambda: REFUSED in skewed_beat.log(), timeout=60, interval=0.2,
                   what="the skewed beat refuses the lock")
        refused_after_s = time.time() - started
        assert leader(apart) is None, "the skewed beat took the lock"
        assert skewed_beat.alive()
        normal_beat = c.start_beat(f"beat{offset}")
        try:
            token = wait_until(lambda: leader(apart), timeout=60, interval=0.1,
                               what="the other host's beat leads")
            assert host_of(token) == "hostC"
            since = datetime.now(UTC)
            wait_until(lambda: slot_runs(apart, ROLLUP, since) >= 4, timeout=30, interval=0.2,
                       what="slots run under the normal beat")
        finally:
            normal_beat.stop()
    finally:
        skewed_beat.stop()
    journal, history, verdict = judged_slots(apart)
    elected = {host_of(e.token) for e in journal if e.kind == "elected"}
    assert elected == {"hostC"}, elected
    line = next(x for x in skewed_beat.log().splitlines() if REFUSED in x)
    seconds = int(offset[1:-1]) * {"s": 1, "m": 60}[offset[-1]]
    assert f"clock is {seconds}." in line, line  # the offset it found is the one it was given
    measure(offset=offset, refused_after_s=round(refused_after_s, 1),
            leaders={"hostC": 1, "hostB (skewed)": 0}, error=line.split("] ", 1)[-1],
            slots_published=len(history.of("fired")), **verdict.counts())


WORKER_REFUSED = "a worker runs only within"


@pytest.mark.parametrize("offset", ["-30s", "+30s", "-5m", "+5m"])
def test_a_worker_with_a_skewed_clock_refuses_to_run(plain: Apart, offset: str,
                                                     measure) -> None:
    """Measured before the check: a worker 30 s ahead dropped every periodic message it took
    as expired (their expiry is stamped by the beat's clock; 37 slots published, none run by
    it); one 30 s behind ran them. Now both stop at start-up, with the fix in the log."""
    b = plain.hosts["hostB"]
    # A name (and so a log) of its own per offset: a line left by another offset proves nothing.
    name = ("ahead" if offset.startswith("+") else "behind") + offset[1:]
    worker = b.start_worker(name, **skewed(offset))
    started = time.monotonic()
    wait_until(lambda: not worker.alive(), timeout=60, interval=0.2,
               what="the skewed worker stops")
    stopped_after_s = time.monotonic() - started
    line = next((x for x in worker.log().splitlines() if WORKER_REFUSED in x), None)
    assert line is not None, worker.log()[-3000:]
    seconds = int(offset[1:-1]) * {"s": 1, "m": 60}[offset[-1]]
    assert f"clock is {seconds}." in line, line  # the offset it found is the one it was given
    measure(offset=offset, stopped_after_s=round(stopped_after_s, 1),
            error=line.split("] ", 1)[-1])


STEPPED_DOWN = {"+30s": "refused by Redis (clock", "-30s": "behind Redis's"}


@pytest.mark.parametrize("jump", ["+30s", "-30s"])
def test_a_leader_whose_clock_jumps_steps_down_and_no_slot_is_doubled_or_missed(
        plain: Apart, jump: str, tmp_path, measure) -> None:
    """Measured before: a leader whose clock jumped 30 s ahead went on leading, fired each
    slot 30 s early and set the lock's expiry 35 s out (a handover 30 s past its bound if it
    then died). Now every fenced write carries the earliest moment it may land (its send time
    less the 0.5 s bound): Redis refuses the first write after a jump ahead, the lease lets
    the lock go, the beat exits. A jump behind makes every write late; the leader checks its
    clock, lets the lock go and exits. The other host's beat takes over at its next poll."""
    apart = plain
    b, c = apart.hosts["hostB"], apart.hosts["hostC"]
    apart.data.redis.client().delete(JOURNAL_KEY)
    clock = tmp_path / "clock"
    clock.write_text("+0\n")
    name = "jump" + ("ahead" if jump.startswith("+") else "behind")
    jumper = b.start_beat(f"beat-{name}", **jumpable(clock))
    try:
        wait_until(lambda: (t := leader(apart)) is not None and host_of(t) == "hostB",
                   timeout=60, interval=0.1, what="the beat on hostB leads")
        standby = c.start_beat(f"beat-{name}-standby")
        try:
            since = datetime.now(UTC)
            wait_until(lambda: slot_runs(apart, ROLLUP, since) >= 2, timeout=30, interval=0.2,
                       what="slots run under hostB's beat")
            clock.write_text(f"{jump}\n")
            jumped_at = time.time()
            token = wait_until(lambda: (t := leader(apart)) is not None and host_of(t) == "hostC"
                               and t, timeout=60, interval=0.05, what="hostC's beat leads")
            handover_s = time.time() - jumped_at
            wait_until(lambda: not jumper.alive(), timeout=30, interval=0.1,
                       what="the jumped beat exits")
            after = datetime.now(UTC)
            wait_until(lambda: slot_runs(apart, ROLLUP, after) >= 3, timeout=30, interval=0.2,
                       what="slots run under hostC's beat")
        finally:
            standby.stop()
    finally:
        jumper.stop()
    journal, history, verdict = judged_slots(apart)
    assert host_of(token) == "hostC"
    kinds = [(host_of(e.token), e.kind) for e in journal]
    # hostB's last word in Redis is letting the lock go; nothing of it lands after.
    last_b = max(i for i, (host, _) in enumerate(kinds) if host == "hostB")
    assert kinds[last_b] == ("hostB", "released"), kinds[last_b - 3:last_b + 1]
    line = next((x for x in jumper.log().splitlines() if STEPPED_DOWN[jump] in x), None)
    assert line is not None, jumper.log()[-3000:]
    measure(jump=jump, handover_s=round(handover_s, 2),
            slots_published=len(history.of("fired")), error=line.split("] ", 1)[-1][:200],
            **verdict.counts())
