"""Celery tasks for the periodic jobs: each takes the slot the beat fired and calls the service.

The roll-up and the purge are idempotent, so a database hiccup retries them (the retry takes
over its own failed run record). The digest is never retried: a retry after a partial send
would mail some users twice, and a missed digest is the lesser harm.
"""

from __future__ import annotations

import os
from typing import Any

from celery import shared_task
from django.db import DatabaseError

from celery_conf import names

from .services import job_run

RETRY = {"autoretry_for": (DatabaseError,), "max_retries": 3, "retry_backoff": 2,
         "retry_jitter": False}


def _run(task: Any, slot: str | None, fired_by: str) -> str:
    # The pool process's parent is the worker's main process, whose pid the heartbeat names;
    # the heartbeat also lists the pool processes, so a dead child's run is told from a live one.
    return job_run(job_name=task.name, slot=slot, fired_by=fired_by,
                   task_id=task.request.id or "", worker=task.request.hostname or "",
                   worker_pid=os.getppid(), pool_pid=os.getpid())


@shared_task(name=names.REPORTS_USAGE_ROLLUP, bind=True, **RETRY)
def usage_rollup(self: Any, slot: str | None = None, fired_by: str = "") -> str:
    return _run(self, slot, fired_by)


@shared_task(name=names.REPORTS_DAILY_DIGEST, bind=True)
def daily_digest(self: Any, slot: str | None = None, fired_by: str = "") -> str:
    return _run(self, slot, fired_by)


@shared_task(name=names.REPORTS_RETENTION_PURGE, bind=True, **RETRY)
def retention_purge(self: Any, slot: str | None = None, fired_by: str = "") -> str:
    return _run(self, slot, fired_by)


@shared_task(name=names.PLATFORM_RECONCILE, bind=True)
def reconcile(self: Any, slot: str | None = None, fired_by: str = "") -> str:
    # Not retried: the next slot, a minute later, does the same work.
    return _run(self, slot, fired_by)


TASKS = {task.name: task for task in (usage_rollup, daily_digest, retention_purge, reconcile)}
