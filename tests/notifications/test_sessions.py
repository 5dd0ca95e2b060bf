"""Sessions end streams: logout, a password change, deactivation and session expiry close that
user's open streams on every web worker, event streams and telemetry streams alike, and the
browser's reconnect is refused (401); other sessions and users keep theirs. Real uvicorn with
two workers, real Redis, real database.

Bound: a signal-driven end (logout, password, deactivation) closes the streams within one
pub/sub hop of the commit; expiry closes them at the session's expiry time. The test allows
5 s for each and records what it measured.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
import requests

from tests.notifications.conftest import add_user, cookie_of, spread_clients
from tests.notifications.sse import SSEClient
from tests.procs import Stack, wait_until
from tests.telemetry.reader import StreamReader, spread_readers

pytestmark = pytest.mark.processes
PASSWORD = "a-long-password-1"
BOUND_S = 5.0
TELEMETRY_PATH = "/api/telemetry/stream/?rate=5"


def refused(clients: list[SSEClient]) -> bool:
    return all(401 in c.statuses for c in clients)


def user_update(stack: Stack, username: str, code: str) -> None:
    stack.manage("shell", "-c", (
        "from django.contrib.auth import get_user_model; "
        f"u = get_user_model().objects.get(username={username!r}); {code}; u.save()"))


def ended_within(clients: list[SSEClient], since: float) -> float:
    wait_until(lambda: refused(clients), timeout=BOUND_S, interval=0.02,
               what="streams ended and the reconnect refused")
    return time.monotonic() - since


def charts_ended_within(readers: list[StreamReader], since: float, base: str,
                        cookie: str) -> float:
    """Every telemetry stream closed by the server; a new one is refused (401)."""
    wait_until(lambda: all(r.ended.is_set() for r in readers), timeout=BOUND_S, interval=0.02,
               what="telemetry streams ended")
    took = max(r.ended_at or 0.0 for r in readers) - since
    again = requests.get(base + TELEMETRY_PATH, headers={"Cookie": cookie}, timeout=10)
    assert again.status_code == 401, again.status_code
    return took


def test_logout_password_deactivation_and_expiry_end_streams_on_every_worker(
        make_stack, sse_clients, measure):
    # One user opens streams until both workers hold one: not what the per-user cap is about.
    stack = make_stack(env={"TELEMETRY_STREAMS_PER_USER": "100"})
    web = stack.start_web(workers=2)
    for name in ("leaver", "changer", "deactivated", "expiring"):
        add_user(stack, name, PASSWORD)
    keeper = spread_clients(web, cookie_of(web.session()), per_worker=1, name="keeper")
    leaving, staying = web.session("leaver", PASSWORD), web.session("leaver", PASSWORD)
    on_leaving = spread_clients(web, cookie_of(leaving), per_worker=1, name="leaving")
    on_staying = spread_clients(web, cookie_of(staying), per_worker=1, name="staying")
    on_changer = spread_clients(web, cookie_of(web.session("changer", PASSWORD)),
                                per_worker=1, name="changer")
    on_deact = spread_clients(web, cookie_of(web.session("deactivated", PASSWORD)),
                              per_worker=1, name="deact")
    sse_clients.extend(keeper + on_leaving + on_staying + on_changer + on_deact)
    assert all(c.statuses == [200] for c in sse_clients)
    # Telemetry charts of the same sessions, on both workers too (not on the bus: they hear
    # only the session ends on their worker's subscription).
    charts = {name: spread_readers(web.base, cookie_of(client), path=TELEMETRY_PATH)
              for name, client in (("leaving", leaving), ("staying", staying))}
    changer_cookie, deact_cookie = on_changer[0].cookie, on_deact[0].cookie
    charts["changer"] = spread_readers(web.base, changer_cookie, path=TELEMETRY_PATH)
    charts["deact"] = spread_readers(web.base, deact_cookie, path=TELEMETRY_PATH)
    try:
        started = time.monotonic()
        assert leaving.post("/accounts/logout/", allow_redirects=False).status_code == 302
        logout_s = ended_within(on_leaving, started)
        chart_logout_s = charts_ended_within(charts["leaving"], started, web.base,
                                             on_leaving[0].cookie)

        started = time.monotonic()
        user_update(stack, "changer", f"u.set_password({PASSWORD + 'x'!r})")
        password_s = ended_within(on_changer, started)
        chart_password_s = charts_ended_within(charts["changer"], started, web.base,
                                               changer_cookie)

        started = time.monotonic()
        user_update(stack, "deactivated", "u.is_active = False")
        deactivation_s = ended_within(on_deact, started)
        chart_deact_s = charts_ended_within(charts["deact"], started, web.base, deact_cookie)

        # The same user's other session keeps its charts, still sampling.
        staying_charts = charts["staying"]
        assert not any(r.ended.is_set() for r in staying_charts)
        counts = [len(r.arrivals) for r in staying_charts]
        wait_until(lambda: all(len(r.arrivals) > n for r, n in
                               zip(staying_charts, counts, strict=True)),
                   timeout=BOUND_S, what="the other session's charts still sampling")
    finally:
        for readers in charts.values():
            for r in readers:
                r.stop()
    for name in ("leaving", "changer", "deact"):
        assert len({r.worker for r in charts[name]}) == 2, name  # ended on both workers

    # Expiry: the session row says it ends in 3 s; the streams end then, with no message.
    expiring = web.session("expiring", PASSWORD)
    key = expiring.http.cookies["sessionid"]
    expires = datetime.now(UTC) + timedelta(seconds=3)
    with stack.db() as db:
        db.execute("UPDATE django_session SET expire_date = ? WHERE session_key = ?",
                   (expires.strftime("%Y-%m-%d %H:%M:%S.%f"), key))
        db.commit()
    on_expiring = spread_clients(web, cookie_of(expiring), per_worker=1, name="expiring")
    sse_clients.extend(on_expiring)
    assert all(c.statuses == [200] for c in on_expiring)
    wait_until(lambda: refused(on_expiring), timeout=3 + BOUND_S, interval=0.02,
               what="streams end at the session's expiry")
    late_s = time.time() - expires.timestamp()

    # Other sessions of the same user, and other users, kept their streams throughout.
    for c in keeper + on_staying:
        assert c.statuses == [200] and len(c.workers) == 1, c.name
    for group in (on_leaving, on_changer, on_deact, on_expiring):
        assert len({c.workers[0] for c in group}) == 2  # streams on both workers ended
    measure(logout_s=logout_s, password_change_s=password_s, deactivation_s=deactivation_s,
            expiry_late_s=late_s, telemetry_logout_s=chart_logout_s,
            telemetry_password_change_s=chart_password_s,
            telemetry_deactivation_s=chart_deact_s, workers=2)
