"""An SSE endpoint on Channels: every connection joins one group; group_send fans out."""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loadtests.channels_ref.settings")

import django  # noqa: E402

django.setup()

from channels.generic.http import AsyncHttpConsumer  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

GROUP = "bench"
urlpatterns: list[Any] = []


class FanoutConsumer(AsyncHttpConsumer):
    """Channels 4 ends an HTTP consumer when handle() returns, and dispatches layer messages
    only between handlers, so a streaming response reads its own channel inside handle()."""

    async def handle(self, body: bytes) -> None:
        await self.send_headers(headers=[(b"Content-Type", b"text/event-stream"),
                                         (b"Cache-Control", b"no-cache")])
        channel = await self.channel_layer.new_channel()
        await self.channel_layer.group_add(GROUP, channel)
        await self.send_body(f": worker {os.getpid()}\n\n".encode(), more_body=True)
        try:
            while True:
                message = await self.channel_layer.receive(channel)
                await self.send_body(message["frame"].encode(), more_body=True)
        finally:
            await self.channel_layer.group_discard(GROUP, channel)


application = ProtocolTypeRouter({
    "http": URLRouter([path("stream/", FanoutConsumer.as_asgi())]),
})
