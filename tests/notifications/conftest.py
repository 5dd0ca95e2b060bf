"""Helpers for the live-event tests: a second user, SSE clients spread over web workers."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.notifications.sse import SSEClient
from tests.procs import Client, Stack, Web, wait_until

OTHER_USER = ("other", "other-password-1")


def add_user(stack: Stack, username: str, password: str) -> None:
    """A plain (not staff) user, created by the product's own manage.py."""
    stack.manage("shell", "-c", (
        "from django.contrib.auth import get_user_model; "
        f"get_user_model().objects.create_user({username!r}, password={password!r})"))


def cookie_of(client: Client) -> str:
    return "; ".join(f"{k}={v}" for k, v in client.http.cookies.items())


def spread_clients(web: Web, cookie: str, *, per_worker: int, workers: int = 2,
                   name: str = "c", most: int = 60) -> list[SSEClient]:
    """Open streams until at least ``per_worker`` are on each of ``workers`` web workers.

    uvicorn's workers share one listening socket and the kernel hands each connection to one
    of them, so the test keeps connecting and reads the pid each stream announces.
    """
    clients: list[SSEClient] = []
    while len(clients) < most:
        client = SSEClient(web.base, cookie, name=f"{name}{len(clients)}").start()
        wait_until(client.ready.is_set, timeout=30, what=f"stream {client.name} ready")
        clients.append(client)
        counts: dict[int, int] = {}
        for c in clients:
            assert c.worker is not None
            counts[c.worker] = counts.get(c.worker, 0) + 1
        if len(counts) >= workers and all(n >= per_worker for n in counts.values()):
            return clients
    raise AssertionError(f"streams landed on {counts} after {most} connections")


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
