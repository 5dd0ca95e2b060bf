"""A web worker serves at most TELEMETRY_STREAMS_PER_WORKER telemetry streams; the next one is
told 503 with Retry-After, and once a stream closes the worker has room again. Real uvicorn."""

from __future__ import annotations

import socket

import pytest
import requests

from tests.notifications.conftest import cookie_of
from tests.notifications.streamcost import close_streams
from tests.procs import wait_until

pytestmark = pytest.mark.processes
CAP = 3
PATH = "/api/telemetry/stream/"


def open_telemetry(base: str, cookie: str) -> socket.socket:
    host, port = base.rsplit("/", 1)[-1].split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(f"GET {PATH}?rate=5 HTTP/1.1\r\nHost: {host}:{port}\r\nCookie: {cookie}\r\n"
                 f"Accept: text/event-stream\r\n\r\n".encode())
    head = b""
    while b"event: hello" not in head:
        chunk = sock.recv(4096)
        assert chunk, f"closed before hello: {head!r}"
        head += chunk
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    return sock


def test_streams_beyond_the_cap_get_503_with_retry_after(make_stack, measure):
    stack = make_stack(env={"TELEMETRY_STREAMS_PER_WORKER": str(CAP),
                            "TELEMETRY_STREAMS_PER_USER": str(CAP + 1),
                            "TELEMETRY_BUSY_RETRY_S": "7"})
    web = stack.start_web(workers=1)
    client = web.session()
    cookie = cookie_of(client)
    socks = [open_telemetry(web.base, cookie) for _ in range(CAP)]
    try:
        refused = client.get(PATH, stream=True)
        assert refused.status_code == 503
        assert refused.headers["Retry-After"] == "7"
        assert "capacity" in refused.json()["error"]
        # The event stream is not counted against the telemetry cap, and vice versa.
        events = requests.get(web.base + "/api/notifications/stream/", stream=True, timeout=10,
                              cookies=client.http.cookies)
        assert events.status_code == 200
        events.close()
        socks.pop().close()  # a viewer leaves: its slot frees as soon as the worker notices

        def admitted() -> bool:
            response = client.get(PATH, stream=True)
            response.close()
            return response.status_code == 200

        wait_until(admitted, timeout=10, what="a freed slot admits a new stream")
    finally:
        close_streams(socks)
    measure(cap=CAP, beyond="503 Retry-After 7")


def test_one_user_holds_at_most_its_share_and_others_still_get_streams(make_stack, measure):
    per_user = 2
    stack = make_stack(env={"TELEMETRY_STREAMS_PER_WORKER": "10",
                            "TELEMETRY_STREAMS_PER_USER": str(per_user),
                            "TELEMETRY_BUSY_RETRY_S": "3"})
    stack.manage("shell", "--no-imports", "-c",
                 "from django.contrib.auth.models import User; "
                 "User.objects.create_user('second', password='second-password-1')")
    web = stack.start_web(workers=1)
    first, second = web.session(), web.session("second", "second-password-1")
    socks = [open_telemetry(web.base, cookie_of(first)) for _ in range(per_user)]
    try:
        refused = first.get(PATH, stream=True)
        assert refused.status_code == 429 and refused.headers["Retry-After"] == "3"
        assert "too many places" in refused.json()["error"]
        socks.append(open_telemetry(web.base, cookie_of(second)))  # the worker has room
        socks.pop(0).close()

        def admitted() -> bool:
            response = first.get(PATH, stream=True)
            response.close()
            return response.status_code == 200

        wait_until(admitted, timeout=10, what="the user's freed stream admits another")
    finally:
        close_streams(socks)
    measure(per_user=per_user, beyond="429 Retry-After 3")
