"""Production: every secret and address comes from the environment; none has a default.

A missing variable raises ImproperlyConfigured at start-up, before any process serves.
"""

from __future__ import annotations

from config.env import env_bool, env_int, env_list, env_str, required

from .base import *  # noqa: F403
from .base import celery_settings

DEBUG = False
SECRET_KEY = required("DJANGO_SECRET_KEY")
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", [])
if not ALLOWED_HOSTS:
    required("DJANGO_ALLOWED_HOSTS")
REDIS_URL = required("REDIS_URL")
if "@" not in REDIS_URL:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured("REDIS_URL must carry the Redis password (redis://:PASSWORD@host)")
globals().update(celery_settings(REDIS_URL))

SESSION_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", True)
CSRF_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", True)
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])
SECURE_HSTS_SECONDS = env_int("DJANGO_HSTS_SECONDS", 0)

EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
