"""Reads for reports: recent runs, and each job with its next slot and last run."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import QuerySet
from django.utils import timezone

from scheduler.jobs import PeriodicJob
from scheduler.tables import JOBS

from .models import JobRun


@dataclass(frozen=True)
class JobOverview:
    job: PeriodicJob
    next_slot: datetime
    last_run: JobRun | None
    runs: int


def run_list(*, job: str | None = None, limit: int = 100) -> QuerySet[JobRun]:
    runs = JobRun.objects.all()
    if job:
        runs = runs.filter(job=job)
    return runs[:limit]


def job_overviews(*, now: datetime | None = None) -> list[JobOverview]:
    now = now or timezone.now()
    return [
        JobOverview(
            job=job,
            next_slot=job.next_slot(now),
            last_run=JobRun.objects.filter(job=job.name).order_by("-started_at", "-id").first(),
            runs=JobRun.objects.filter(job=job.name).count(),
        )
        for job in JOBS.values()
    ]
