"""A no-op task for the throughput benchmark, loaded into a platform worker with ``-I``."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="loadtests.noop")
def noop() -> None:
    """Nothing: what is measured is Celery's and Redis's cost per task."""
