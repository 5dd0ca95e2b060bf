"""Serves the server-sent-event endpoints before Django's handler, so an open stream is nearly free.

Django runs every request on a thread (apps/django_pool.py; under Django's ASGI handler, a
thread of its own) that is held, with its database connection, until the response ends; for
a stream, as long as the tab is open. Here a stream request is
authenticated from its session cookie in a small shared thread pool (the database connection
is closed before the thread is returned), and from then on it is a coroutine on the event loop
and nothing else. Every other request goes to Django unchanged.

The endpoints are named in ``settings.STREAM_ENDPOINTS`` (path -> "module.function"); each
takes a ``StreamRequest`` and returns the stream's frames, or raises ``StreamRefused``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from importlib import import_module
from typing import Any

from django.conf import settings
from django.core.exceptions import DisallowedHost, TooManyFieldsSent
from django.db import connections
from django.http import HttpRequest, QueryDict
from django.utils.module_loading import import_string

from apps.stream_wire import Wire, wire_of

log = logging.getLogger(__name__)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True)
class StreamUser:
    id: int
    is_staff: bool
    session_key: str
    expires_at: float  # the session's expiry, seconds since the epoch


@dataclass(frozen=True)
class StreamRequest:
    user: StreamUser
    query: QueryDict
    headers: dict[str, str]  # lower-case names, latin-1 values (as ASGI delivers them)
    loop_ends_at: float  # the stream must end by then (event-loop clock): session expiry
    loop_auth_started: float  # when its authentication began (event-loop clock)
    # The socket, for the hub's direct writes (apps/stream_wire.py); None: ASGI send only.
    wire: Wire | None = None


class StreamRefused(Exception):
    """The endpoint answers with an error instead of a stream (bad parameter, over capacity)."""

    def __init__(self, status: int, message: str, *,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers: dict[str, str] = headers or {}


Endpoint = Callable[[StreamRequest], Awaitable[AsyncIterator[bytes]]]


@dataclass
class _Front:
    django: ASGIApp
    endpoints: dict[str, Endpoint] = field(default_factory=dict)


@cache
def _auth_pool() -> ThreadPoolExecutor:
    # A fixed, small pool: a thousand tabs reconnecting at once queue here instead of
    # starting a thousand threads; each call is one or two indexed reads.
    return ThreadPoolExecutor(max_workers=settings.STREAMS_AUTH_THREADS,
                              thread_name_prefix="stream-auth")


def _session_user(session_key: str) -> StreamUser | None:
    """The session's user if the session is live and the user active; the DB is closed after."""
    from django.contrib.auth import get_user
    from django.utils import timezone

    try:
        store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)

        class _Request:  # get_user reads request.session only
            session = store

        user = get_user(_Request())  # checks is_active and the password's session hash
        if not user.is_authenticated:
            return None
        expires = store.get_expiry_date()
        if hasattr(store, "get_model_class"):  # database sessions: the row's own expiry
            row = store.get_model_class().objects.filter(session_key=session_key).values_list(
                "expire_date", flat=True).first()
            if row is None or row <= timezone.now():
                return None
            expires = row
        return StreamUser(id=user.pk, is_staff=user.is_staff, session_key=session_key,
                          expires_at=expires.timestamp())
    finally:
        connections.close_all()  # this thread goes back to the pool with no connection


def _host_allowed(headers: dict[str, str]) -> bool:
    """Django's own Host check (``HttpRequest.get_host``: ALLOWED_HOSTS, USE_X_FORWARDED_HOST,
    the DEBUG localhost default), on a request that carries only the headers it reads."""
    if not headers.get("host"):
        return False  # HTTP/1.1 requires one; get_host would fall back to SERVER_NAME
    request = HttpRequest()
    request.META["HTTP_HOST"] = headers["host"]
    if "x-forwarded-host" in headers:
        request.META["HTTP_X_FORWARDED_HOST"] = headers["x-forwarded-host"]
    try:
        request.get_host()
    except DisallowedHost:
        return False
    return True


async def _respond_json(send: Send, status: int, body: dict[str, Any],
                        headers: dict[str, str] | None = None) -> None:
    payload = json.dumps(body).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
           (b"x-content-type-options", b"nosniff"), (b"cache-control", b"no-store")]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": payload})


def _cookies(headers: dict[str, str]) -> dict[str, str]:
    """The Cookie header's pairs, split as browsers send them (RFC 6265 5.4: ``; `` between
    pairs, the first ``=`` in each); a repeated name keeps its last value, as Django's own
    request parsing does, so a stream and a page of the same browser see the same session.
    Only the session cookie is read, whose value (a session key) never needs unquoting."""
    cookies: dict[str, str] = {}
    for pair in headers.get("cookie", "").split(";"):
        name, sep, value = pair.partition("=")
        name = name.strip()
        if sep and name:
            cookies[name] = value.strip()
    return cookies


async def _serve(scope: Scope, receive: Receive, send: Send, endpoint: Endpoint) -> None:
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    if not _host_allowed(headers):
        await _respond_json(send, 400, {"error": "Bad Host header."})
        return
    if scope["method"] != "GET":
        await _respond_json(send, 405, {"error": "Streams are read with GET."}, {"Allow": "GET"})
        return
    try:
        # Bounded by DATA_UPLOAD_MAX_NUMBER_FIELDS, like every Django request.
        query = QueryDict(scope.get("query_string", b""), encoding="utf-8")
    except TooManyFieldsSent:
        await _respond_json(send, 400, {"error": "Too many query parameters."})
        return
    session_key = _cookies(headers).get(settings.SESSION_COOKIE_NAME, "")
    user = None
    loop = asyncio.get_running_loop()
    auth_started = loop.time()
    if session_key and len(session_key) <= 64 and session_key.isascii():
        try:
            user = await loop.run_in_executor(_auth_pool(), _session_user, session_key)
        except Exception:  # the database is unavailable or locked: the browser retries
            log.exception("stream authentication failed")
            await _respond_json(send, 503, {"error": "Try again in a moment."},
                                {"Retry-After": "2"})
            return
    if user is None:
        await _respond_json(send, 401, {"error": "Log in first (session cookie required)."},
                            {"WWW-Authenticate": 'Session realm="platform"'})
        return
    ends_at = loop.time() + min(user.expires_at - time.time(), settings.STREAMS_MAX_LIFE_S)
    request = StreamRequest(
        user=user, headers=headers, loop_ends_at=ends_at, loop_auth_started=auth_started,
        query=query, wire=wire_of(scope, send))
    try:
        chunks = await endpoint(request)
    except StreamRefused as refused:
        await _respond_json(send, refused.status, {"error": refused.message}, refused.headers)
        return
    await _stream(receive, send, chunks)


async def _stream(receive: Receive, send: Send, chunks: AsyncIterator[bytes]) -> None:
    me = asyncio.current_task()
    assert me is not None

    async def watch_disconnect() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        me.cancel()  # the client left: stop the stream at once, wherever it waits

    watcher = asyncio.create_task(watch_disconnect())
    try:
        # 200 and no Content-Length: chunked to an HTTP/1.1 client (apps/stream_wire.py).
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),  # nginx: pass each event through at once
            (b"x-content-type-options", b"nosniff"),
        ]})
        async for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if watcher.done():
                break  # the client left; its cancellation can be lost in a race, not this
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    except asyncio.CancelledError:
        if not watcher.done():
            raise  # the server is shutting down, not the client leaving
    except OSError:
        pass  # the socket went away under a send
    finally:
        watcher.cancel()
        await chunks.aclose()  # type: ignore[attr-defined]


def with_streams(django_app: ASGIApp) -> ASGIApp:
    """Wrap Django's ASGI application: stream endpoints here, everything else to Django."""
    front = _Front(django=django_app)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if not front.endpoints and settings.STREAM_ENDPOINTS:
                front.endpoints = {path: import_string(target)
                                   for path, target in settings.STREAM_ENDPOINTS.items()}
            endpoint = front.endpoints.get(scope["path"])
            if endpoint is not None:
                await _serve(scope, receive, send, endpoint)
                return
        await front.django(scope, receive, send)

    return app
