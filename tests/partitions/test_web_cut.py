"""A web host cut from the data host, its clients' side still up (the front link).

Every submit during the cut must be answered, and answered 503 with nothing kept: no 202
for a document the database does not hold, no row for a refused request. After the heal the
host serves again. Judged by the history checker from the client's record of answers and
the rows (each request carries its own title).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import requests

from tests.documents.tally import sample_text
from tests.history import History, check
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
