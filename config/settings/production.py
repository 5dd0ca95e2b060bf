"""Production: every secret and address comes from the environment; none has a default.

A missing or weak value raises ImproperlyConfigured at start-up, before any process serves:
the secret key, the Redis password, the database URL and the allowed hosts. Served over TLS
only (uvicorn's own, adr/0020), so every cookie is Secure and HTTP is redirected.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from config.env import env_bool, env_int, env_list, env_str, required

from .base import *  # noqa: F403
from .base import (
    PLATFORM_ROLES,
    REDIS_SENTINELS,
    celery_settings,
    data_addresses_check,
    redis_settings,
)

# Django's own deploy check wants 50 characters with some variety; the installer generates
# 64 (platform/install). Shorter keys, or the development default, are refused.
MIN_SECRET_KEY_LENGTH = 50
# Redis listens on loopback with a password; the installer generates 32 characters.
MIN_REDIS_PASSWORD_LENGTH = 16
# One year: browsers remember to use HTTPS only. Not preloaded and not for subdomains: the
# box serves one name inside a customer's network, whose other names are not ours to pin.
HSTS_SECONDS = 365 * 24 * 3600
# A host without the data role reaches Redis and PostgreSQL over the network, where plain text
# would carry every task, session and password: TLS is required there unless the operator
# turns it off (PLATFORM_REQUIRE_TLS=false). A one-box install (data role here) talks over
# loopback and keeps plain text (adr/0026).
REQUIRE_TLS_WITHOUT_DATA_ROLE = "data" not in PLATFORM_ROLES


def _strong_secret_key(value: str) -> str:
    if len(value) < MIN_SECRET_KEY_LENGTH or len(set(value)) < 5 or "insecure" in value \
            or value.startswith(("development", "tests-only")):
        raise ImproperlyConfigured(
            f"DJANGO_SECRET_KEY is too weak: use at least {MIN_SECRET_KEY_LENGTH} random "
            "characters (platform/install generates one).")
    return value


def _redis_url_with_password(value: str) -> str:
    password = urlsplit(value).password or ""
    if len(password) < MIN_REDIS_PASSWORD_LENGTH:
        raise ImproperlyConfigured(
            "REDIS_URL must carry a Redis password of at least "
            f"{MIN_REDIS_PASSWORD_LENGTH} characters (redis://:PASSWORD@host:port/0).")
    return value


def _strong_redis_password(name: str, value: str) -> str:
    if len(value) < MIN_REDIS_PASSWORD_LENGTH:
        raise ImproperlyConfigured(
            f"{name} must be a Redis password of at least {MIN_REDIS_PASSWORD_LENGTH} "
            "characters (platform/install generates one).")
    return value


DEBUG = False
SECRET_KEY = _strong_secret_key(required("DJANGO_SECRET_KEY"))
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", [])
if not ALLOWED_HOSTS:
    required("DJANGO_ALLOWED_HOSTS")
# base.py falls back to SQLite under var/ for development; production names its database.
required("DATABASE_URL")
if REDIS_SENTINELS:
    # Sentinel: the primary, the replicas and the sentinels each want a password; the data
    # one and the sentinels' one differ, so a leaked sentinel password cannot read the data.
    REDIS_URL = ""
    _strong_redis_password("REDIS_PASSWORD", required("REDIS_PASSWORD"))
    _strong_redis_password("REDIS_SENTINEL_PASSWORD", required("REDIS_SENTINEL_PASSWORD"))
else:
    REDIS_URL = _redis_url_with_password(required("REDIS_URL"))
REDIS = redis_settings(REDIS_URL)
globals().update(celery_settings(REDIS))
PLATFORM_REQUIRE_TLS = env_bool("PLATFORM_REQUIRE_TLS", REQUIRE_TLS_WITHOUT_DATA_ROLE)
data_addresses_check(REDIS, require_tls=PLATFORM_REQUIRE_TLS)

SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])
SECURE_SSL_REDIRECT = True
SECURE_HSTS_SECONDS = env_int("DJANGO_HSTS_SECONDS", HSTS_SECONDS)
SILENCED_SYSTEM_CHECKS = [
    "security.W005",  # HSTS for subdomains: see HSTS_SECONDS
    "security.W021",  # HSTS preload list: see HSTS_SECONDS
]

EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
