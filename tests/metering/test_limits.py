"""Usage counters under uvicorn with two worker processes: concurrent submissions through both
workers are each counted exactly once and the daily limit lets exactly ``limit`` through; past
it the API and the page answer 429 and create nothing.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest
import requests

from tests.procs import Client, Stack, Web

pytestmark = pytest.mark.processes

THREADS = 8
PER_THREAD = 20
LIMIT = 100  # below THREADS * PER_THREAD, so the limit is crossed under concurrency


def workers_holding(web: Web) -> set[int]:
    """Pids of the uvicorn worker processes holding a client connection right now."""
    port = int(web.base.rsplit(":", 1)[1])
    holders = set()
    for child in psutil.Process(web.proc.pid).children(recursive=True):
        for conn in child.net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == port and conn.raddr and \
                    conn.status == psutil.CONN_ESTABLISHED:
                holders.add(child.pid)
    return holders


def sessions_on_both_workers(web: Web, *, most: int = 24) -> list[Client]:
    """Keep-alive sessions, opened until both workers hold some (the kernel picks per accept)."""
    sessions: list[Client] = []
    while len(sessions) < most:
        sessions.append(web.session())
        if len(sessions) >= THREADS and len(workers_holding(web)) >= 2:
            return sessions
    raise AssertionError(f"{most} sessions all on workers {workers_holding(web)}")


def documents_of_tester(stack: Stack) -> int:
    return stack.query("SELECT count(*) FROM documents_document d JOIN auth_user u "
                       "ON u.id = d.owner_id WHERE u.username = 'tester'")[0][0]


# The database backend's race at the limit is one UPDATE with the limit in its WHERE: on
# PostgreSQL that is a row lock held by concurrent transactions, so it runs there too.
@pytest.mark.parametrize("backend", [pytest.param("database", marks=pytest.mark.all_configs),
                                     "redis"])
def test_concurrent_submissions_on_two_workers_are_counted_exactly(make_stack, measure,
                                                                    backend):
    stack = make_stack(env={"METERING_BACKEND": backend, "METERING_DAILY_LIMIT": str(LIMIT)})
    web = stack.start_web(workers=2)
    sessions = sessions_on_both_workers(web)
    statuses: list[int] = []
    lock = threading.Lock()
    go = threading.Barrier(len(sessions))

    def hammer(client: Client) -> None:
        go.wait()  # every session starts together: the increments really are concurrent
        for i in range(PER_THREAD):
            response = client.post("/api/documents/", json={"text": f"note {i}"})
            with lock:
                statuses.append(response.status_code)

    with ThreadPoolExecutor(len(sessions)) as pool:
        list(pool.map(hammer, sessions))
    accepted, refused = statuses.count(202), statuses.count(429)
    usage = sessions[0].get("/api/usage/").json()
    measure(backend=backend, web_workers=len(workers_holding(web)), requests=len(statuses),
            accepted=accepted, refused=refused, counted=usage["count"])
    assert accepted + refused == len(statuses), sorted(set(statuses))
    assert accepted == LIMIT, f"{accepted} accepted with a limit of {LIMIT}"
    assert usage["count"] == accepted, f"{accepted} accepted, {usage['count']} counted"
    assert documents_of_tester(stack) == accepted


def test_past_the_limit_the_api_and_the_page_answer_429_and_create_nothing(make_stack):
    stack = make_stack(env={"METERING_DAILY_LIMIT": "3"})
    web = stack.start_web(workers=2)
    client = web.session()
    # Refused input costs nothing: it is given back, so all three units remain.
    assert client.post("/api/documents/", json={"text": "   "}).status_code == 400
    malformed = client.http.post(web.base + "/api/documents/", data=b"{", timeout=30, headers={
        **client.headers(), "Content-Type": "application/json"})
    assert malformed.status_code == 400
    for i in range(3):
        client.submit(f"document {i}")
    assert client.get("/api/usage/").json()["remaining"] == 0

    refused = client.post("/api/documents/", json={"text": "one too many"})
    assert refused.status_code == 429
    body = refused.json()
    assert "Daily limit reached: 3 document submissions per day" in body["error"]
    assert body["limit"] == 3 and body["resets_at"].endswith("+00:00")
    assert 0 < int(refused.headers["Retry-After"]) <= 86_400

    page = client.post("/documents/", data={"title": "t", "text": "from the page"})
    assert page.status_code == 429 and "Daily limit reached" in page.text
    assert 0 < int(page.headers["Retry-After"]) <= 86_400

    assert documents_of_tester(stack) == 3
    usage = client.get("/api/usage/").json()
    assert (usage["count"], usage["limit"], usage["backend"]) == (3, 3, "database")
    assert "<strong>3</strong> of 3 document" in client.get("/usage/").text

    status = json.loads(stack.manage("status", "--json").stdout)["metering"]
    assert status["calls_today"] == 3 and status["users_at_limit"] == 1
    assert status["top_users"] == ["tester: 3"]


def test_anonymous_requests_are_refused_and_count_nothing(make_stack):
    stack = make_stack()
    web = stack.start_web(workers=2)
    assert requests.get(web.base + "/api/usage/", timeout=10).status_code == 401
    page = requests.get(web.base + "/usage/", timeout=10, allow_redirects=False)
    assert page.status_code == 302 and "/accounts/login/" in page.headers["Location"]
    submit = requests.post(web.base + "/api/documents/", json={"text": "x"}, timeout=10)
    assert submit.status_code in (401, 403)
    assert stack.query("SELECT count(*) FROM metering_usagecounter")[0][0] == 0
