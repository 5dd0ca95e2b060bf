"""503 with Retry-After, not 500, for a request the database could not serve.

- Every connection busy. A web process holds at most DATABASE_WEB_POOL_SIZE PostgreSQL
  connections (adr/0024); a request that waited DATABASE_POOL_TIMEOUT_S for one gets
  psycopg_pool's PoolTimeout (wrapped in Django's OperationalError). That is load, not a bug:
  the client is told to retry, and nothing was written (the request never reached the
  database).
- The connection lost mid-request (PostgreSQL restarted, its host gone, the backend
  terminated): the server's last word is a class 57P ("operator intervention") or 08
  ("connection exception") SQLSTATE, or there was none and psycopg marks the connection
  ``broken`` (public attributes both). A statement in
  flight when a connection breaks either committed or did not, and the client cannot tell;
  the response says so rather than "nothing was saved". A document whose row did commit has
  no message yet: the reconciler enqueues it (adr/0014), so it is done once either way.
"""

from __future__ import annotations

from django.db import OperationalError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.deprecation import MiddlewareMixin
from psycopg_pool import PoolTimeout

RETRY_AFTER_S = 1


# SQLSTATE classes that end the connection: admin/crash shutdown, cannot connect now (57P),
# connection exceptions (08). https://www.postgresql.org/docs/current/errcodes-appendix.html
CONNECTION_LOST_SQLSTATES = ("57P", "08")


def _connection_lost(cause: BaseException | None) -> bool:
    sqlstate = getattr(cause, "sqlstate", None) or ""
    if sqlstate.startswith(CONNECTION_LOST_SQLSTATES):
        return True
    return bool(getattr(connection.connection, "broken", False))


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
        if not isinstance(exception, OperationalError):
            return None
        if isinstance(exception.__cause__, PoolTimeout):
            message = "The server is busy; try again in a moment."
        elif _connection_lost(exception.__cause__):
            message = ("The database connection was lost; the request may not have completed. "
                       "Try again in a moment.")
        else:
            return None
        response = JsonResponse({"error": message}, status=503)
        response["Retry-After"] = str(RETRY_AFTER_S)
        return response
