"""Hosts in network namespaces of their own (tests/netns.py), over TLS as shipped between
hosts: a data host (Redis, PostgreSQL) and two app hosts, hostB and hostC, whose processes
start exactly as on a real host (tests/hosts/cluster.py), launched inside their namespaces.

Timings are the fast ones of the other process tests (heartbeat every 0.5 s, its key gone
2.5 s after the last write; beat lock 5 s, loop 1 s), so a cut of a few seconds is longer
than every lease it should outlast.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.hosts.cluster import AppHost, DataHost, app_host, make_certs, running
from tests.hosts.conftest import FAST
from tests.netns import Network, build_network
from tests.scheduler.beats import BEAT_ENV

APP_HOSTS = ("hostB", "hostC")


@dataclass
class Apart:
    """The network, the data host and the app hosts; ``stop`` ends every process and
    removes every namespace, whatever state the test left them in."""

    net: Network
    data: DataHost
    hosts: dict[str, AppHost]

    def stop(self) -> None:
        try:
            for host in self.hosts.values():
                self.net.heal(host.name)  # a clean stop needs the data host
                if self.net.db_segment:
                    self.net.heal(host.name, "db")
            for host in self.hosts.values():
                host.kill_all()
            self.data.stop()
        finally:
            self.net.close()  # kills whatever is left in the namespaces, by pid

    def logs(self) -> str:
        return "\n".join(host.logs() for host in self.hosts.values())


def start_apart(base_dir: Path, *, tls: bool = True, db_segment: bool = False,
                **env: str) -> Apart:
    """The network and the data host; app hosts ready to start processes. ``tls=False``
    only where TLS would hide what is tested. ``db_segment``: PostgreSQL on a segment of
    its own, so one host's link to it alone can be cut (tests/netns.py)."""
    net = build_network({"data": False, **dict.fromkeys(APP_HOSTS, True)},
                        db_segment=db_segment)
    try:
        data_ns = net.hosts["data"]
        # The root namespace's address too: a test may put the fault proxy there, on a
        # host's way to the data host (tests/partitions/test_slow_link.py).
        addresses = [data_ns.back, net.root_back] + ([data_ns.db] if data_ns.db else [])
        certs = (make_certs(base_dir / "certs", name="data", addresses=addresses)
                 if tls else None)
        data = DataHost(base_dir / "data", address=data_ns.back, tls_dir=certs,
                        netns=data_ns.netns, db_address=data_ns.db)
        fronts = ",".join(h.front or "" for h in net.hosts.values() if h.front)
        hosts = {
            name: app_host(data, base_dir, name=name, address=net.hosts[name].back,
                           netns=net.hosts[name].netns, front=net.hosts[name].front,
                           DJANGO_ALLOWED_HOSTS=fronts, **FAST, **BEAT_ENV, **env)
            for name in APP_HOSTS
        }
    except BaseException:
        net.close()
        raise
    return Apart(net=net, data=data, hosts=hosts)


@pytest.fixture(scope="module")
def apart(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Apart]:
    """Shared by a module's tests: the data host's start (PostgreSQL, migrations, TLS) is
    most of their cost. Torn down however the tests end."""
    cluster = start_apart(tmp_path_factory.mktemp("apart"))
    with running(cluster):
        yield cluster


@pytest.fixture(autouse=True)
def logs_on_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        for name in ("apart", "group", "slow"):
            if name in request.fixturenames:
                cluster = request.getfixturevalue(name)
                print((cluster[0] if isinstance(cluster, tuple) else cluster).logs())
