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

# Outermost: SSE streams, before Django's handler (adr/0018); they are GET only and never read
# a body, and the hub writes to their sockets directly (apps/stream_wire.py: it finds the
# socket through uvicorn's own ``send``), so nothing may wrap their ``send``.
# Then the body limit, before anything reads a byte; then Django.
application = with_streams(BodyLimitMiddleware(
    get_asgi_application(),
    max_body_bytes=settings.DATA_UPLOAD_MAX_MEMORY_SIZE,
    message=too_large_message(max_body_bytes=settings.DATA_UPLOAD_MAX_MEMORY_SIZE,
                              max_document_bytes=settings.DOCUMENTS_MAX_BYTES),
))
