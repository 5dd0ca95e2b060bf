"""The reports page: which beat leads, each job's next slot, and recent runs."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import redis
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from apps.events.bus import log_position
from apps.humanize import duration_text
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
    """The lock's state as read now, with when it was read: the page shows a moment, so it
    says which (and reads it again every few seconds)."""
    read_at = time.time()
    try:
        state = read_leadership(redis_client())
    except redis.RedisError as exc:
        state = {"leader": None, "detail": f"Redis unreachable: {exc}"}
    state["read_at"] = _iso(read_at)
    state["since_at"] = _iso(state.get("since"))
    state["expires_at"] = _iso(state.get("lock_expires_at"))
    if state.get("leading_for_s") is not None:
        state["leading_for"] = duration_text(state["leading_for_s"])
    state["renewed_every"] = duration_text(settings.CELERY_BEAT_MAX_LOOP_INTERVAL)
    return state


def _iso(stamp: float | None) -> str:
    """An epoch time as the ISO 8601 a page's <time datetime> takes ("" when unknown)."""
    return "" if stamp is None else datetime.fromtimestamp(stamp, tz=UTC).isoformat()


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


@login_required
def beat_fragment(request: HttpRequest) -> HttpResponse:
    """The page's beat line alone, which the page fetches again every few seconds."""
    return render(request, "reports/_beat.html", {"leadership": _leadership()})
