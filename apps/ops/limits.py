"""An ASGI middleware that refuses an oversized request body before Django reads any of it.

The web reads the whole body into memory or a temporary file before any Django middleware or
view runs (apps/django_pool.py, as Django's ASGI handler did), so a limit in Django comes too
late: a 50 MB upload would already be on disk. This sits in front: a declared Content-Length
over the limit is refused at once, and a chunked body is counted as it streams and cut off
the moment it passes the limit. Either way the answer is the same JSON 413 the document
endpoints give.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from apps.error_pages import error_html, wants_html
from apps.humanize import size_text

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def too_large_message(*, max_body_bytes: int, max_document_bytes: int) -> str:
    return (f"The request body is larger than the limit of {size_text(max_body_bytes)} "
            f"({max_body_bytes} bytes; a document may have {size_text(max_document_bytes)}); "
            "nothing was saved.")


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, *, max_body_bytes: int, message: str) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.json_body = json.dumps({"error": message}).encode()
        # A browser's form post gets the same sentence as a page in the site's layout (rendered
        # once, with no user: nothing of the request was read). Its Back button returns to the
        # form, which the browser still holds as it was typed.
        self.html_body = error_html(413, message, back=True).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            await self._refuse(scope, send)
            return

        received = 0
        cut_off = False
        response_started = False

        async def limited_receive() -> Message:
            nonlocal received, cut_off
            if cut_off:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    # Django's handler treats a disconnect while reading as an aborted
                    # request: it drops what it spooled and sends nothing, so we answer.
                    cut_off = True
                    return {"type": "http.disconnect"}
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
            await send(message)

        await self.app(scope, limited_receive, tracked_send)
        if cut_off and not response_started:
            await self._refuse(scope, send)

    async def _refuse(self, scope: Scope, send: Send) -> None:
        page = _wants_html(scope)
        body = self.html_body if page else self.json_body
        await send({
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"text/html; charset=utf-8" if page else b"application/json"),
                (b"content-length", str(len(body)).encode()),
                # The rest of the body is never read: the connection cannot be reused.
                (b"connection", b"close"),
            ],
        })
        await send({"type": "http.response.body", "body": body})


def _wants_html(scope: Scope) -> bool:
    accept = dict(scope.get("headers", ())).get(b"accept", b"")
    return wants_html(scope.get("path", ""), accept.decode("latin-1"))


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
