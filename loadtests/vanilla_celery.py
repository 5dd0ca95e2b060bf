"""Vanilla Celery for the throughput benchmark: every setting at its default, one no-op task.

The broker URL comes from ``VANILLA_BROKER_URL`` (the benchmark's own Redis); nothing of the
platform is imported, so this is what Celery costs out of the box.
"""

from __future__ import annotations

import os

from celery import Celery

app = Celery("vanilla", broker=os.environ["VANILLA_BROKER_URL"])


@app.task(name="loadtests.noop")
def noop() -> None:
    """Nothing, as in ``loadtests/bench_tasks.py``."""
