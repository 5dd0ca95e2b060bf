"""Django's WSGI handler on a fixed pool of threads, served as an ASGI application.

Django's ASGI handler runs each request's sync code in a thread made for that request (its
per-request ``ThreadSensitiveContext``) and crosses between the event loop and that thread
three times: the middleware chain (WhiteNoise is sync only), the view, and back. Every view
behind it is sync (event streams are served before it, apps/stream_front.py), so the event
loop buys nothing there. Here the whole request, middleware and view, is one WSGI call
(PEP 3333, Django's ``get_wsgi_application``) on one of a fixed set of threads: one hop there,
one back, and the threads, with what Django and Celery keep per thread, are reused
(adr/0045: 0.8-1.6 ms less web CPU per submit, of 6.7-7.9).

What Django's ASGI handler did, this does too:
- the body is read before Django runs, spooled to a file past ``FILE_UPLOAD_MAX_MEMORY_SIZE``
  (the body limit in front, apps/ops/limits.py, bounds it); a disconnect while reading sends
  nothing and calls nothing;
- the request as the scope has it: the path as PEP 3333 wants it (UTF-8 bytes as latin-1),
  the scheme (``https`` under TLS, which CSRF's origin check and secure cookies read), the
  client's and the server's addresses, every header but those spelt with ``_`` (dropped, as
  Django's development server does, so none can pass for a ``-`` one);
- a streaming response (``StreamingHttpResponse``, WhiteNoise's files) goes out chunk by
  chunk as the thread makes it, each chunk waiting for the socket;
- the response is closed in the thread that made it: Django's ``request_finished`` then
  closes that thread's database connections, as after any request.

Shared plumbing: imports nothing of the apps.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any

from django.conf import settings
from django.http import FileResponse

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
Whole = tuple[int, list[tuple[bytes, bytes]], bytes]  # status, headers, body
FILE_BLOCK_BYTES = 64 * 1024


class ThreadedDjango:
    """An ASGI application running ``wsgi_app`` (Django's) on ``threads`` threads."""

    def __init__(self, wsgi_app: WSGIApp, *, threads: int) -> None:
        self.wsgi_app = wsgi_app
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="django")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            # As Django's ASGI handler says it: uvicorn then reports lifespan unsupported.
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        body = await read_body(receive)
        if body is None:
            return  # the client went away (or the body limit cut it off): nothing to answer
        loop = asyncio.get_running_loop()
        try:
            answer = await loop.run_in_executor(self.pool, self._call, scope, body, send, loop)
        finally:
            body.close()
        if answer is not None:  # a whole response, made in the thread: sent from here
            status, headers, content = answer
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": content})

    def _call(self, scope: Scope, body: IO[bytes], send: Send,
              loop: asyncio.AbstractEventLoop) -> Whole | None:
        """Django's answer: whole, for the loop to send; or None, streamed from here."""
        started: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]],
                           exc_info: Any = None) -> Callable[[bytes], None]:
            started["status"] = int(status.split(" ", 1)[0])
            # Django's Set-Cookie values start with a space (SimpleCookie's output); a WSGI
            # server strips it, and h11 refuses a value with one.
            started["headers"] = [(name.lower().encode("latin-1"),
                                   value.strip().encode("latin-1")) for name, value in headers]
            return _no_write

        result = self.wsgi_app(wsgi_environ(scope, body), start_response)
        try:
            if not getattr(result, "streaming", False):
                return started["status"], started["headers"], b"".join(result)

            def emit(message: Message) -> None:
                asyncio.run_coroutine_threadsafe(send(message), loop).result()

            emit({"type": "http.response.start", "status": started["status"],
                  "headers": started["headers"]})
            # A file is there to read at once: sent in blocks, not in FileResponse's 4 KiB
            # reads, one hop each. Anything else goes out as it comes.
            block = FILE_BLOCK_BYTES if isinstance(result, FileResponse) else 1
            pending = bytearray()
            for chunk in result:
                pending += chunk
                if len(pending) >= block:
                    emit({"type": "http.response.body", "body": bytes(pending),
                          "more_body": True})
                    pending.clear()
            emit({"type": "http.response.body", "body": bytes(pending)})
            return None
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()  # here, in the thread whose connections request_finished closes


def _no_write(data: bytes) -> None:
    raise RuntimeError("the WSGI write() callable is not supported: return the body")


async def read_body(receive: Receive) -> IO[bytes] | None:
    """The whole request body, spooled as Django's ASGI handler spools it; None when the
    client disconnected first."""
    body = tempfile.SpooledTemporaryFile(max_size=settings.FILE_UPLOAD_MAX_MEMORY_SIZE)
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            body.close()
            return None
        body.write(message.get("body", b""))
        if not message.get("more_body", False):
            body.seek(0)
            return body


def wsgi_environ(scope: Scope, body: IO[bytes]) -> dict[str, Any]:
    """PEP 3333's environ for an ASGI HTTP scope whose whole body is in ``body``."""
    root = scope.get("root_path", "")
    path = scope["path"]
    if root and path.startswith(root):
        path = path[len(root):]
    length = body.seek(0, 2)
    body.seek(0)
    server_host, server_port = scope.get("server") or ("unknown", 0)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": _native(root),
        "PATH_INFO": _native(path),
        "QUERY_STRING": scope.get("query_string", b"").decode("latin-1"),
        "SERVER_NAME": str(server_host),
        "SERVER_PORT": str(server_port or 0),
        "SERVER_PROTOCOL": f"HTTP/{scope.get('http_version', '1.1')}",
        # The body as read, whatever the headers said (a chunked body has no Content-Length).
        "CONTENT_LENGTH": str(length),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": body,
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    client = scope.get("client")
    if client:
        environ["REMOTE_ADDR"], environ["REMOTE_PORT"] = str(client[0]), str(client[1])
    for raw_name, raw_value in scope.get("headers", ()):
        name = raw_name.decode("latin-1")
        if "_" in name or name.lower() == "content-length":
            continue
        key = name.upper().replace("-", "_")
        key = key if key == "CONTENT_TYPE" else f"HTTP_{key}"
        value = raw_value.decode("latin-1")
        environ[key] = f"{environ[key]},{value}" if key in environ else value
    return environ


def _native(text: str) -> str:
    """PEP 3333's "native string": the UTF-8 bytes of ``text``, each as one latin-1 char."""
    return text.encode("utf-8", "surrogatepass").decode("latin-1")
