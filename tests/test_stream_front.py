"""The stream front's Host check is Django's own (``HttpRequest.get_host``), before any session
read: a stream request with a Host outside ALLOWED_HOSTS gets 400 and touches nothing."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from django.test import override_settings

from apps import stream_front


def serve(host: str | None, **extra: str) -> tuple[int, dict[str, Any], list[str]]:
    """One stream request through the front in process; the endpoint records that it ran."""
    ran: list[str] = []

    async def endpoint(request: stream_front.StreamRequest) -> Any:
        ran.append("endpoint")
        raise stream_front.StreamRefused(418, "reached")

    headers = [(b"host", host.encode("latin-1"))] if host is not None else []
    headers += [(k.replace("_", "-").encode(), v.encode()) for k, v in extra.items()]
    scope = {"type": "http", "method": "GET", "path": "/s/", "headers": headers,
             "query_string": b"", "http_version": "1.1"}
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(stream_front._serve(scope, receive, send, endpoint))
    return sent[0]["status"], json.loads(sent[1]["body"]), ran


@override_settings(ALLOWED_HOSTS=["box.example", ".site.example"], DEBUG=False)
@pytest.mark.parametrize("host", ["evil.example", "box.example.evil", "", "box.example:x",
                                  "[::1", "box example", None])
def test_a_host_outside_allowed_hosts_is_refused_before_anything_runs(host):
    status, body, ran = serve(host)
    assert (status, body, ran) == (400, {"error": "Bad Host header."}, [])


@override_settings(ALLOWED_HOSTS=["box.example", ".site.example"], DEBUG=False)
@pytest.mark.parametrize("host", ["box.example", "box.example:8443", "a.site.example"])
def test_an_allowed_host_goes_on_to_authentication(host):
    status, _, ran = serve(host)
    assert status == 401 and ran == []  # no session cookie: refused after the Host check


@override_settings(ALLOWED_HOSTS=["box.example"], DEBUG=False, USE_X_FORWARDED_HOST=True)
def test_the_forwarded_host_is_checked_when_django_would_use_it():
    assert serve("box.example", x_forwarded_host="evil.example")[0] == 400
    assert serve("evil.example", x_forwarded_host="box.example")[0] == 401
