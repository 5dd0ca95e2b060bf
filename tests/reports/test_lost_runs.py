"""A run whose worker died mid-run is marked lost by the job's next run, never left running.

Liveness comes from the workers' heartbeat keys in a real Redis.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.reports import services
from apps.reports.models import JobRun
from celery_conf.connections import RedisTarget, redis_client
from scheduler.tables import JOBS

pytestmark = pytest.mark.django_db
ROLLUP, DIGEST = "reports.usage_rollup", "reports.daily_digest"


def running(job: str, slot_back: int, worker: str, pid: int) -> JobRun:
    slot = JOBS[job].slot_at(timezone.now()) - JOBS[job].period * slot_back
    return JobRun.objects.create(job=job, kind="scheduled", slot=slot, covers_from=slot,
                                 worker=worker, worker_pid=pid)


def test_runs_of_dead_or_restarted_workers_are_marked_lost(heartbeats):
    heartbeats("alive@h", 100)
    heartbeats("restarted@h", 201)  # the same name, a new process
    live = running(ROLLUP, 3, "alive@h", 100)
    dead = running(ROLLUP, 2, "gone@h", 300)
    stale = running(ROLLUP, 1, "restarted@h", 200)

    assert services.job_runs_mark_lost(job=JOBS[ROLLUP]) == 2
    states = dict(JobRun.objects.values_list("pk", "outcome"))
    assert states == {live.pk: "running", dead.pk: "lost", stale.pk: "lost"}
    dead.refresh_from_db()
    assert "died mid-run" in dead.detail and "covers its window" in dead.detail
    assert dead.finished_at is not None


@pytest.mark.all_configs
def test_the_next_run_marks_the_lost_one_and_covers_its_window(heartbeats):
    finished = running(ROLLUP, 2, "w@h", 1)
    JobRun.objects.filter(pk=finished.pk).update(outcome="done")
    dead = running(ROLLUP, 1, "gone@h", 300)
    slot = JOBS[ROLLUP].slot_at(timezone.now())
    assert services.job_run(job_name=ROLLUP, slot=slot.isoformat(), fired_by="test",
                            task_id="t", worker="w@h", worker_pid=1) == "done"
    dead.refresh_from_db()
    assert dead.outcome == "lost"
    new = JobRun.objects.get(slot=slot)
    assert new.outcome == "done" and new.covers_from == dead.slot


def test_a_skip_job_says_its_slot_is_lost(heartbeats):
    dead = running(DIGEST, 1, "gone@h", 300)
    services.job_runs_mark_lost(job=JOBS[DIGEST])
    dead.refresh_from_db()
    assert dead.outcome == "lost" and "skipped" in dead.detail


def test_nothing_is_marked_when_redis_cannot_tell(settings):
    settings.REDIS = RedisTarget(url="redis://:x@127.0.0.1:9/0")  # closed port
    redis_client.cache_clear()
    try:
        run = running(ROLLUP, 1, "gone@h", 300)
        assert services.job_runs_mark_lost(job=JOBS[ROLLUP]) == 0
        run.refresh_from_db()
        assert run.outcome == "running"
    finally:
        redis_client.cache_clear()


def test_old_runs_without_a_pid_are_left_alone(heartbeats):
    run = JobRun.objects.create(job=ROLLUP, kind="manual", slot=timezone.now() - timedelta(1),
                                covers_from=timezone.now(), worker="old@h")
    assert services.job_runs_mark_lost(job=JOBS[ROLLUP]) == 0
    run.refresh_from_db()
    assert run.outcome == "running"
