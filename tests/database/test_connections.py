"""Database connections stay bounded under load, counted per process type on PostgreSQL.

Two web workers, two Celery workers of two pool processes each, an elected beat and Flower;
a burst of submissions from many concurrent clients with event streams open. The bound is a
count, per process type: see README "Database" and adr/0024 for the measured numbers.
"""

from __future__ import annotations

import pytest
from django.conf import settings

from tests.database.connections import measure_load, start_flower

pytestmark = pytest.mark.processes

WEB_WORKERS = 2
CELERY_WORKERS = 2
CONCURRENCY = 2


def test_connections_per_process_type_stay_within_the_bound_under_load(make_stack, measure):
    stack = make_stack(postgres=True, env={"DOCUMENTS_PROCESSING_SECONDS": "0.2"})
    for n in range(CELERY_WORKERS):
        stack.start_worker(f"w{n}", concurrency=CONCURRENCY)
    stack.start_elected_beat("beat1")
    start_flower(stack)
    result = measure_load(stack, web_workers=WEB_WORKERS, clients=16, documents=80, streams=40)
    measure(**{f"peak_{k}": v for k, v in result.peak.items()},
            **{f"idle_{k}": v for k, v in result.idle_after.items()},
            accepted=result.accepted, samples=result.samples)
    assert result.accepted == 80
    assert result.samples >= 20  # the sampler really watched the burst
    # Web: its pool's size per process, whatever the number of clients (16 here, each one a
    # connection without the pool). Worker: one per pool process. Beat and Flower: none seen.
    bound = {"web": WEB_WORKERS * settings.DATABASE_WEB_POOL_SIZE,
             "worker": CELERY_WORKERS * CONCURRENCY, "beat": 1, "flower": 0}
    for kind, n in result.peak.items():
        assert n <= bound.get(kind, 0), (kind, result)
    # Idle: the web pools' connections (closed after DATABASE_POOL_MAX_IDLE_S), the leading
    # beat's one, which its recovery reads every second (adr/0030), and at most one per
    # worker pool process, kept across tasks for DATABASE_WORKER_CONN_MAX_AGE_S (adr/0043).
    assert set(result.idle_after) <= {"web", "beat", "worker"}, result
    assert result.idle_after.get("beat", 0) <= 1, result
    assert result.idle_after.get("worker", 0) <= bound["worker"], result
