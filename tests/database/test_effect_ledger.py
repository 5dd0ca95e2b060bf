"""Two attempts of one periodic run recording the same effect at the same instant, on
PostgreSQL: they take turns on the run's row lock, so one writes the effect and the other
skips it (on SQLite the single writer did this by itself; without the lock the second attempt
failed on the unique (run, key) constraint instead)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.processes

# Run in a manage.py shell on the Stack's database: the run's row is held while both
# attempts start, so both reach the lock before either records anything.
SCRIPT = """
import json, threading, time
from django.db import connection, transaction
from django.utils import timezone
from apps.reports import services
from apps.reports.models import JobEffect, JobRun
from celery_conf import names
from scheduler.tables import JOBS

job = JOBS[names.REPORTS_USAGE_ROLLUP]
slot = job.slot_at(timezone.now())
run = JobRun.objects.create(job=job.name, kind="scheduled", slot=slot, covers_from=slot,
                            fired_by="test", task_id="t", worker="w")
results = []

def attempt():
    try:
        results.append(services.usage_rollup(job, run))
    except Exception as exc:
        results.append(repr(exc))
    finally:
        connection.close()

threads = [threading.Thread(target=attempt) for _ in range(2)]
with transaction.atomic():
    JobRun.objects.select_for_update().get(pk=run.pk)
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    with connection.cursor() as cursor:
        while True:
            # Inside a transaction PostgreSQL keeps one activity snapshot unless told not to.
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                           "current_database() AND wait_event_type = 'Lock'")
            waiting = cursor.fetchone()[0]
            if waiting == 2 or time.monotonic() > deadline:
                break
            time.sleep(0.02)
for thread in threads:
    thread.join(30)
print(json.dumps({"waiting": waiting, "results": results,
                  "effects": JobEffect.objects.filter(run=run).count()}))
"""


def test_two_attempts_of_one_run_record_its_effect_once(make_stack, measure):
    stack = make_stack(postgres=True)
    out = stack.manage("shell", "--no-imports", "-c", SCRIPT).stdout
    result = json.loads(out.strip().splitlines()[-1])
    measure(**result)
    assert result["waiting"] == 2, result  # both attempts queued on the run's lock
    assert result["effects"] == 1, result
    assert len(result["results"]) == 2 and not any("Error" in r for r in result["results"])
    assert sum("already written by an earlier attempt" in r for r in result["results"]) == 1
