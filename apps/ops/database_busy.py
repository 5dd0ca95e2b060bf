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
    """Sync only, and last: it makes Django's whole middleware chain sync (adr/0043).

    Every view behind Django's handler is sync (event streams are served before it,
    apps/stream_front.py), and WhiteNoise, near the top, is sync only. With an async-capable
    innermost middleware Django ran the chain below WhiteNoise in async mode, and each
    MiddlewareMixin there called its process_request/process_response through its own
    sync_to_async thread hop: about ten hops per request. Sync from the inside out, a request
    makes three (into the chain's thread, out to the async handler, into the view's thread).
    """

    sync_capable = True
    async_capable = False

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not (isinstance(exception, OperationalError)
                and isinstance(exception.__cause__, PoolTimeout)):
            return None
        response = JsonResponse({"error": "The server is busy; try again in a moment."},
                                status=503)
        response["Retry-After"] = str(RETRY_AFTER_S)
        return response
