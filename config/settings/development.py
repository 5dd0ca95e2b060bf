"""Development: working defaults so ``platform/up`` runs on a fresh machine.

``platform/up`` writes ``var/dev.env`` with generated secrets and exports it; the defaults here
are for a bare ``manage.py`` call on a developer's machine.
"""

from __future__ import annotations

from config.env import env_bool, env_str

from .base import *  # noqa: F403
from .base import PLATFORM_REQUIRE_TLS, celery_settings, data_addresses_check, redis_settings

DEBUG = env_bool("DJANGO_DEBUG", True)
SECRET_KEY = env_str("DJANGO_SECRET_KEY", "development-only-not-secret")
REDIS_URL = env_str("REDIS_URL", "redis://:platform-dev@127.0.0.1:6390/0")
REDIS = redis_settings(REDIS_URL)
globals().update(celery_settings(REDIS))
data_addresses_check(REDIS, require_tls=PLATFORM_REQUIRE_TLS)

# Mail goes to files under var/mail so a developer can read what would have been sent.
EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
EMAIL_FILE_PATH = env_str("EMAIL_FILE_PATH", str(VAR_DIR / "mail"))  # noqa: F405
