"""A telemetry stream's place against the caps is given back however the stream ends, even
when its client leaves before the first byte: the stream front closes a stream it never
started, and an async generator closed before its first step runs none of its own code."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from django.http import QueryDict

from apps import stream_front
from apps.telemetry import streams

USER = 7


def test_a_client_gone_while_the_response_start_waits_gives_its_place_back():
    async def scenario() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        user = stream_front.StreamUser(id=USER, is_staff=False, session_key="k" * 32,
                                       expires_at=time.time() + 3600)
        request = stream_front.StreamRequest(
            user=user, query=QueryDict(""), headers={}, loop_ends_at=loop.time() + 60,
            loop_auth_started=loop.time())
        chunks = await streams.telemetry_stream_endpoint(request)
        held = streams.telemetry_streams_open(), streams._open_per_user.get(USER, 0)
        never = asyncio.Event()

        async def send(message: dict[str, Any]) -> None:
            # The connection's write buffer is full (an earlier response the client has not
            # read): uvicorn's send waits in its flow control until the client goes away.
            if message["type"] == "http.response.start":
                await never.wait()

        async def receive() -> dict[str, Any]:
            return {"type": "http.disconnect"}  # the client has gone

        await stream_front._stream(receive, send, chunks)
        return held

    assert asyncio.run(scenario()) == (1, 1)
    assert streams.telemetry_streams_open() == 0
    assert USER not in streams._open_per_user
