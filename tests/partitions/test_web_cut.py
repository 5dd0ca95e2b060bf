"""A web host cut from the data host, its clients' side still up (the front link).

Every submit during the cut must be answered, and answered 503 with nothing kept: no 202
for a document the database does not hold, no row for a refused request. After the heal the
host serves again. Judged by the history checker from the client's record of answers and
the rows (each request carries its own title). Its clients' event streams stay open through
the cut and get every event published meanwhile after the heal, once, in order.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import requests

from apps.events.bus import publish_with
from tests.documents.tally import sample_text
from tests.history import History, check
from tests.notifications.conftest import cookie_of, received_all, sequence
from tests.notifications.sse import SSEClient
from tests.partitions.conftest import Apart
from tests.procs import Client, Web, wait_until

pytestmark = [pytest.mark.processes, pytest.mark.partitions]

DURING = 2  # submits during the cut, one after another (10 s each)
ANSWER_WITHIN_S = 30.0  # the client's own timeout: an answer slower than this is a hang


@pytest.fixture(scope="module")
def started(apart: Apart) -> Iterator[tuple[Apart, Web]]:
    b, c = apart.hosts["hostB"], apart.hosts["hostC"]
    web = b.start_web(workers=1)
    worker = c.start_worker()
    c.start_beat()
    c.wait_worker(worker, apart.data.redis.client())
    b.wait_web(web)
    yield apart, web


def submit(client: Client, title: str, history: History) -> tuple[int, float]:
    """POST one document; record the answer as acked (with its id) or refused."""
    began = time.monotonic()
    try:
        response = client.http.post(client.base + "/api/documents/", headers=client.headers(),
                                    json={"title": title, "text": sample_text(1)},
                                    timeout=ANSWER_WITHIN_S)
        status = response.status_code
    except requests.RequestException:
        status = 0  # no answer within the client's timeout
    took = time.monotonic() - began
    history.add("acked" if status == 202 else "refused", title, host="client", at=time.time())
    return status, took


def kept_titles(apart: Apart, prefix: str) -> set[str]:
    return {r[0] for r in apart.data.query(
        "SELECT title FROM documents_document WHERE title LIKE ?", prefix + "%")}


def test_a_web_host_cut_from_the_data_host_answers_503_keeps_nothing_then_serves(
        started: tuple[Apart, Web], measure) -> None:
    apart, web = started
    client = web.session()
    history = History()
    assert submit(client, "web-cut before", history)[0] == 202

    apart.net.cut("hostB")
    cut_at = time.monotonic()
    answers = [submit(client, f"web-cut during {i}", history) for i in range(DURING)]
    # The load balancer's check says so too: not ready while the data host is out of reach.
    began = time.monotonic()
    ready = requests.get(web.base + "/readyz", timeout=ANSWER_WITHIN_S).status_code
    readyz_s = time.monotonic() - began
    held_s = time.monotonic() - cut_at
    apart.net.heal("hostB")
    healed_at = time.monotonic()

    def serves() -> bool:
        return submit(client, f"web-cut after {time.monotonic():.3f}", history)[0] == 202

    wait_until(serves, timeout=60, interval=0.5, what="hostB's web serves after the heal")
    serving_after_s = time.monotonic() - healed_at
    kept = kept_titles(apart, "web-cut ")
    for title in kept:
        history.add("kept", title)
    verdict = check(history)
    statuses = [status for status, _ in answers]
    # Every request during the cut answered, 503, within the client's patience.
    assert statuses == [503] * DURING, statuses
    assert ready == 503, ready
    verdict_counts = verdict.counts()
    assert not verdict.ack_not_kept and not verdict.refused_but_kept, verdict.violations
    # Refused after the heal (retries of ``serves`` while reconnecting) is fine; lost is not.
    assert not verdict.lost or set(verdict.lost) <= kept, verdict.lost
    measure(during_cut=DURING, answered_503=statuses.count(503),
            answer_s=[round(t, 1) for _, t in answers], readyz=ready,
            readyz_s=round(readyz_s, 1), cut_held_s=round(held_s, 1),
            serving_again_after_heal_s=round(serving_after_s, 1),
            kept_of_refused=len(verdict.refused_but_kept),
            acked_not_kept=len(verdict.ack_not_kept), acknowledged=verdict_counts["acknowledged"])


STREAM_CUT_S = 8.0  # how long the link stays down: the fault's length, not a wait


def test_streams_on_a_cut_web_host_get_every_event_once_in_order_after_the_heal(
        started: tuple[Apart, Web], measure) -> None:
    """Clients' streams to hostB stay open through the cut (their side of the host is up);
    the events published meanwhile (from the data host's side, as a worker elsewhere would)
    reach them after the heal, each once and in order, or as a resync if the gap outran the
    replay log."""
    apart, web = started
    cookie = cookie_of(web.session())
    clients = [SSEClient(web.base, cookie, name=f"cut{i}").start() for i in range(2)]
    try:
        wait_until(lambda: all(c.ready.is_set() for c in clients), timeout=30,
                   what="the streams are open")
        bus = apart.data.redis.client()

        def publish(numbers: range) -> None:
            for i in numbers:
                publish_with(bus, kind="broadcast", user_id=None,
                             data={"message": f"n {i}", "sender": "test"})

        publish(range(0, 20))
        wait_until(received_all(clients, 20), timeout=30, what="events before the cut")
        apart.net.cut("hostB")
        publish(range(20, 40))
        time.sleep(STREAM_CUT_S)  # the cut's length (the fault), not a wait for a condition
        apart.net.heal("hostB")
        healed_at, healed_wall = time.monotonic(), time.time()
        publish(range(40, 60))
        wait_until(lambda: all(len(c.of_kind("broadcast")) >= 60 or c.of_kind("resync")
                               for c in clients), timeout=60, interval=0.2,
                   what="every stream has every event (or a resync) after the heal")
        caught_up_s = time.monotonic() - healed_at
    finally:
        for c in clients:
            c.stop()
    for c in clients:
        assert not c.of_kind("resync"), f"{c.name}: a resync for an {STREAM_CUT_S} s gap"
        assert sequence(c) == list(range(60)), sequence(c)
    during = [e for c in clients for e in c.of_kind("broadcast")
              if 20 <= int(e.data["message"].split()[-1]) < 40]
    measure(cut_s=STREAM_CUT_S, clients=len(clients), events=60, lost=0, duplicated=0,
            caught_up_after_heal_s=round(caught_up_s, 1),
            first_cut_event_after_heal_s=round(min(e.at for e in during) - healed_wall, 1))
