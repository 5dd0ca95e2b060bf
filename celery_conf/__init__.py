"""Celery app and the durable-task policy; apps import from here, never the reverse."""

from .celery_app import app

__all__ = ("app",)
