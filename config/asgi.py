"""ASGI entry point for the web worker processes (uvicorn --workers N)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.development")

application = get_asgi_application()

from apps.stream_front import with_streams  # noqa: E402  (needs the settings loaded above)

application = with_streams(application)  # SSE streams before Django's handler (adr/0018)
