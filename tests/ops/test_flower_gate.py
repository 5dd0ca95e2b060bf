"""Task events flow only while someone views Flower (apps/ops/flower_gate.py, adr/0022).

A real Flower started by ``manage.py flower``, a real worker and a real Celery event receiver:
nobody viewing, the worker sends no task events though Flower runs; authenticated requests
to Flower's API switch them on and Flower lists the tasks; after the idle window they go off;
a Flower killed while viewed has them switched off by its restart.
"""

from __future__ import annotations

import asyncio
import inspect
import signal
import subprocess
import sys

import pytest
import redis
import requests
from flower import command as flower_command
from flower import events as flower_events
from flower import views as flower_views
from flower.api import tasks as flower_api_tasks
from flower.utils.broker import Broker, RedisSentinel
from tornado import web

from apps.ops import flower_gate
from celery_conf import connections
from tests.documents.test_task_states import EventLog
from tests.procs import ROOT, Proc, free_port, spawn, wait_until
from tests.sentinel import MASTER_NAME, SentinelGroup

AUTH = ("viewer", "viewer-password-1")
IDLE_S = 3  # the test's idle window, through the setting


def test_the_gate_enables_while_watched_and_disables_once_after_the_window():
    now = [100.0]
    gate = flower_gate.ViewerGate(idle_seconds=10, clock=lambda: now[0])
    assert gate.next_command() == "disable_events"  # events a previous Flower left on
    assert gate.next_command() is None
    gate.viewed()
    now[0] += 9.9
    assert gate.next_command() == "enable_events"
    assert gate.next_command() == "enable_events"  # every tick: new workers get them too
    now[0] += 0.1
    assert gate.next_command() == "disable_events"
    assert gate.next_command() is None
    with pytest.raises(ValueError):
        flower_gate.ViewerGate(idle_seconds=0)


def test_the_pinned_flower_internals_the_hooks_rely_on():
    import flower

    assert flower.__version__ == flower_gate.FLOWER_VERSION
    # Flower's timer calls Events.on_enable_events, bound when Events is built, every 5 s.
    init = inspect.getsource(flower_events.Events.__init__)
    assert "PeriodicCallback(self.on_enable_events" in init
    assert flower_events.Events.events_enable_interval == 5000
    assert inspect.iscoroutinefunction(flower_events.Events.on_enable_events)
    assert "enable_events" in inspect.getsource(flower_events.Events.on_enable_events)
    # Authentication of every page and API handler goes through BaseHandler.get_current_user,
    # which tornado calls through current_user for @web.authenticated.
    assert "get_current_user" in vars(flower_views.BaseHandler)
    assert issubclass(flower_api_tasks.ListTasks, flower_views.BaseHandler)
    assert "self.get_current_user()" in inspect.getsource(web.RequestHandler.current_user.fget)
    assert "@web.authenticated" in inspect.getsource(flower_api_tasks.ListTasks)
    # manage.py flower runs Flower's own command, which builds Flower (and its Events) there.
    assert "Flower(capp=app" in inspect.getsource(flower_command.flower.callback)
    # Flower reads FLOWER_* variables as its own options: the gate's setting must not be one.
    assert not flower_command.is_flower_envvar("FLOWER_VIEWER_IDLE_S")
    # The Broker tab's Sentinel client: built by _get_redis_client from one address, the
    # queue lengths read (and the client closed) by the inherited queues().
    assert "[(self.host, self.port)]" in inspect.getsource(RedisSentinel._get_redis_client)
    assert "self.redis.aclose()" in inspect.getsource(RedisSentinel.queues)


def test_a_bad_port_is_refused_before_flower_starts():
    out = subprocess.run([sys.executable, "manage.py", "flower", "--port", "0"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "--port must be 1-65535" in out.stderr


@pytest.mark.processes
def test_events_flow_only_while_someone_views_flower(make_stack, measure):
    # The worker logs each task's "succeeded" line (off by default): the test waits on it.
    stack = make_stack(env={"FLOWER_BASIC_AUTH": ":".join(AUTH),
                            "FLOWER_VIEWER_IDLE_S": str(IDLE_S),
                            "CELERY_TASK_LOG_LEVEL": "INFO"})
    events = EventLog(stack.redis.url)
    try:
        worker = stack.start_worker("w1", concurrency=1, wait=False)

        def start_flower(name: str) -> tuple[Proc, str]:
            port = free_port()
            proc = spawn(name, [sys.executable, str(ROOT / "manage.py"), "flower",
                                "--address", "127.0.0.1", "--port", str(port)],
                         env=stack.env, log_dir=stack.log_dir)
            stack.procs.append(proc)
            base = f"http://127.0.0.1:{port}"
            wait_until(lambda: requests.get(base + "/healthcheck", timeout=2).ok, timeout=60,
                       what=f"{name} answers")
            return proc, base

        flower, base = start_flower("flower")
        # Basic auth stays on, and a refused request is no viewer.
        assert requests.get(base + "/api/tasks", timeout=5).status_code == 401
        assert requests.get(base + "/api/tasks", auth=("viewer", "wrong"),
                            timeout=5).status_code == 401
        stack.wait_worker_ready("w1", worker)
        wait_until(lambda: events.worker_events, timeout=30, what="the receiver gets events")

        def gate_sent(command: str, times: int = 1) -> bool:
            return flower.log().count(f"viewer gate: {command} sent") >= times

        def worker_said(what: str) -> int:  # celery/worker/control.py logs each switch
            return worker.log().count(f"Events of group {{task}} {what} by remote.")

        # Flower's first tick, after the refused requests: a plain Flower would enable here.
        wait_until(lambda: gate_sent("disable_events"), timeout=30,
                   what="Flower's first tick switches events off")
        unwatched = events.app.send_task("celery.accumulate", args=[1], queue="default")
        wait_until(lambda: f"[{unwatched.id}] succeeded" in worker.log(), timeout=30,
                   what="the unwatched task runs")

        # Someone opens Flower: its pages poll the API while open.
        def view() -> requests.Response:
            response = requests.get(base + "/api/tasks", auth=AUTH, timeout=5)
            assert response.ok, response.text
            return response

        wait_until(lambda: view() and worker_said("enabled"), timeout=30, interval=0.5,
                   what="a viewer switches the worker's events on")
        watched = events.app.send_task("celery.accumulate", args=[2], queue="default")
        wait_until(lambda: view().json().get(watched.id, {}).get("state") == "SUCCESS",
                   timeout=30, interval=0.5, what="Flower lists the watched task as done")
        # Flower and this receiver consume the events separately: wait for ours as well.
        wait_until(lambda: "task-succeeded" in events.types(watched.id), timeout=15,
                   what="the receiver gets the watched task's success too")
        # Events reach the receiver in order from one worker: the unwatched task sent none.
        assert events.types(unwatched.id) == []

        # The viewer leaves: after the idle window the next tick switches events off once.
        wait_until(lambda: worker_said("disabled"), timeout=IDLE_S + 15,
                   what="the worker's events off after the idle window")
        left = events.app.send_task("celery.accumulate", args=[3], queue="default")
        wait_until(lambda: f"[{left.id}] succeeded" in worker.log(), timeout=30,
                   what="the task after the viewer left runs")
        # Two heartbeats later, anything the worker sent for it has arrived.
        heartbeats = events.worker_events
        wait_until(lambda: events.worker_events >= heartbeats + 2, timeout=15,
                   what="two more worker heartbeats")
        assert events.types(left.id) == []
        assert worker_said("enabled") == 1 and worker_said("disabled") == 1
        assert gate_sent("disable_events", 2) and not gate_sent("disable_events", 3)

        # Flower SIGKILLed while viewed leaves the events on; the supervisor's restart
        # switches them off on its first tick.
        wait_until(lambda: view() and worker_said("enabled") == 2, timeout=30, interval=0.5,
                   what="viewed again: events on")
        flower.signal(signal.SIGKILL)
        flower.wait_exit(timeout=10)
        flower, base = start_flower("flower-restarted")
        wait_until(lambda: worker_said("disabled") == 2, timeout=30,
                   what="the restarted Flower switches the events off")
        measure(flower_gate_idle_s=IDLE_S)
    finally:
        events.close()


@pytest.mark.processes
@pytest.mark.past_one_box
def test_flower_reads_queue_lengths_through_any_sentinel(tmp_path, monkeypatch, measure):
    # Restored after the test: install_broker_client replaces these two for the process.
    for name in ("_get_redis_client", "queues"):
        monkeypatch.setattr(RedisSentinel, name, getattr(RedisSentinel, name))
    group = SentinelGroup(tmp_path).start()
    try:
        target = connections.redis_target(
            url="", sentinels=[f"127.0.0.1:{s.port}" for s in group.sentinels],
            master=MASTER_NAME, password=group.password,
            sentinel_password=group.sentinel_password, db=0, tls=False, ca_file="")
        # What Flower is given: the broker URL as kombu's as_uri() leaves it (the first
        # sentinel only) and the app's transport options.
        uri = connections.broker_url(target).split(";")[0]
        options = connections.broker_connection_options(target)["transport_options"]
        group.client().rpush("documents", "a", "b", "c")
        group.sentinels[0].proc.signal(signal.SIGKILL)
        group.sentinels[0].proc.wait_exit(timeout=10)

        def lengths() -> list[dict] | str:
            try:
                broker = Broker(uri, broker_options=options, broker_use_ssl=None)
                return asyncio.run(broker.queues(["documents"]))
            except redis.RedisError as exc:
                return type(exc).__name__

        plain = lengths()
        assert plain == "MasterNotFoundError"  # Flower 2.2.0 as shipped
        flower_gate.install_broker_client(target)
        assert lengths() == [{"name": "documents", "messages": 3}]
        measure(first_sentinel_down_plain=plain, first_sentinel_down_hooked="3 messages")
    finally:
        group.stop()
