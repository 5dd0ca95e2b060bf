"""Each process type names its database connections (application_name) from how it started."""

from __future__ import annotations

import pytest

from config.process import process_kind


@pytest.mark.parametrize("argv, kind", [
    (["/srv/venv/bin/uvicorn", "config.asgi:application", "--workers", "2"], "web"),
    (["/srv/venv/bin/celery", "-A", "celery_conf", "worker", "-n", "w1@%h"], "worker"),
    (["/srv/venv/lib/python3.11/site-packages/celery/__main__.py", "-A", "x", "beat"], "beat"),
    (["/srv/venv/bin/celery", "-A", "celery_conf", "flower"], "flower"),
    (["/srv/venv/bin/celery", "-A", "celery_conf", "inspect", "ping"], "celery"),
    (["manage.py", "flower", "--port", "5555"], "flower"),
    (["/opt/platform/current/manage.py", "migrate"], "manage"),
    (["/usr/lib/python3/dist-packages/pytest/__main__.py"], "pytest"),
    (["-c"], "python"),
    ([], "python"),
])
def test_process_kind(argv, kind):
    assert process_kind(argv) == kind
