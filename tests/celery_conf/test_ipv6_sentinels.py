"""Sentinels named by IPv6 address (REDIS_SENTINELS=[::1]:port,...) work end to end: a
message enqueued through kombu's Sentinel transport lands on the group's primary, and the
platform's own clients reach it. Real sentinels listening on ::1."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.procs import ROOT, child_env
from tests.sentinel import SentinelGroup

pytestmark = pytest.mark.processes

ENQUEUE = """
from celery_conf import app
from celery_conf.connections import redis_client
from celery_conf.queues import queue_lengths
app.send_task("reports.retention_purge", kwargs={"slot": None, "fired_by": "ipv6"},
              queue="reports")
print("queued", queue_lengths(redis_client(), ["reports"])["reports"])
"""


def test_ipv6_sentinels_carry_an_enqueue_to_the_primary(tmp_path):
    group = SentinelGroup(tmp_path).start()
    try:
        env = child_env(tmp_path, database=tmp_path / "db.sqlite3", redis_url="",
                        **{**group.env(), "REDIS_SENTINELS": ",".join(
                            f"[::1]:{s.port}" for s in group.sentinels)})
        result = subprocess.run([sys.executable, "manage.py", "shell", "--no-imports", "-c",
                                 ENQUEUE], cwd=ROOT, env=env, capture_output=True, text=True,
                                timeout=120)
        assert result.returncode == 0, result.stderr[-3000:]
        assert "queued 1" in result.stdout
        assert group.client().llen("reports:5") == 1  # the default priority step's list
    finally:
        group.stop()
