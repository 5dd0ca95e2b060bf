"""A worker's database connection lives across tasks, as a web request's does across queries.

Celery's Django fix-up closes every connection before and after each task unless
``CELERY_DB_REUSE_MAX`` is set (celery/fixups/django.py); opening one again costs a SQLite
file open and its pragmas, or a PostgreSQL backend fork and a scram-sha-256 exchange (2.8 ms
of the server's CPU and 2.3 ms of the worker's, measured; adr/0043). With the reuse count set,
these handlers do what Django's request signals do for a web request: before and after every
task, ``close_old_connections`` closes a connection that has outlived ``CONN_MAX_AGE`` or
failed (a PostgreSQL restart), and re-arms ``CONN_HEALTH_CHECKS``, so a task's first query runs
on a connection checked alive. A pool process holds at most one, as before (adr/0024).
"""

from __future__ import annotations

from typing import Any

from celery.signals import task_postrun, task_prerun
from django.db import close_old_connections


@task_prerun.connect
def _before_task(**_: Any) -> None:
    close_old_connections()


@task_postrun.connect
def _after_task(**_: Any) -> None:
    close_old_connections()
