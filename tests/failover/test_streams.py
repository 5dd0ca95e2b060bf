"""SIGKILL the Redis primary under live pages: every stream resyncs or replays, none is silent.

Streams on two web workers. Each worker's one subscription drops with the primary; the hub
closes its streams with "resync" and subscribes again through the sentinels, to the promoted
replica. An event published after the failover must reach every client.
"""

from __future__ import annotations

import time

import pytest

from apps.events.bus import publish_with
from tests.notifications.conftest import cookie_of, spread_clients
from tests.notifications.test_live_events import numsub
from tests.procs import wait_until

pytestmark = [pytest.mark.processes, pytest.mark.past_one_box]


def publish(stack, message: str) -> None:  # type: ignore[no-untyped-def]
    publish_with(stack.redis.client(), kind="broadcast", user_id=None,
                 data={"message": message, "sender": "test"})


def messages(client) -> list[str]:  # type: ignore[no-untyped-def]
    return [e.data["message"] for e in client.of_kind("broadcast")]


def test_primary_sigkilled_under_live_pages_no_stream_stays_silent(sentinel_stack, sse_clients,
                                                                    measure):
    stack = sentinel_stack()
    group = stack.redis.group
    web = stack.start_web(workers=2)
    # One stream on each web worker at least; the kernel, not the test, spreads connections.
    clients = spread_clients(web, cookie_of(web.session()), per_worker=1)
    sse_clients.extend(clients)
    publish(stack, "before")
    wait_until(lambda: all("before" in messages(c) for c in clients), timeout=20,
               what="every client hears the first event")

    killed_at = time.monotonic()
    old = group.kill_primary()
    group.wait_promotion(old)
    wait_until(lambda: all(c.of_kind("resync") for c in clients), timeout=30,
               what="every client told to resync")
    resynced_s = time.monotonic() - killed_at
    wait_until(lambda: numsub(stack) == 2, timeout=30, what="both workers subscribed again")
    resubscribed_s = time.monotonic() - killed_at
    wait_until(lambda: all(c.ready.is_set() for c in clients), timeout=30, what="streams back")
    publish(stack, "after")
    wait_until(lambda: all("after" in messages(c) for c in clients), timeout=20,
               what="an event published after the failover reaches every client")
    live_again_s = time.monotonic() - killed_at
    for c in clients:
        assert messages(c).count("after") == 1, (c.name, messages(c))
    measure(clients=len(clients), all_resynced_s=round(resynced_s, 1),
            resubscribed_s=round(resubscribed_s, 1), live_again_s=round(live_again_s, 1))
