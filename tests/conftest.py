"""Fixtures: a migrated template database, and ``stack`` factories that start real processes."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.measurements import MEASUREMENTS, collect, report_measurements
from tests.pgserver import PostgresTemplate, make_template_pg
from tests.procs import Stack, make_template_db

# Which database every Stack and the in-process (pytest-django) tests use: "sqlite" (the
# default, as shipped) or "postgres" (a real server per test process, tests/pgserver.py).
TEST_DATABASE = os.environ.get("TEST_DATABASE", "sqlite")
if TEST_DATABASE not in ("sqlite", "postgres"):
    raise pytest.UsageError(f"TEST_DATABASE must be sqlite or postgres, got {TEST_DATABASE!r}")


@pytest.fixture(scope="session")
def template_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_template_db(tmp_path_factory.mktemp("template"))


@pytest.fixture(scope="session")
def pg_template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresTemplate]:
    """This test process's PostgreSQL server (one per xdist worker) and migrated template."""
    template = make_template_pg(tmp_path_factory.mktemp("postgres"))
    yield template
    template.server.stop()


@pytest.fixture(scope="session")
def django_db_modify_db_settings(
    django_db_modify_db_settings_parallel_suffix: None, request: pytest.FixtureRequest
) -> None:
    """Under TEST_DATABASE=postgres, pytest-django's test database lives on this process's
    server too (settings were loaded before any server could start, so they change here)."""
    if TEST_DATABASE != "postgres":
        return
    from django.conf import settings
    from django.db import connections

    server = request.getfixturevalue("pg_template").server
    default = settings.DATABASES["default"]
    default.update({
        "ENGINE": "django.db.backends.postgresql", "NAME": "inprocess",
        # pytest-django creates its test database: the admin role (the app's has no CREATEDB).
        "USER": server.admin_user, "PASSWORD": server.admin_password,
        "HOST": server.host, "PORT": str(server.port),
        "OPTIONS": {"application_name": "pytest"},
    })
    default.setdefault("TEST", {})["NAME"] = None
    connections.close_all()
    try:
        del connections["default"]  # a wrapper built for SQLite keeps its backend class
    except AttributeError:
        pass  # not built yet


@pytest.fixture
def heartbeats(make_stack: Callable[..., Stack], settings: Any) -> Iterator[Callable[..., None]]:
    """A real Redis for in-process tests of liveness, and a writer of worker heartbeats in it:
    ``beat(hostname, pid, children=None)`` says that worker is alive; an absent key, dead."""
    import json
    import time

    from celery_conf.connections import RedisTarget, redis_client
    from celery_conf.heartbeat import HEARTBEAT_KEY_PREFIX

    stack = make_stack()
    settings.REDIS = RedisTarget(url=str(stack.redis.url))  # redis_client() derives from it
    redis_client.cache_clear()
    client = stack.redis.client()

    def beat(hostname: str, pid: int, children: list[int] | None = None) -> None:
        record: dict[str, Any] = {"pid": pid, "inflight": 1, "at": time.time()}
        if children is not None:
            record["children"] = children
        client.set(HEARTBEAT_KEY_PREFIX + hostname, json.dumps(record), ex=15)

    yield beat
    redis_client.cache_clear()


@pytest.fixture
def make_stack(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., Stack]]:
    stacks: list[Stack] = []

    def factory(env: dict[str, str] | None = None, redis: dict[str, str] | None = None,
                postgres: bool | None = None) -> Stack:
        """``postgres``: True for a test that is about PostgreSQL itself; None follows
        TEST_DATABASE."""
        on_postgres = TEST_DATABASE == "postgres" if postgres is None else postgres
        template = request.getfixturevalue("pg_template") if on_postgres else None
        template_db = request.getfixturevalue("template_db") if not on_postgres else Path("/")
        stack = Stack(base_dir=tmp_path / f"stack{len(stacks)}", template_db=template_db,
                      env_overrides=env or {}, redis_overrides=redis or {},
                      postgres=template)
        stacks.append(stack)
        return stack

    yield factory
    failed = getattr(request.node, "rep_call", None)
    for stack in stacks:
        stack.stop()
        if failed is not None and failed.failed:
            print(stack.logs())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that builds a Stack starts real processes: mark it so, whether or not its
    module says it, so ``-m "not processes"`` selects exactly the in-process tests."""
    for item in items:
        if "make_stack" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.processes)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Any:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture
def measure(request: pytest.FixtureRequest) -> Callable[..., None]:
    """Record measured numbers for this test; they are printed in the run's summary."""

    def record(**values: Any) -> None:
        request.node.user_properties.append(("measured", values))

    return record


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    collect(report)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if MEASUREMENTS:
        report_measurements(terminalreporter)
