"""Test-only hook: the retention purge's work takes SLOW_S seconds, so a power-cut test can
cut the box while a periodic run is certainly mid-run (its record says ``running``).

Loaded only by a test's worker command line (``celery worker --include
tests.platform.slow_jobs``), never by a production module; the box's own units never name it.
It wraps the job's work after the slot fence (``job_run_begin``), so the run record exists
and says ``running`` for the whole sleep, as a slow real purge would.
"""

from __future__ import annotations

import functools
import time

from apps.reports.services import WORK
from celery_conf import names

SLOW_S = 4.0
_work = WORK[names.REPORTS_RETENTION_PURGE]


@functools.wraps(_work)
def _slow_purge(job, run):  # noqa: ANN001, ANN202 - the WORK signature
    time.sleep(SLOW_S)
    return _work(job, run)


WORK[names.REPORTS_RETENTION_PURGE] = _slow_purge
