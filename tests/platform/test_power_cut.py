"""Issue 9 point 7: the whole box loses power with documents in flight and a periodic run
mid-run, then starts again as at boot. Every acknowledged document completes once, no slot
runs twice, and the run that was cut off shows as lost.

Before the cut the workers carry a test-only hook (tests/platform/slow_jobs.py) making the
retention purge take seconds, so the cut certainly lands mid-run; after it, everything starts
with the plain boot command lines.
"""

from __future__ import annotations

import re
import time
from collections import Counter

import pytest

from celery_conf import names
from tests.platform import power_cut as box
from tests.procs import wait_until

pytestmark = pytest.mark.processes


def test_power_cut_mid_run_loses_nothing_and_shows_the_cut_run_lost(make_stack, measure):
    stack = make_stack(env={**box.ENV, "DOCUMENTS_PROCESSING_SECONDS": "1"})
    web = box.boot(stack, include=box.SLOW_PURGE)
    submitter = box.Submitter(web.session(), rate=4, label="power cut")
    try:
        # The moment: documents acknowledged, one being processed, and a purge that started
        # under 2 s ago (it runs for SLOW_S = 4 s) mid-run.
        wait_until(lambda: len(submitter.acked) >= 6 and box.processing(stack)
                   and box.purge_started_mid_run(stack, within_s=2), timeout=60,
                   what="documents in flight while a periodic run is mid-run")
        spread_ms = box.power_cut(stack)
    finally:
        submitter.stop()
    acked = list(submitter.acked)
    # With every process dead, what the database says is running was cut off mid-run.
    cut_runs = box.running_runs(stack)
    in_flight = box.unfinished(stack, acked)
    assert in_flight and stack.query(
        f"SELECT count(*) FROM reports_jobrun WHERE id IN ({','.join(map(str, cut_runs))}) "
        "AND job = ?", names.REPORTS_RETENTION_PURGE)[0][0] >= 1

    restarted = time.monotonic()
    stack.redis.start()
    web = box.boot(stack)
    wait_until(lambda: box.unfinished(stack, acked) == 0, timeout=120,
               what="every acknowledged document finished")
    recovered_s = time.monotonic() - restarted
    # Each job's next run marks its runs whose worker died as lost.
    wait_until(lambda: box.runs_still_running(stack, cut_runs) == 0, timeout=60,
               what="the runs cut off mid-run resolved")
    result = box.count(stack, acked, cut_runs)
    assert result["completed_once"] == len(acked), result
    assert result["lost"] == 0 and result["completed_twice"] == 0 and result["failed"] == 0
    assert result["slots_run_twice"] == 0, result
    assert result["periodic_marked_lost"] == len(cut_runs), result
    # The reports page shows each as lost, with why (the filtered list holds the newest runs).
    session = web.session()
    ids = ",".join(map(str, cut_runs))
    cut_jobs = Counter(r[0] for r in stack.query(
        f"SELECT job FROM reports_jobrun WHERE id IN ({ids})"))
    for job, runs in cut_jobs.items():
        page = session.get("/reports/", params={"job": job})
        assert page.ok
        assert len(re.findall(r'state-lost" title="[^"]*died mid-run', page.text)) >= runs
    measure(submitted=len(acked) + submitter.refused, acknowledged=len(acked),
            in_flight_at_cut=in_flight, completed_once=result["completed_once"], lost=0,
            doubled=0, periodic_running_at_cut=len(cut_runs),
            periodic_marked_lost=result["periodic_marked_lost"],
            slots_run=result["periodic_slots_run"], slots_run_twice=0,
            kill_spread_ms=round(spread_ms, 1), recovered_s=round(recovered_s, 1))
