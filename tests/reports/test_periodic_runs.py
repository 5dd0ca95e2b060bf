"""The platform's shape: two workers and two beats; every job runs once per slot, visibly.

Real redis-server, beats, workers and web server; jobs due every 1-2 s.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import pytest

from tests.scheduler.beats import (
    BEAT_ENV,
    DIGEST,
    EVERY,
    PURGE,
    ROLLUP,
    digests,
    skipped_gaps,
    tally,
    wait_leader,
    wait_runs,
)

pytestmark = pytest.mark.processes


@pytest.mark.all_configs
def test_two_workers_two_beats_every_job_runs_once_per_slot_and_shows_on_the_page(
    make_stack, measure
):
    stack = make_stack(env=BEAT_ENV)
    workers = [stack.start_worker(f"w{i}", concurrency=1) for i in (1, 2)]
    beats = [stack.start_elected_beat(f"b{i}") for i in (1, 2)]
    wait_leader(stack, timeout=60)
    started = datetime.now(UTC)
    for job in (ROLLUP, DIGEST, PURGE):
        wait_runs(stack, job, after=started, count=4, timeout=60)

    manual = stack.manage("run_periodic_job", ROLLUP, "--wait", "60")
    assert "done on w" in manual.stdout, manual.stdout + manual.stderr

    result = tally(stack, beats, workers)
    assert result.doubled == 0 and result.fired_twice == 0 and result.fenced == 0
    assert all(n == 0 for n in result.missed.values()), result.missed
    assert all(not skipped_gaps(stack, job, EVERY[job]) for job in (DIGEST, PURGE))
    kinds = Counter(r[0] for r in stack.query("SELECT kind FROM reports_jobrun WHERE job = ?",
                                              ROLLUP))
    assert kinds["manual"] == 1 and kinds["scheduled"] >= 4
    # One digest per user (the test login) per fired slot.
    sent = digests(stack)
    digest_slots = stack.query("SELECT COUNT(*) FROM reports_jobrun WHERE job = ? "
                               "AND outcome = 'done'", DIGEST)[0][0]
    assert len(sent) == len(set(sent)) == digest_slots
    workers_used = {r[0] for r in stack.query("SELECT DISTINCT worker FROM reports_jobrun")}

    page = stack.start_web(workers=1).session().get("/reports/")
    assert page.status_code == 200
    body = page.text
    assert body.count('data-job="reports.usage_rollup"') >= 5
    assert '<div id="beat-leader">' in body and 'Leading: <strong class="nowrap">b' in body

    measure(**result.as_dict(), digests=len(sent), workers_used=len(workers_used))
