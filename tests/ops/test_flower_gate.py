"""Task events flow only while someone views Flower (apps/ops/flower_gate.py, adr/0036).

A real Flower started by ``manage.py flower``, a real worker and a real Celery event receiver:
nobody viewing (refused requests, monitoring scrapes, OPTIONS), the worker sends no task
events though Flower runs; authenticated requests to Flower's pages switch them on at once and
Flower lists the tasks; after the idle window they go off; a Flower killed while viewed has
them switched off by its restart. Under Sentinel with the first sentinel down, what Flower's
Broker tab shows is measured, and ``manage.py status`` gives the queue lengths instead.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import signal
import subprocess
import sys
import time

import pytest
import requests
from tornado import httpclient, web

from apps.ops import flower_gate
from tests.documents.test_task_states import EventLog
from tests.procs import ROOT, Proc, Stack, free_port, spawn, wait_until

AUTH = ("viewer", "viewer-password-1")
# A row of Flower's Broker tab for the documents queue (its name in a table cell).
QUEUE_ROW = re.compile(r"<td>\s*documents\s*</td>")
IDLE_S = 3  # the test's idle window, through the setting


def test_the_gate_enables_while_watched_and_disables_once_after_the_window():
    now = [100.0]
    gate = flower_gate.ViewerGate(idle_seconds=10, clock=lambda: now[0])
    assert gate.next_command() == "disable_events"  # events a previous Flower left on
    assert gate.next_command() is None
    gate.viewed()
    assert gate.woken.is_set()  # the first view wakes the switch: events on at once
    now[0] += 9.9
    assert gate.next_command() == "enable_events"
    assert gate.next_command() == "enable_events"  # every tick: new workers get them too
    now[0] += 0.1
    assert gate.next_command() == "disable_events"
    assert gate.next_command() is None
    gate.failed("enable_events")
    assert gate.next_command() is None  # a failed enable leaves them off
    gate.events_on = True
    assert gate.next_command() == "disable_events"
    gate.failed("disable_events")
    assert gate.next_command() == "disable_events"  # a failed disable is tried again
    with pytest.raises(ValueError):
        flower_gate.ViewerGate(idle_seconds=0)


@pytest.mark.parametrize(("line", "prefix", "view"), [
    ("200 GET /api/tasks (127.0.0.1) 3.21ms", "", True),
    ("200 GET /api/workers?refresh=1 (127.0.0.1) 12.00ms", "", True),
    ("200 GET / (::1) 1.00ms", "", True),
    ("200 GET /tasks/datatable?draw=1 (127.0.0.1) 9.10ms", "", True),
    ("401 GET /api/tasks (127.0.0.1) 0.50ms", "", False),  # basic auth refused
    ("302 GET /tasks (127.0.0.1) 0.50ms", "", False),  # OAuth: sent to the login
    ("404 GET /nothing (127.0.0.1) 0.40ms", "", False),
    ("204 OPTIONS /api/tasks (127.0.0.1) 0.10ms", "", False),  # answered to anyone
    ("200 POST /api/task/revoke/x (127.0.0.1) 2.00ms", "", False),  # an action, not a view
    ("200 GET /metrics (127.0.0.1) 4.00ms", "", False),  # a monitor's scrape
    ("200 GET /healthcheck (127.0.0.1) 0.20ms", "", False),
    ("200 GET /static/css/flower.css (127.0.0.1) 0.30ms", "", False),
    ("200 GET /login (127.0.0.1) 0.30ms", "", False),
    ("200 GET /flower/metrics (127.0.0.1) 4.00ms", "/flower/", False),
    ("200 GET /flower/api/tasks (127.0.0.1) 4.00ms", "flower", True),
    ("something else entirely", "", None),
])
def test_which_access_log_lines_are_a_viewer(line, prefix, view):
    assert flower_gate.is_view(line, url_prefix=prefix) is view


def test_tornados_access_log_gives_the_gate_status_method_and_path():
    """What the gate reads, against the installed Tornado (no Flower): a real server, real
    requests, the lines its ``tornado.access`` logger carries. Breaks if Tornado's line changes
    shape."""
    gate = flower_gate.ViewerGate(idle_seconds=60)
    watch = flower_gate.AccessWatch(gate)
    seen: list[tuple[str, bool | None]] = []

    class Recorder(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append((record.getMessage(), flower_gate.is_view(record.getMessage())))

    class Page(web.RequestHandler):
        def get(self, path: str) -> None:
            if path == "refused":
                raise web.HTTPError(401)
            self.write("ok")

    access = logging.getLogger(flower_gate.ACCESS_LOGGER)
    level = access.level
    handlers = [watch, Recorder()]
    access.setLevel(logging.INFO)
    for handler in handlers:
        access.addHandler(handler)

    async def run() -> None:
        port = free_port()
        server = web.Application([(r"/(.*)", Page)]).listen(port, address="127.0.0.1")
        client = httpclient.AsyncHTTPClient()
        try:
            for path in ("refused", "metrics", "api/tasks?x=1"):
                await client.fetch(f"http://127.0.0.1:{port}/{path}", raise_error=False)
        finally:
            server.stop()
            client.close()

    try:
        asyncio.run(run())
    finally:
        for handler in handlers:
            access.removeHandler(handler)
        access.setLevel(level)
    assert [view for _, view in seen] == [False, False, True], seen
    assert seen[2][0].startswith("200 GET /api/tasks?x=1 (127.0.0.1) "), seen
    assert gate.watched() and not watch.unreadable_logged


def test_an_unreadable_access_line_is_logged_once_and_is_nobody(caplog):
    gate = flower_gate.ViewerGate(idle_seconds=60)
    watch = flower_gate.AccessWatch(gate)
    record = logging.LogRecord(flower_gate.ACCESS_LOGGER, logging.INFO, __file__, 1,
                               "GET /api/tasks -> 200", None, None)
    with caplog.at_level(logging.ERROR, logger="apps.ops.flower_gate"):
        watch.handle(record)
        watch.handle(record)
    assert not gate.watched()
    assert [r.message for r in caplog.records].count(
        "viewer gate: cannot read Tornado's access log line 'GET /api/tasks -> 200'; "
        "Flower's viewers are not seen and task events stay off") == 1


def test_a_bad_port_is_refused_before_flower_starts():
    out = subprocess.run([sys.executable, "manage.py", "flower", "--port", "0"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "--port must be 1-65535" in out.stderr


def flower_version() -> str:
    from importlib.metadata import version

    return version("flower")


def start_flower(stack: Stack, name: str) -> tuple[Proc, str]:
    """``manage.py flower`` as platform/supervisord.conf runs it; its base URL once it answers."""
    port = free_port()
    proc = spawn(name, [sys.executable, str(ROOT / "manage.py"), "flower",
                        "--address", "127.0.0.1", "--port", str(port)],
                 env=stack.env, log_dir=stack.log_dir)
    stack.procs.append(proc)
    base = f"http://127.0.0.1:{port}"
    wait_until(lambda: requests.get(base + "/healthcheck", timeout=2).ok, timeout=60,
               what=f"{name} answers")
    return proc, base


@pytest.mark.processes
def test_events_flow_only_while_someone_views_flower(make_stack, measure):
    # The worker logs each task's "succeeded" line (off by default): the test waits on it.
    stack = make_stack(env={"FLOWER_BASIC_AUTH": ":".join(AUTH),
                            "FLOWER_VIEWER_IDLE_S": str(IDLE_S),
                            "CELERY_TASK_LOG_LEVEL": "INFO"})
    events = EventLog(stack.redis.url)
    try:
        worker = stack.start_worker("w1", concurrency=1, wait=False)
        flower, base = start_flower(stack, "flower")

        def gate_sent(command: str) -> int:
            return flower.log().count(f"viewer gate: {command} sent")

        def worker_said(what: str) -> int:  # celery/worker/control.py logs each switch
            return worker.log().count(f"Events of group {{task}} {what} by remote.")

        # Nobody: refused requests, a monitor's scrapes, an OPTIONS anyone may send.
        assert requests.get(base + "/api/tasks", timeout=5).status_code == 401
        assert requests.get(base + "/api/tasks", auth=("viewer", "wrong"),
                            timeout=5).status_code == 401
        assert requests.get(base + "/metrics", timeout=5).ok
        assert requests.get(base + "/healthcheck", timeout=5).ok
        assert requests.options(base + "/api/tasks", timeout=5).status_code == 204
        stack.wait_worker_ready("w1", worker)
        wait_until(lambda: events.worker_events, timeout=30, what="the receiver gets events")
        # The switch's first tick, at start: events a previous Flower left on go off.
        wait_until(lambda: gate_sent("disable_events") == 1, timeout=30,
                   what="the first tick switches events off")
        unwatched = events.app.send_task("celery.accumulate", args=[1], queue="default")
        wait_until(lambda: f"[{unwatched.id}] succeeded" in worker.log(), timeout=30,
                   what="the unwatched task runs")
        # Longer than Flower's own 5 s enable timer, had --enable_events=False not stopped it.
        heartbeats = events.worker_events
        wait_until(lambda: events.worker_events >= heartbeats + 3, timeout=30,
                   what="three more worker heartbeats")
        assert gate_sent("enable_events") == 0 and worker_said("enabled") == 0

        # Someone opens Flower: its pages poll the API while open.
        def view() -> requests.Response:
            response = requests.get(base + "/api/tasks", auth=AUTH, timeout=5)
            assert response.ok, response.text
            return response

        viewed_at = time.monotonic()
        view()
        wait_until(lambda: worker_said("enabled") == 1, timeout=10, interval=0.1,
                   what="the first view switches the worker's events on")
        enabled_after_s = time.monotonic() - viewed_at
        watched = events.app.send_task("celery.accumulate", args=[2], queue="default")
        wait_until(lambda: view().json().get(watched.id, {}).get("state") == "SUCCESS",
                   timeout=30, interval=0.5, what="Flower lists the watched task as done")
        last_view = time.monotonic()
        # Flower and this receiver consume the events separately: wait for ours as well.
        wait_until(lambda: "task-succeeded" in events.types(watched.id), timeout=15,
                   what="the receiver gets the watched task's success too")
        # Events reach the receiver in order from one worker: the unwatched task sent none.
        assert events.types(unwatched.id) == []

        # The viewer leaves: after the idle window the next tick switches events off once.
        wait_until(lambda: worker_said("disabled") == 1, timeout=IDLE_S + 15, interval=0.1,
                   what="the worker's events off after the idle window")
        disabled_after_s = time.monotonic() - last_view
        left = events.app.send_task("celery.accumulate", args=[3], queue="default")
        wait_until(lambda: f"[{left.id}] succeeded" in worker.log(), timeout=30,
                   what="the task after the viewer left runs")
        # Two heartbeats later, anything the worker sent for it has arrived.
        heartbeats = events.worker_events
        wait_until(lambda: events.worker_events >= heartbeats + 2, timeout=15,
                   what="two more worker heartbeats")
        assert events.types(left.id) == []
        assert gate_sent("disable_events") == 2
        # Flower's own enable_events, if it sent any, would show as more worker "enabled"s
        # than the switch's: the worker logs each one it receives.
        assert worker_said("enabled") == gate_sent("enable_events") >= 1

        # Flower SIGKILLed while viewed leaves the events on; the supervisor's restart
        # switches them off on its first tick.
        enabled = worker_said("enabled")
        wait_until(lambda: view() and worker_said("enabled") > enabled, timeout=10,
                   interval=0.5, what="viewed again: events on")
        flower.signal(signal.SIGKILL)
        flower.wait_exit(timeout=10)
        flower, base = start_flower(stack, "flower-restarted")
        wait_until(lambda: worker_said("disabled") == 2, timeout=30,
                   what="the restarted Flower switches the events off")
        measure(flower=flower_version(), flower_gate_idle_s=IDLE_S,
                events_on_after_first_view_s=round(enabled_after_s, 2),
                events_off_after_last_view_s=round(disabled_after_s, 2))
    finally:
        events.close()


@pytest.mark.processes
@pytest.mark.past_one_box
def test_with_the_first_sentinel_down_the_queue_view_is_the_platforms_status(
        make_stack, monkeypatch, measure):
    """Flower's Broker tab builds its Redis client from the broker URL's first sentinel only
    (adr/0036): measured here with that sentinel down, and ``manage.py status`` (every
    sentinel, the platform's own client) giving the queue lengths instead."""
    monkeypatch.setenv("TEST_REDIS", "sentinel")
    stack = make_stack(env={"FLOWER_BASIC_AUTH": ":".join(AUTH)})
    group = stack.redis.group
    group.client().rpush("documents", "a", "b", "c")  # only LLEN is read: any value will do
    group.kill_sentinel(0)  # the first address of REDIS_SENTINELS, hence of the broker URL
    flower, base = start_flower(stack, "flower")

    def broker_tab() -> tuple[int, str]:
        response = requests.get(base + "/broker", auth=AUTH, timeout=30)
        return response.status_code, response.text

    status, page = broker_tab()
    lengths = requests.get(base + "/api/queues/length", auth=AUTH, timeout=30)
    wait_until(lambda: "Unable to get queues" in flower.log(), timeout=10,
               what="Flower logs why the Broker tab is empty")
    # Flower 2.2.0 answers 200 with an empty table, 2.0.1 answers 500: no queue either way.
    assert status in (200, 500) and not QUEUE_ROW.search(page), (status, page[-500:])
    assert lengths.status_code == 500
    queues = json.loads(stack.manage("status", "--json").stdout)["queues"]
    assert queues["documents"] == 3
    logged = next(line for line in flower.log().splitlines() if "Unable to get queues" in line)

    # The control: the first sentinel back, the same Broker tab lists the queue.
    group.sentinels[0].start(primary_port=group.primary_port())
    wait_until(lambda: QUEUE_ROW.search(broker_tab()[1]), timeout=30,
               what="the Broker tab lists the documents queue again")
    measure(flower=flower_version(), broker_tab_status=status, broker_tab_queue_rows=0,
            queue_length_api_status=lengths.status_code,
            flower_logged=re.search(r"No master found for '\w+'|\w+Error", logged)[0],
            status_documents=queues["documents"])
