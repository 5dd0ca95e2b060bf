"""Fixtures: a migrated template database, and ``stack`` factories that start real processes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.measurements import MEASUREMENTS, collect, report_measurements
from tests.procs import Stack, make_template_db


@pytest.fixture(scope="session")
def template_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_template_db(tmp_path_factory.mktemp("template"))


@pytest.fixture
def make_stack(
    tmp_path: Path, template_db: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., Stack]]:
    stacks: list[Stack] = []

    def factory(env: dict[str, str] | None = None, redis: dict[str, str] | None = None) -> Stack:
        stack = Stack(base_dir=tmp_path / f"stack{len(stacks)}", template_db=template_db,
                      env_overrides=env or {}, redis_overrides=redis or {})
        stacks.append(stack)
        return stack

    yield factory
    failed = getattr(request.node, "rep_call", None)
    for stack in stacks:
        stack.stop()
        if failed is not None and failed.failed:
            print(stack.logs())


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
