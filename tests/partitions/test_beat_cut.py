"""The leading beat's host cut off from the data host, then healed.

hostB and hostC each run a beat and a worker. The leader's host is cut for longer than the
lock (5 s): the other host's beat must lead within the handover bound (lock + one poll +
slack, tests/scheduler/beats.py), the old leader must never publish after that election
(the fence refuses its writes, whatever its clock says), and across cut and heal no slot of
the periodic jobs (every 1-2 s here) is published twice or left out. Judged from the fence's
journal (Redis's own clock and order) and the run records, by the history checker.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from scheduler.fence import parse_journal
from tests.history import History, check, journal_history, slots_history
from tests.partitions.conftest import Apart
from tests.procs import Proc, wait_until
from tests.scheduler.beats import DIGEST, EVERY, HANDOVER_BOUND_S, LEADER_KEY, LOCK_KEY, ROLLUP

pytestmark = [pytest.mark.processes, pytest.mark.partitions]

JOURNAL_KEY = "platform:beat::journal"
CUT_S = 12.0  # over two lock timeouts: the old leader's lease ends well inside the cut


@pytest.fixture(scope="module")
def started(apart: Apart) -> Iterator[tuple[Apart, dict[str, Proc]]]:
    beats = {}
    workers = {}
    for name, host in apart.hosts.items():
        workers[name] = host.start_worker()
        beats[name] = host.start_beat()
    client = apart.data.redis.client()
    for name, proc in workers.items():
        apart.hosts[name].wait_worker(proc, client)
    yield apart, beats


def leader(apart: Apart, other_than: str | None = None) -> str | None:
    client = apart.data.redis.client()
    token = client.get(LOCK_KEY)
    if token and token != other_than and client.hget(LEADER_KEY, "token") == token:
        return str(token)
    return None


def host_of(token: str) -> str:
    """``beat1.hostB@hostB:<pid>:<random>`` -> ``hostB``."""
    return token.split("@", 1)[1].split(":", 1)[0]


def slot_runs(apart: Apart, job: str, after: datetime) -> int:
    rows = apart.data.query(
        "SELECT COUNT(*) FROM reports_jobrun WHERE job = ? AND kind = 'scheduled' "
        "AND outcome = 'done' AND slot > ?", job,
        after.astimezone(UTC).replace(tzinfo=None).isoformat(" "))
    return int(rows[0][0])


def test_the_leading_beats_host_cut_off_hands_over_once_and_no_slot_is_doubled_or_missed(
        started: tuple[Apart, dict[str, Proc]], measure) -> None:
    apart, beats = started
    first = wait_until(lambda: leader(apart), timeout=60, interval=0.1, what="a beat leads")
    began = datetime.now(UTC)
    wait_until(lambda: slot_runs(apart, ROLLUP, began) >= 3, timeout=30, interval=0.2,
               what="slots run under the first leader")
    cut_host = host_of(first)
    cut_at = time.time()
    apart.net.cut(cut_host)
    second = wait_until(lambda: leader(apart, other_than=first), timeout=HANDOVER_BOUND_S + 10,
                        interval=0.05, what="another host's beat leads")
    handover_s = time.time() - cut_at
    assert host_of(second) != cut_host
    while time.time() < cut_at + CUT_S:
        time.sleep(0.1)  # the cut lasts its stated time: the scenario, not a wait
    apart.net.heal(cut_host)
    healed = datetime.now(UTC)
    # Every job runs again after the heal, under whoever leads now.
    for job in (ROLLUP, DIGEST):
        wait_until(lambda job=job: slot_runs(apart, job, healed) >= 3, timeout=40,
                   interval=0.2, what=f"{job} runs after the heal")
    old = beats[cut_host]
    old_state = "exited" if not old.alive() else "standing by"

    jobs = list(EVERY)
    journal = parse_journal(apart.data.redis.client().lrange(JOURNAL_KEY, 0, -1))
    history = History()
    journal_history(journal, history, jobs=jobs)
    slots_history(apart.data, history, jobs=jobs)
    verdict = check(history, every={ROLLUP: EVERY[ROLLUP]})
    verdict.assert_ok()
    elections = [e for e in journal if e.kind == "elected"]
    # Redis and this process share one kernel clock: the journal orders against the cut.
    after_cut = [e for e in elections if e.at > cut_at and e.token != first]
    assert [e.token for e in after_cut] == [second], [e.token for e in elections]
    fired = history.of("fired")
    measure(cut_s=CUT_S, cut_host=cut_host, handover_s=round(handover_s, 2),
            handover_bound_s=HANDOVER_BOUND_S, elections_after_cut=len(after_cut),
            old_leader=old_state, slots_published=len(fired),
            slots_ran=len(history.of("ran")), **verdict.counts())
