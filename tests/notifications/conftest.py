"""Helpers for the live-event tests: a second user, SSE clients spread over web workers."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.notifications.sse import SSEClient
from tests.procs import Client, Stack, Web
from tests.spread import spread_over_workers

OTHER_USER = ("other", "other-password-1")


def add_user(stack: Stack, username: str, password: str) -> None:
    """A plain (not staff) user, created by the product's own manage.py."""
    stack.manage("shell", "-c", (
        "from django.contrib.auth import get_user_model; "
        f"get_user_model().objects.create_user({username!r}, password={password!r})"))


def cookie_of(client: Client) -> str:
    return "; ".join(f"{k}={v}" for k, v in client.http.cookies.items())


def spread_clients(web: Web, cookie: str, *, per_worker: int, workers: int = 2,
                   name: str = "c", most: int = 200) -> list[SSEClient]:
    """Event streams, ``per_worker`` on each of ``workers`` web workers (tests/spread.py)."""
    return spread_over_workers(
        lambda n: SSEClient(web.base, cookie, name=f"{name}{n}").start(),
        served_by=lambda c: c.worker if c.ready.is_set() else None, stop=SSEClient.stop,
        per_worker=per_worker, workers=workers, most=most, what="event stream")


@pytest.fixture
def sse_clients() -> Iterator[list[SSEClient]]:
    """Every SSEClient a test registers here is stopped afterwards, passed or failed."""
    registry: list[SSEClient] = []
    yield registry
    for client in registry:
        client.stop()


def sequence(client: SSEClient, kind: str = "broadcast") -> list[int]:
    return [int(e.data["message"].split()[-1]) for e in client.of_kind(kind)]


def received_all(clients: list[SSEClient], n: int) -> Callable[[], bool]:
    return lambda: all(len(c.of_kind("broadcast")) >= n for c in clients)
