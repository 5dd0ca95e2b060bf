"""503 with Retry-After, not 500, for a request that found every database connection busy.

A web process holds at most DATABASE_WEB_POOL_SIZE PostgreSQL connections (adr/0024); a
request that waited DATABASE_POOL_TIMEOUT_S for one gets psycopg_pool's PoolTimeout (wrapped
in Django's OperationalError). That is load, not a bug: the client is told to retry, and
nothing was written (the request never reached the database).
"""

from __future__ import annotations

from django.db import OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.deprecation import MiddlewareMixin
from psycopg_pool import PoolTimeout

RETRY_AFTER_S = 1


class DatabaseBusyMiddleware(MiddlewareMixin):
    """Sync and async capable (MiddlewareMixin), so the ASGI chain stays async."""

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not (isinstance(exception, OperationalError)
                and isinstance(exception.__cause__, PoolTimeout)):
            return None
        response = JsonResponse({"error": "The server is busy; try again in a moment."},
                                status=503)
        response["Retry-After"] = str(RETRY_AFTER_S)
        return response
