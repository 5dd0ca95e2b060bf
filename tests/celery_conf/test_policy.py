"""The durable-task policy, and the declarations that must stay in step with platform/."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from celery_conf import app
from celery_conf.names import TASK_QUEUES, Queue
from celery_conf.policy import durable_task_settings
from tests.procs import ROOT


def test_every_task_gets_the_durable_policy():
    conf = app.conf
    assert conf.task_acks_late is True
    assert conf.task_reject_on_worker_lost is True
    assert conf.worker_prefetch_multiplier == 1
    assert conf.accept_content == ["json"] and conf.task_serializer == "json"
    assert conf.broker_transport_options["visibility_timeout"] == 900
    assert conf.task_soft_time_limit < conf.task_time_limit
    # The layout celery_conf/queues.py reads is stated in kombu's documented options.
    transport = conf.broker_transport_options
    assert list(transport["priority_steps"]) == [0, 5] and transport["sep"] == ":"
    assert conf.task_default_priority == 5  # the recovery's step 0 is served before it
    # send_task by name (the beat's outbox, a manual run) gets the same step from its route;
    # an explicit priority (the recovery's) wins.
    assert app.amqp.router.route({}, "reports.retention_purge")["priority"] == 5
    assert app.amqp.router.route({"priority": 0}, "documents.process")["priority"] == 0
    assert transport["unacked_key"] == "unacked" and transport["unacked_restore_limit"] == 10


def test_one_backend_serves_every_thread():
    # Under ASGI each request's sync code runs in a new thread; apply_async must not build a
    # backend in each (issue 20's profile).
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        in_a_thread = pool.submit(lambda: app.backend).result()
    assert in_a_thread is app.backend


def test_every_project_task_has_a_declared_name_and_queue():
    # Asked of a fresh interpreter, as a worker sees it (pytest-celery registers test tasks here).
    script = ("from celery_conf import app; app.loader.import_default_modules(); "
              "import json; print(json.dumps({n: app.amqp.router.route({}, n)['queue'].name "
              "for n in app.tasks if not n.startswith('celery.')}))")
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                            text=True, timeout=60, check=True)
    routes = json.loads(result.stdout.strip().splitlines()[-1])
    assert routes, "autodiscovery found no tasks"
    assert set(routes) <= set(TASK_QUEUES), f"undeclared: {sorted(set(routes) - set(TASK_QUEUES))}"
    assert routes == {name: str(TASK_QUEUES[name]) for name in routes}


def test_workers_under_the_supervisor_consume_every_declared_queue():
    conf = (ROOT / "platform" / "supervisord.conf").read_text()
    consumed = re.search(r"celery -A celery_conf worker .* -Q (\S+)", conf)
    assert consumed is not None
    assert set(consumed.group(1).split(",")) == {str(q) for q in Queue}
    assert "--workers %(ENV_WEB_WORKERS)s" in conf


def test_the_visibility_timeout_must_outlast_any_run_and_retry_countdown():
    # 360 s hard limit + 300 s longest countdown: kombu would restore a live worker's message.
    with pytest.raises(ValueError, match="must exceed the hard time limit"):
        durable_task_settings(broker_url="redis://x", visibility_timeout=660)
    assert durable_task_settings(broker_url="redis://x", visibility_timeout=661)


def test_platform_directory_never_shadows_the_standard_library():
    assert not (ROOT / "platform" / "__init__.py").exists()
    import platform

    assert platform.python_version().startswith("3.")


def test_development_settings_use_sqlite_wal_with_immediate_transactions():
    # From a fresh process: under TEST_DATABASE=postgres this one's settings point elsewhere.
    result = subprocess.run(
        [sys.executable, "-c", "import json, django; django.setup(); from django.conf import "
         "settings; print(json.dumps(settings.DATABASES['default']['OPTIONS']))"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
        env={"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "config.settings.development",
             "DATABASE_URL": "sqlite:////tmp/unused.sqlite3"},
    )
    options = json.loads(result.stdout)
    assert "journal_mode=WAL" in options["init_command"]
    assert options["transaction_mode"] == "IMMEDIATE"


def test_production_settings_refuse_to_start_without_secrets():
    env = {"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "config.settings.production"}
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY is not set" in result.stderr


def test_production_settings_start_with_everything_given():
    env = {"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "config.settings.production",
           "DJANGO_SECRET_KEY": "k3Y-q" * 11, "DJANGO_ALLOWED_HOSTS": "example.com",
           "REDIS_URL": "redis://:a-strong-password-1@127.0.0.1:6390/0",
           "DATABASE_URL": "sqlite:////tmp/unused.sqlite3"}
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); "
         "from django.conf import settings; print(settings.DEBUG)"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


# --- one path per setting: each timing written once, reaching kombu and the heartbeat -------
def _settings_in_child(**env: str) -> subprocess.CompletedProcess[str]:
    script = ("import django; django.setup(); from celery_conf import app; import json; "
              "c = app.conf; print(json.dumps([c.broker_transport_options, "
              "c.platform_heartbeat_interval, c.platform_heartbeat_ttl, "
              "c.task_soft_time_limit, c.task_time_limit]))")
    return subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "config.settings.development",
             **env})


def test_a_visibility_timeout_below_the_time_limits_is_refused_at_start_up():
    refused = _settings_in_child(CELERY_VISIBILITY_TIMEOUT="30")
    assert refused.returncode != 0
    assert "must exceed the hard time limit" in refused.stderr


def test_the_heartbeat_ttl_and_kombu_follow_their_one_setting():
    result = _settings_in_child(CELERY_HEARTBEAT_INTERVAL="2", CELERY_VISIBILITY_TIMEOUT="1200",
                                CELERY_UNACKED_MUTEX_EXPIRE="10")
    assert result.returncode == 0, result.stderr
    transport, interval, ttl, soft, hard = json.loads(result.stdout.strip().splitlines()[-1])
    assert interval == 2 and ttl == 10  # five intervals: a live worker's key never lapses
    assert transport["visibility_timeout"] == 1200 and transport["unacked_mutex_expire"] == 10
    assert (soft, hard) == (300, 360)


def test_the_restore_lock_expires_long_before_the_visibility_timeout():
    assert app.conf.broker_transport_options["unacked_mutex_expire"] == 5
    with pytest.raises(ValueError, match="unacked_mutex_expire"):
        durable_task_settings(broker_url="redis://x", unacked_mutex_expire=900)
    with pytest.raises(ValueError, match="soft_time_limit"):
        durable_task_settings(broker_url="redis://x", soft_time_limit=400, time_limit=360)


def test_the_heartbeat_reads_the_apps_config_not_the_environment():
    source = (ROOT / "celery_conf" / "heartbeat.py").read_text()
    assert "os.environ" not in source and "platform_heartbeat_interval" in source


def test_supervisord_waits_longer_than_the_hard_time_limit_before_killing_a_worker():
    conf = (ROOT / "platform" / "supervisord.conf").read_text()
    worker = conf[conf.index("[program:worker]"):]
    worker = worker[:worker.index("\n[", 1)]
    stopwait = int(re.search(r"^stopwaitsecs=(\d+)", worker, re.M).group(1))  # type: ignore[union-attr]
    assert stopwait > app.conf.task_time_limit, "a deploy would SIGKILL running tasks"
