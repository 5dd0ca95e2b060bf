"""A beat host whose clock is 30 s ahead of or behind the data host's.

Measured before the check (adr/0044): a beat 30 s behind never took the lock and said nothing
(every fenced write lands past its deadline); one 30 s ahead led, fired each slot 30 s early,
and its lock outlived it by 30 s (a handover far past its bound). Now a standby compares its
clock with Redis's ``TIME`` before it tries the lock and refuses to lead, with a clear error,
while it is certainly beyond the bound (``Lease.max_clock_offset``, 0.5 s at a 5 s lock). The
other host's beat leads; across both, no slot is published twice or missed.

The skewed beat runs under libfaketime (Debian's ``libfaketime``), with
tests/partitions/clockshim as its ``sitecustomize``. Without TLS here: a host 30 s behind
refuses a certificate made seconds before as "not yet valid", which hides the lease.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from scheduler.fence import parse_journal
from tests.history import History, check, journal_history, slots_history
from tests.hosts.cluster import running
from tests.partitions.conftest import Apart, start_apart
from tests.partitions.test_beat_cut import JOURNAL_KEY, host_of, leader, slot_runs
from tests.procs import wait_until
from tests.scheduler.beats import EVERY, ROLLUP

pytestmark = [pytest.mark.processes, pytest.mark.partitions]

LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"
SHIM = Path(__file__).resolve().parent / "clockshim"
REFUSED = "not leading until the clock is fixed"


def skewed(offset: str) -> dict[str, str]:
    """The environment of a process whose wall clock is ``offset`` (``+30s``) off."""
    return {"LD_PRELOAD": LIBFAKETIME, "FAKETIME": offset,
            "FAKETIME_DONT_FAKE_MONOTONIC": "1", "PYTHONPATH": str(SHIM)}


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Apart]:
    cluster = start_apart(tmp_path_factory.mktemp("skew"), tls=False)
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
    client = apart.data.redis.client()
    client.delete(JOURNAL_KEY)
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
    journal = parse_journal(client.lrange(JOURNAL_KEY, 0, -1))
    history = History()
    journal_history(journal, history, jobs=list(EVERY))
    slots_history(apart.data, history, jobs=list(EVERY))
    verdict = check(history, every={ROLLUP: EVERY[ROLLUP]})
    verdict.assert_ok()
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
