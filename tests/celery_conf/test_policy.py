"""The durable-task policy, and the declarations that must stay in step with platform/."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from django.conf import settings

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
    assert conf.broker_transport_options["visibility_timeout"] == 30
    assert conf.task_soft_time_limit < conf.task_time_limit


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


def test_the_lease_renewal_must_fit_the_visibility_timeout():
    with pytest.raises(ValueError):
        durable_task_settings(broker_url="redis://x", visibility_timeout=8)


def test_platform_directory_never_shadows_the_standard_library():
    assert not (ROOT / "platform" / "__init__.py").exists()
    import platform

    assert platform.python_version().startswith("3.")


def test_development_settings_use_sqlite_wal_with_immediate_transactions():
    options = settings.DATABASES["default"]["OPTIONS"]
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
