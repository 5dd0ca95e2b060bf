"""The reports page: which beat leads, each job's next slot, and recent runs."""

from __future__ import annotations

from typing import Any

import redis
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from apps.events.bus import log_position
from celery_conf.connections import redis_client
from scheduler.lease import read_leadership

from .selectors import job_overviews, run_list


def _events_cursor() -> str:
    """Where the page's live stream starts: runs that change after this render arrive live."""
    try:
        return log_position()
    except (redis.RedisError, OSError):
        return ""  # the page renders; its stream resyncs once Redis is back


def _leadership() -> dict[str, Any]:
    try:
        return read_leadership(redis_client())
    except redis.RedisError as exc:
        return {"leader": None, "detail": f"Redis unreachable: {exc}"}


@login_required
def runs_page(request: HttpRequest) -> HttpResponse:
    job = request.GET.get("job") or None
    context = {
        "leadership": _leadership(),
        "jobs": job_overviews(),
        "runs": run_list(job=job, limit=200),
        "selected_job": job,
        "events_cursor": _events_cursor(),
    }
    return render(request, "reports/runs.html", context)
