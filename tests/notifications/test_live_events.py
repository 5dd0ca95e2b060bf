"""Live events reach every right browser connection and no wrong one, whichever process
produced them and whichever web worker serves the connection; and nothing is lost silently.

Real processes throughout: redis-server, uvicorn with two worker processes, a Celery worker,
``manage.py``; failures are real SIGKILLs. Every test counts lost and duplicated events.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import requests
from django.test import override_settings

from apps.events.bus import CHANNEL, LOG_KEY, publish_with
from apps.events.hub import WORKERS_KEY
from tests.documents.tally import sample_text
from tests.notifications.conftest import (
    OTHER_USER,
    add_user,
    cookie_of,
    received_all,
    sequence,
    spread_clients,
)
from tests.notifications.sse import SSEClient
from tests.procs import Stack, wait_until

pytestmark = pytest.mark.processes


def numsub(stack: Stack) -> int:
    return int(stack.redis.client().pubsub_numsub(CHANNEL)[0][1])


def reported_connections(stack: Stack, field: str = "connections") -> int:
    import json

    rows = stack.redis.client().hgetall(WORKERS_KEY).values()
    return sum(json.loads(r)[field] for r in rows)


def broadcast_numbered(stack: Stack, count: int, *, rate: float,
                       start: int = 0) -> threading.Thread:
    """A producer outside the web workers: this test process, through the bus's own code."""
    client = stack.redis.client()

    def run() -> None:
        for i in range(start, start + count):
            publish_with(client, kind="broadcast", user_id=None,
                         data={"message": f"n {i}", "sender": "test"})
            time.sleep(1 / rate)  # pacing of the producer, not synchronisation

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def assert_exactly_once_in_order(client: SSEClient, n: int) -> None:
    got = sequence(client)
    ids = [e.id for e in client.of_kind("broadcast")]
    assert got == list(range(n)), (
        f"{client.name}: lost {sorted(set(range(n)) - set(got))}, "
        f"duplicated {sorted(i for i in set(got) if got.count(i) > 1)}")
    assert len(set(ids)) == len(ids)


def test_events_from_web_celery_and_manage_reach_the_right_clients_only(
        make_stack, sse_clients, measure):
    stack = make_stack(env={"DOCUMENTS_PROCESSING_SECONDS": "0.3", "EVENTS_HEARTBEAT_S": "1"})
    web = stack.start_web(workers=2)
    stack.start_worker("w1", concurrency=1)
    add_user(stack, *OTHER_USER)
    tester, other = web.session(), web.session(*OTHER_USER)
    mine = spread_clients(web, cookie_of(tester), per_worker=1, name="tester")
    theirs = spread_clients(web, cookie_of(other), per_worker=1, name="other")
    sse_clients.extend(mine + theirs)
    everyone = mine + theirs
    # One subscription per web worker, however many streams it serves.
    assert numsub(stack) == 2

    # Produced in a web worker: a staff broadcast from the page's form.
    response = tester.post("/notifications/broadcast/", data={"message": "from web 0"},
                           allow_redirects=False)
    assert response.status_code == 302
    wait_until(received_all(everyone, 1), timeout=20, what="web broadcast reaches everyone")

    # Produced by a management command, a separate short-lived process.
    stack.manage("broadcast", "from manage 1")
    wait_until(received_all(everyone, 2), timeout=20, what="CLI broadcast reaches everyone")

    # Produced in the web worker (queued) and the Celery worker (processing, done).
    doc_mine = tester.submit(sample_text(1), title="mine")
    doc_theirs = other.submit(sample_text(2), title="theirs")

    def states(client: SSEClient, doc_id: int) -> list[str]:
        return [e.data["state"] for e in client.of_kind("document.state")
                if e.data["id"] == doc_id]

    wait_until(lambda: all(states(c, doc_mine)[-1:] == ["done"] for c in mine)
               and all(states(c, doc_theirs)[-1:] == ["done"] for c in theirs),
               timeout=60, what="document states reach their owners")

    # A non-staff user cannot broadcast; an anonymous request cannot read a stream.
    refused = other.post("/notifications/broadcast/", data={"message": "nope"},
                         allow_redirects=False)
    assert refused.status_code == 403
    assert requests.get(web.base + "/api/notifications/stream/", timeout=10).status_code == 401
    # Idle streams get heartbeats.
    wait_until(lambda: all(c.heartbeats >= 1 for c in everyone), timeout=20, what="heartbeats")

    for c in mine:
        assert states(c, doc_mine) == ["queued", "processing", "done"], c.name
        assert states(c, doc_theirs) == [], f"{c.name} saw another user's document"
    for c in theirs:
        assert states(c, doc_theirs) == ["queued", "processing", "done"], c.name
        assert states(c, doc_mine) == [], f"{c.name} saw another user's document"
    for c in everyone:
        assert [e.data["message"] for e in c.of_kind("broadcast")] == ["from web 0",
                                                                     "from manage 1"]
        ids = [e.id for e in c.events if e.kind != "ready"]
        assert len(ids) == len(set(ids)) and ids == sorted(ids, key=lambda i: tuple(
            map(int, i.split("-")))), f"{c.name}: duplicated or out of order"

    # Every stream is one the hub writes to directly when idle (the pinned uvicorn's response
    # cycle is recognised, apps/stream_wire.py): an upgrade that loses that fails here.
    wait_until(lambda: reported_connections(stack, "direct") == len(everyone), timeout=10,
               what="every stream written directly by its hub")

    # Closing the streams detaches them from their worker's hub at once.
    for c in everyone:
        c.stop()
    wait_until(lambda: reported_connections(stack) == 0, timeout=10,
               what="closed streams cleaned up")
    measure(clients=len(everyone), workers=len({c.workers[0] for c in everyone}),
            subscriptions=2)


def test_reconnect_with_last_event_id_gets_missed_events_once_in_order(
        make_stack, sse_clients, measure):
    stack = make_stack()
    web = stack.start_web(workers=2)
    cookie = cookie_of(web.session())
    clients = spread_clients(web, cookie, per_worker=2)
    sse_clients.extend(clients)
    n = 120
    producer = broadcast_numbered(stack, n, rate=40)
    # Cut every stream several times while events flow: each reconnect replays from the log
    # while the live subscription already delivers (the race the id dedupe covers).
    for round_ in range(4):
        wait_until(lambda round_=round_: all(len(c.of_kind("broadcast")) > (round_ + 1) * 20
                                             for c in clients),
                   timeout=30, what="events flowing")
        for c in clients:
            c.drop()
    # One client goes away for a while and comes back with only its Last-Event-ID.
    away = clients[0]
    away.reconnect = False
    away.drop()
    wait_until(lambda: away._thread is not None and not away._thread.is_alive(), timeout=10,
               what="client gone")
    missed_from = len(away.of_kind("broadcast"))
    producer.join(timeout=60)
    back = SSEClient(web.base, cookie, name="back", cursor=away.cursor).start()
    sse_clients.append(back)
    wait_until(received_all(clients[1:], n), timeout=30, what="every event everywhere")
    wait_until(lambda: len(back.of_kind("broadcast")) >= n - missed_from, timeout=30,
               what="the returning client catches up")

    for c in clients[1:]:
        assert_exactly_once_in_order(c, n)
        assert not c.of_kind("resync")
        assert len(c.workers) >= 5  # it really reconnected each time
    assert sequence(away) + sequence(back) == list(range(n))
    assert not back.of_kind("resync")
    measure(events=n, clients=len(clients), reconnects_each=4, lost=0, duplicated=0,
            replayed_after_absence=len(back.of_kind("broadcast")))


def test_a_gap_beyond_the_replay_log_is_signalled_as_resync(make_stack, sse_clients):
    # A tiny log (20 events; 5 per node so "~" trimming bites at this size).
    stack = make_stack(env={"EVENTS_LOG_MAXLEN": "20"}, redis={"stream-node-max-entries": "5"})
    web = stack.start_web(workers=2)
    cookie = cookie_of(web.session())
    client = SSEClient(web.base, cookie, name="gone", reconnect=False).start()
    sse_clients.append(client)
    wait_until(client.ready.is_set, timeout=30, what="stream ready")
    with override_settings(EVENTS_LOG_MAXLEN=20):
        broadcast_numbered(stack, 1, rate=1000).join()
        wait_until(lambda: client.of_kind("broadcast"), timeout=10, what="first event")
        client.stop()
        broadcast_numbered(stack, 100, rate=1000, start=1).join()
        assert stack.redis.client().xlen(LOG_KEY) < 100  # the bound did trim
        back = SSEClient(web.base, cookie, name="back", cursor=client.cursor).start()
        sse_clients.append(back)
        wait_until(back.ready.is_set, timeout=30, what="reconnected")
        broadcast_numbered(stack, 1, rate=1000, start=101).join()
        wait_until(lambda: back.of_kind("broadcast"), timeout=10, what="live after resync")
    kinds = [e.kind for e in back.events]
    assert kinds[:2] == ["resync", "ready"], kinds
    assert sequence(back) == [101]  # nothing stale replayed; live from the log's end


def uvicorn_children(web_pid: int) -> list[int]:
    with open(f"/proc/{web_pid}/task/{web_pid}/children") as fh:
        return [int(p) for p in fh.read().split()]


def test_killing_a_web_worker_loses_nothing_for_clients_that_reconnect(
        make_stack, sse_clients, measure):
    stack = make_stack()
    web = stack.start_web(workers=2)
    cookie = cookie_of(web.session())
    clients = spread_clients(web, cookie, per_worker=2)
    sse_clients.extend(clients)
    victim = clients[0].worker
    assert victim in uvicorn_children(web.proc.pid)
    n = 100
    producer = broadcast_numbered(stack, n, rate=25)
    wait_until(received_all(clients, 20), timeout=30, what="events flowing")
    os.kill(victim, signal.SIGKILL)
    killed_at = time.monotonic()
    on_victim = [c for c in clients if c.workers[0] == victim]
    wait_until(lambda: all(c.worker != victim for c in on_victim), timeout=30,
               what="the victim's clients reconnect to a live worker")
    reconnected_after = time.monotonic() - killed_at
    producer.join(timeout=60)
    wait_until(received_all(clients, n), timeout=30, what="every event everywhere")
    for c in clients:
        assert_exactly_once_in_order(c, n)
        assert not c.of_kind("resync")
    measure(events=n, clients=len(clients), on_killed_worker=len(on_victim), lost=0,
            duplicated=0, reconnected_after_s=reconnected_after)


def test_restarting_redis_makes_every_client_resync(make_stack, sse_clients, measure):
    stack = make_stack()
    web = stack.start_web(workers=2)
    cookie = cookie_of(web.session())
    clients = spread_clients(web, cookie, per_worker=2)
    sse_clients.extend(clients)
    broadcast_numbered(stack, 1, rate=1000).join()
    wait_until(received_all(clients, 1), timeout=20, what="first event")
    stack.redis.kill(signal.SIGKILL)
    stack.redis.restart()
    restarted_at = time.monotonic()
    wait_until(lambda: all(c.of_kind("resync") for c in clients), timeout=30,
               what="every client told to resync")
    resync_after = time.monotonic() - restarted_at
    wait_until(lambda: numsub(stack) == 2, timeout=30, what="both workers subscribed again")
    wait_until(lambda: all(c.ready.is_set() for c in clients), timeout=30, what="streams back")
    broadcast_numbered(stack, 1, rate=1000, start=1).join()
    wait_until(received_all(clients, 2), timeout=20, what="live again after the restart")
    for c in clients:
        assert_exactly_once_in_order(c, 2)
    measure(clients=len(clients), resync_all_within_s=resync_after)


def test_a_client_too_far_behind_is_cut_off_and_catches_up(make_stack, sse_clients, measure):
    stack = make_stack(env={"EVENTS_CLIENT_QUEUE": "8"})
    web = stack.start_web(workers=1)
    cookie = cookie_of(web.session())
    fast = SSEClient(web.base, cookie, name="fast").start()
    slow = SSEClient(web.base, cookie, name="slow", small_buffer=True).start()
    sse_clients.extend([fast, slow])
    for c in (fast, slow):
        wait_until(c.ready.is_set, timeout=30, what="stream ready")
    slow.paused.set()
    # ~7.5 MB in all: beyond what the kernel (up to 4 MB of send buffer on loopback) and
    # uvicorn buffer for a client that stopped reading.
    # Paced by the fast client: never more than 4 events ahead of it (its queue holds 8), so
    # if it is cut off, the slow one disturbed it; the slow one falls behind without bound.
    n, padding = 2500, "x" * 3000
    client = stack.redis.client()
    for i in range(n):
        publish_with(client, kind="broadcast", user_id=None,
                     data={"message": f"{padding} {i}", "sender": "test"})
        if i % 4 == 3:
            wait_until(lambda i=i: len(fast.of_kind("broadcast")) > i, timeout=30,
                       interval=0.002, what="the fast client keeps up")
    wait_until(received_all([fast], n), timeout=30, what="the fast client has every event")
    before = len(slow.of_kind("broadcast"))
    slow.paused.clear()
    wait_until(received_all([slow], n), timeout=30, what="the slow client catches up")
    assert_exactly_once_in_order(fast, n)
    assert_exactly_once_in_order(slow, n)
    assert len(fast.workers) == 1, "the slow client did not disturb the fast one"
    assert len(slow.workers) >= 2, "the slow client was never cut off"
    measure(events=n, slow_had_before_resume=before, slow_connections=len(slow.workers))
