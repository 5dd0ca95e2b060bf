"""A periodic run whose pool process is SIGKILLed mid-run is marked lost by the reconciler,
while the worker's main process (and its heartbeat) lives on.

Real redis-server and worker; the digest runs long enough (a thousand users) to be killed.
"""

from __future__ import annotations

import json
import os
import signal
import socket
from datetime import UTC, datetime

import pytest
from celery import Celery

from scheduler.tables import JOBS
from tests.documents.broker import FAST_RECOVERY
from tests.procs import wait_until
from tests.reports.users import users_add

pytestmark = pytest.mark.processes
DIGEST = "reports.daily_digest"


@pytest.mark.all_configs
def test_a_run_whose_pool_child_was_killed_is_marked_lost(make_stack, measure):
    stack = make_stack(env=FAST_RECOVERY)
    users_add(stack, count=1500)
    worker = stack.start_worker("w1", concurrency=1)
    slot = JOBS[DIGEST].slot_at(datetime.now(UTC)).isoformat()
    sender = Celery(broker=stack.redis.url)
    sender.send_task(DIGEST, kwargs={"slot": slot, "fired_by": "test"}, queue="reports")

    run = wait_until(lambda: stack.query(
        "SELECT id, worker_pid, pool_pid FROM reports_jobrun WHERE job = ? AND "
        "outcome = 'running' AND pool_pid IS NOT NULL", DIGEST), timeout=60, interval=0.05,
        what="the digest runs")[0]
    assert run["worker_pid"] == worker.pid and run["pool_pid"] != worker.pid
    os.kill(run["pool_pid"], signal.SIGKILL)  # the pool child alone, as the OOM killer would

    # The main process lives on and says so, with a new pool process in place of the dead one.
    redis = stack.redis.client()
    key = f"platform:worker:w1@{socket.gethostname()}"

    def heartbeat_without_the_dead_child() -> bool:
        beat = json.loads(redis.get(key) or "null")
        return bool(beat) and beat["pid"] == worker.pid and run["pool_pid"] not in beat[
            "children"]
    wait_until(heartbeat_without_the_dead_child, timeout=30, what="a heartbeat after the kill")
    assert worker.alive()

    reconciled = stack.manage("run_periodic_job", "platform.reconcile", "--wait", "60")
    assert "done on w1" in reconciled.stdout, reconciled.stdout + reconciled.stderr
    # Celery requeues the killed child's message at once (reject on worker lost). If that
    # delivery came after a heartbeat without the dead child, it marked the run lost and took
    # it over (only failed or lost runs can be taken over): either way it was marked lost.
    final = wait_until(lambda: [r for r in stack.query(
        "SELECT outcome, detail, pool_pid FROM reports_jobrun WHERE id = ?", run["id"])
        if r["outcome"] != "running"], timeout=60, what="the run is no longer running")[0]
    if final["outcome"] == "lost":
        assert f"pool process {run['pool_pid']}" in final["detail"]
    else:
        assert final["outcome"] == "done" and final["pool_pid"] != run["pool_pid"], dict(final)
    mailed = stack.query("SELECT COUNT(*) FROM reports_jobeffect WHERE run_id = ?",
                         run["id"])[0][0]
    users = stack.query("SELECT COUNT(*) FROM auth_user WHERE email != ''")[0][0]
    assert mailed <= users  # one record per user at most: nobody is mailed twice
    measure(users=users, outcome=final["outcome"], mails_recorded=mailed)
