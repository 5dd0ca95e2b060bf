"""The telemetry stream under uvicorn with two worker processes: each connection gets its own
samples at about the configured rate whichever worker serves it, with nothing published on
the event bus; anonymous requests and bad rates are refused.
"""

from __future__ import annotations

import time

import pytest
import requests

from apps.events.bus import CHANNEL, CONTROL_CHANNEL
from tests.procs import Client, wait_until
from tests.telemetry.reader import StreamReader, spread_readers

pytestmark = pytest.mark.processes

RATE_HZ = 25
WINDOW_S = 3.0


def cookie_of(client: Client) -> str:
    return "; ".join(f"{k}={v}" for k, v in client.http.cookies.items())


def test_each_client_gets_its_stream_at_the_rate_on_any_worker(make_stack, measure):
    # One user opens every stream here: the per-user cap is not what this measures.
    stack = make_stack(env={"TELEMETRY_RATE_HZ": str(RATE_HZ), "TELEMETRY_STREAMS_PER_USER": "100"})
    web = stack.start_web(workers=2)
    redis = stack.redis.client()
    cookie = cookie_of(web.session())
    publishes_before = int(redis.info("commandstats").get("cmdstat_publish", {}).get("calls", 0))
    readers = spread_readers(web.base, cookie, per_worker=2, path=StreamReader.path)
    try:
        start = time.monotonic()
        wait_until(lambda: time.monotonic() - start >= WINDOW_S, timeout=WINDOW_S + 5,
                   what="the measuring window to pass", interval=0.05)
        end = time.monotonic()
        counts = [r.count_between(start, end) for r in readers]
        expected = RATE_HZ * (end - start)
        workers = sorted({r.worker for r in readers if r.worker is not None})
        measure(clients=len(readers), web_workers=len(workers), rate_hz=RATE_HZ,
                window_s=round(end - start, 2),
                samples_per_s=[round(c / (end - start), 1) for c in counts])
        assert len(workers) == 2, f"streams served by {workers}"
        low = [(r.worker, c) for r, c in zip(readers, counts, strict=True) if c < 0.5 * expected]
        assert not low, f"expected about {expected:.0f} samples per client, got {low}"
        high = [c for c in counts if c > 1.5 * expected]
        assert not high, f"more samples than the rate allows: {high} vs {expected:.0f}"
        # Samples deliberately not on the bus (adr/0010): nothing published. Each worker's
        # one hub subscription listens for session ends (adr/0019), and that is all.
        assert redis.pubsub_numsub(CONTROL_CHANNEL)[0][1] == 2
        assert redis.pubsub_numsub(CHANNEL)[0][1] <= 2
        publishes = int(redis.info("commandstats").get("cmdstat_publish", {}).get("calls", 0))
        assert publishes == publishes_before
    finally:
        for r in readers:
            r.stop()


def test_a_closed_connection_ends_its_stream_and_the_worker_keeps_serving(make_stack):
    stack = make_stack()
    web = stack.start_web(workers=2)
    cookie = cookie_of(web.session())
    first = StreamReader(web.base, cookie).start()
    wait_until(lambda: len(first.arrivals) >= 5, timeout=30, what="first stream flowing")
    first.stop()
    web_log = stack.procs[-1].log
    wait_until(lambda: "telemetry stream closed by the client" in web_log(), timeout=30,
               what="the server to cancel the stream of the client that left")
    # The cancelled generator must not take the worker with it: new streams still flow.
    readers = [StreamReader(web.base, cookie).start() for _ in range(4)]
    try:
        wait_until(lambda: all(len(r.arrivals) >= 5 for r in readers), timeout=30,
                   what="new streams flowing after a client left")
        assert "Traceback" not in web_log()
    finally:
        for r in readers:
            r.stop()


def test_anonymous_and_bad_rate_are_refused(make_stack):
    stack = make_stack()
    web = stack.start_web(workers=2)
    anonymous = requests.get(web.base + "/api/telemetry/stream/", timeout=10)
    assert anonymous.status_code == 401
    assert "Log in" in anonymous.json()["error"]
    page = requests.get(web.base + "/telemetry/", timeout=10, allow_redirects=False)
    assert page.status_code == 302 and "/accounts/login/" in page.headers["Location"]

    client = web.session()
    for bad in ("fast", "0", "51", "nan", "-3"):
        response = client.get(f"/api/telemetry/stream/?rate={bad}")
        assert response.status_code == 400, (bad, response.status_code)
        assert "rate must be" in response.json()["error"]
    response = client.get("/telemetry/")
    assert response.status_code == 200 and 'id="tm-chart"' in response.text
    with client.http.get(web.base + "/api/telemetry/stream/?rate=20", stream=True,
                         timeout=10) as stream:
        assert stream.status_code == 200
        assert stream.headers["Content-Type"].startswith("text/event-stream")
        assert stream.headers["Cache-Control"] == "no-cache"
        assert stream.headers["X-Accel-Buffering"] == "no"
