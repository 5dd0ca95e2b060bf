"""ASGI entry point for the web worker processes (uvicorn --workers N).

The body limit wraps Django from outside: Django reads the whole body before its own
middleware runs (apps/ops/limits.py).
"""

import os

from django.conf import settings
from django.core.asgi import get_asgi_application

from apps.ops.limits import BodyLimitMiddleware, too_large_message

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.development")

from apps.stream_front import with_streams  # noqa: E402  (needs the settings loaded above)

# Outermost: the body limit, before anything reads a byte; then SSE streams before Django's
# handler (adr/0018); then Django.
application = BodyLimitMiddleware(
    with_streams(get_asgi_application()),
    max_body_bytes=settings.DATA_UPLOAD_MAX_MEMORY_SIZE,
    message=too_large_message(max_body_bytes=settings.DATA_UPLOAD_MAX_MEMORY_SIZE,
                              max_document_bytes=settings.DOCUMENTS_MAX_BYTES),
)
