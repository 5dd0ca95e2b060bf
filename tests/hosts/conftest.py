"""Fixtures for several hosts on one machine: a data host and app hosts (tests/hosts/cluster.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.documents.broker import FAST_RECONCILER, FAST_RECOVERY
from tests.hosts.cluster import AppHost, DataHost, app_host, running

HOST_B, HOST_C = "127.0.0.3", "127.0.0.4"
# Fast leases and the reconciler every 2 s (documents untouched 3 s), as the reconciler
# tests use them; short simulated work so a batch finishes in seconds.
FAST = {**FAST_RECOVERY, **FAST_RECONCILER, "DOCUMENTS_PROCESSING_SECONDS": "0.5"}


class Cluster:
    """One data host (127.0.0.2) and two app hosts: hostB (127.0.0.3), hostC (127.0.0.4)."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self.data = DataHost(base_dir / "data")
        self.b: AppHost = app_host(self.data, base_dir, name="hostB", address=HOST_B, **FAST)
        self.c: AppHost = app_host(self.data, base_dir, name="hostC", address=HOST_C, **FAST)

    def stop(self) -> None:
        for host in (self.b, self.c):
            host.stop()
        self.data.stop()

    def logs(self) -> str:
        return self.b.logs() + "\n" + self.c.logs()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Shared by a module's tests: starting the hosts is most of their cost."""
    cluster = Cluster(tmp_path_factory.mktemp("hosts"))
    with running(cluster):
        yield cluster
