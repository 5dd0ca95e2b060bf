"""Django settings package. Importing it binds ``@shared_task`` to the platform's Celery app."""

from celery_conf import app as celery_app

__all__ = ("celery_app",)
