"""The Celery app: settings from Django's ``CELERY_`` namespace, tasks found by autodiscovery."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.development")

app = Celery("platform")
app.config_from_object("django.conf:settings", namespace="CELERY")

from . import database  # noqa: E402, F401  (connects each task's database connection handlers)
from .heartbeat import WorkerHeartbeat  # noqa: E402  (needs no Django, but reads app config)

app.steps["consumer"].add(WorkerHeartbeat)
app.autodiscover_tasks()
