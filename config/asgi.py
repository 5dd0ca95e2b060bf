"""ASGI entry point for the web worker processes (uvicorn --workers N).

The body limit wraps Django from outside: Django reads the whole body before its own
middleware runs (apps/ops/limits.py). Django itself runs as its WSGI handler on a fixed pool
of threads (apps/django_pool.py, adr/0043): every view is sync, streams are served before it.
"""

import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

from apps.ops.limits import BodyLimitMiddleware, too_large_message

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.development")

from apps.django_pool import ThreadedDjango  # noqa: E402  (needs the settings loaded above)
from apps.stream_front import with_streams  # noqa: E402

# Outermost: SSE streams, before Django's handler (adr/0018); they are GET only and never read
# a body, and the hub writes to their sockets directly (apps/stream_wire.py: it finds the
# socket through uvicorn's own ``send``), so nothing may wrap their ``send``.
# Then the body limit, before anything reads a byte; then Django.
application = with_streams(BodyLimitMiddleware(
    ThreadedDjango(get_wsgi_application(), threads=settings.WEB_REQUEST_THREADS),
    max_body_bytes=settings.DATA_UPLOAD_MAX_MEMORY_SIZE,
    message=too_large_message(max_body_bytes=settings.DATA_UPLOAD_MAX_MEMORY_SIZE,
                              max_document_bytes=settings.DOCUMENTS_MAX_BYTES),
))
