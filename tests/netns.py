"""Hosts that are really apart: one network namespace per host, joined by veth pairs.

The topology of one ``Network`` (k is its number, chosen free on this machine):

- a *switch* namespace holding a bridge; every host's ``back`` interface is a port on it,
  198.18.k.N/24 (RFC 2544's benchmarking block 198.18.0.0/15, used only on these links and
  never routed anywhere: no namespace has a default route and the root namespace forwards
  nothing). The test process (root namespace) is a port too, 198.18.k.1, so it can reach the
  data host's Redis and PostgreSQL to inspect them.
- a *front* link per app host, straight from the root namespace (the clients' side, as a load
  balancer reaches web hosts): 198.19.k.(4i+1) here, 198.19.k.(4i+2) on the host.
- optionally a second switch, the *db* segment (198.19.(128+k).N/24, interface ``db``): the
  data host's PostgreSQL listens there, so one host's link to the database alone can be cut
  (``cut(name, segment="db")``) while it still reaches Redis.

A cut is ``ip link set DEV down`` on the host's switch port: the host's own interface stays up
(its routes stay, its packets vanish), as when a cable or a switch port fails; ``heal`` sets
the port up again. Cutting the back link leaves the front one: a web host cut from the data
host still answers clients.

Namespaces are named ``pn<pid>x<k>-<host>``; a leftover of a crashed run (its pid gone) is
removed, with every process in it, before a new network is built.
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "pn"
SWITCH = "switch"
BACK_BLOCK, FRONT_BLOCK = "198.18", "198.19"
DB_THIRD_OCTET = 128  # the db segment of network k is 198.19.(128 + k).0/24
NUMBERS = range(10, 120)  # k: below 128, so the front and db blocks never meet
LOCK_FILE = Path("/tmp/platform-netns.lock")
# The root namespace's ends: pn<k>r (to the switch), pn<k>d (to the db segment's), pn<k>f<i>
# (host i's front link).
ROOT_LINK = re.compile(rf"^{PREFIX}(\d+)(?:r|d|f\d+)[@: ]")


def ip(*args: str, check: bool = True) -> str:
    """``ip`` with an argument list; its output, or RuntimeError naming the command."""
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def namespaces() -> list[str]:
    return [line.split()[0] for line in ip("netns", "list").splitlines() if line.strip()]


def kill_namespace(name: str) -> None:
    """SIGKILL every process inside ``name`` (they outlive ``ip netns del``), then delete it."""
    for _ in range(20):
        pids = [int(p) for p in ip("netns", "pids", name, check=False).split()]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)  # the kernel reaps them; the next read says whether any is left
    ip("netns", "del", name, check=False)


def _owner_alive(name: str) -> bool:
    pid = name[len(PREFIX):].split("x", 1)[0]
    if not pid.isdigit():
        return True  # not ours: leave it alone
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    return True


def clean_leftovers() -> list[str]:
    """Remove namespaces of earlier runs whose test process is gone; their names."""
    gone = [n for n in namespaces() if n.startswith(PREFIX) and not _owner_alive(n)]
    for name in gone:
        kill_namespace(name)
    return gone


def _used_numbers() -> set[int]:
    """Numbers of live networks: their namespaces, and their links in the root namespace (a
    deleted namespace's veths can outlive it a while: the kernel frees it asynchronously)."""
    used = set()
    for name in namespaces():
        if name.startswith(PREFIX) and "x" in name:
            number = name.split("x", 1)[1].split("-", 1)[0]
            if number.isdigit():
                used.add(int(number))
    for line in ip("-br", "link").splitlines():
        match = ROOT_LINK.match(line)
        if match:
            used.add(int(match.group(1)))
    return used


@dataclass
class NetHost:
    name: str  # the platform's host name (PLATFORM_HOST_NAME)
    netns: str
    index: int  # the host's number on the switch: back address 198.18.k.(index + 1)
    back: str
    port: str  # its port on the switch (the interface a cut sets down)
    front: str | None = None  # its address on the clients' side, app hosts only
    db: str | None = None  # its address on the db segment, when the network has one


@dataclass
class Network:
    """The switch, the hosts and the root namespace's links; ``close`` removes everything."""

    number: int
    hosts: dict[str, NetHost] = field(default_factory=dict)
    db_segment: bool = False

    @property
    def switch(self) -> str:
        return f"{PREFIX}{os.getpid()}x{self.number}-{SWITCH}"

    @property
    def root_back(self) -> str:
        return f"{BACK_BLOCK}.{self.number}.1"

    def db_address(self, index: int) -> str:
        return f"{FRONT_BLOCK}.{DB_THIRD_OCTET + self.number}.{index + 1}"

    def _build_switch(self) -> None:
        ip("netns", "add", self.switch)
        bridges = [("br0", "root", f"{PREFIX}{self.number}r", self.root_back)]
        if self.db_segment:
            bridges.append(("br1", "rootdb", f"{PREFIX}{self.number}d", self.db_address(0)))
        for bridge, port, root_if, address in bridges:
            ip("-n", self.switch, "link", "add", bridge, "type", "bridge")
            ip("-n", self.switch, "link", "set", bridge, "up")
            ip("link", "add", root_if, "type", "veth", "peer", "name", port,
               "netns", self.switch)
            ip("-n", self.switch, "link", "set", port, "master", bridge, "up")
            ip("addr", "add", f"{address}/24", "dev", root_if)
            ip("link", "set", root_if, "up")

    def add_host(self, name: str, *, front: bool) -> NetHost:
        index = len(self.hosts) + 1
        netns = f"{PREFIX}{os.getpid()}x{self.number}-{name}"
        port = f"h{index}"
        host = NetHost(name=name, netns=netns, index=index,
                       back=f"{BACK_BLOCK}.{self.number}.{index + 1}", port=port)
        ip("netns", "add", netns)
        self.hosts[name] = host  # close() removes it from here on, half-built or not
        ip("-n", netns, "link", "set", "lo", "up")
        ip("-n", netns, "link", "add", "back", "type", "veth", "peer", "name", port,
           "netns", self.switch)
        ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
        ip("-n", netns, "addr", "add", f"{host.back}/24", "dev", "back")
        ip("-n", netns, "link", "set", "back", "up")
        if self.db_segment:
            host.db = self.db_address(index)
            ip("-n", netns, "link", "add", "db", "type", "veth", "peer", "name", f"d{index}",
               "netns", self.switch)
            ip("-n", self.switch, "link", "set", f"d{index}", "master", "br1", "up")
            ip("-n", netns, "addr", "add", f"{host.db}/24", "dev", "db")
            ip("-n", netns, "link", "set", "db", "up")
        if front:
            root_if = f"{PREFIX}{self.number}f{index}"
            here = f"{FRONT_BLOCK}.{self.number}.{4 * index + 1}"
            host.front = f"{FRONT_BLOCK}.{self.number}.{4 * index + 2}"
            ip("link", "add", root_if, "type", "veth", "peer", "name", "front", "netns", netns)
            ip("addr", "add", f"{here}/30", "dev", root_if)
            ip("link", "set", root_if, "up")
            ip("-n", netns, "addr", "add", f"{host.front}/30", "dev", "front")
            ip("-n", netns, "link", "set", "front", "up")
        return host

    def _port(self, name: str, segment: str) -> str:
        if segment == "db":
            if not self.db_segment:
                raise ValueError("this network has no db segment")
            return f"d{self.hosts[name].index}"
        return self.hosts[name].port

    def cut(self, name: str, segment: str = "back") -> None:
        """The host's switch port down: nothing passes between it and the other hosts (on
        the db segment: between it and PostgreSQL only)."""
        ip("-n", self.switch, "link", "set", self._port(name, segment), "down")

    def heal(self, name: str, segment: str = "back") -> None:
        ip("-n", self.switch, "link", "set", self._port(name, segment), "up")

    def split(self, names: list[str]) -> None:
        """The switch split in two: these hosts' ports onto a bridge of their own, so they
        reach each other and nothing else; the others stay with the test process (the
        clients' front links and the db segment are untouched)."""
        if "br2" not in ip("-n", self.switch, "-br", "link"):
            ip("-n", self.switch, "link", "add", "br2", "type", "bridge")
            ip("-n", self.switch, "link", "set", "br2", "up")
        for name in names:
            ip("-n", self.switch, "link", "set", self.hosts[name].port, "master", "br2")

    def join(self, names: list[str]) -> None:
        """The split healed: these hosts' ports back on the one bridge."""
        for name in names:
            ip("-n", self.switch, "link", "set", self.hosts[name].port, "master", "br0")

    def root_links(self) -> dict[int, str]:
        """This network's ends in the root namespace, by interface index. The index, not the
        name, tells them apart from a later network's: another test may take this network's
        number (and so its link names) the moment it is closed, while the kernel does not
        hand an index out again soon."""
        links = {}
        for line in ip("-o", "link").splitlines():
            index, rest = line.split(":", 1)
            match = ROOT_LINK.match(rest.strip())
            if match and int(match.group(1)) == self.number:
                links[int(index)] = rest.strip().split()[0].rstrip(":").split("@")[0]
        return links

    def close(self) -> None:
        """Every process in every namespace killed, every namespace deleted (the veths and
        the root namespace's ends deleted first: a veth pair goes with either end at once)."""
        for name in self.root_links().values():
            ip("link", "del", name, check=False)
        for host in self.hosts.values():
            kill_namespace(host.netns)
        kill_namespace(self.switch)


@contextmanager
def numbers_locked() -> Iterator[None]:
    """Held while a network is numbered and its switch built, and while leftovers are
    cleaned: xdist workers build networks side by side."""
    LOCK_FILE.touch(exist_ok=True)
    with open(LOCK_FILE) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build_network(hosts: dict[str, bool], *, db_segment: bool = False) -> Network:
    """A switch and one namespace per host (``{name: has a front link}``)."""
    with numbers_locked():
        clean_leftovers()
        used = _used_numbers()
        number = next(n for n in NUMBERS if n not in used)
        network = Network(number=number, db_segment=db_segment)
        try:
            network._build_switch()
        except BaseException:
            network.close()
            raise
    try:
        for name, front in hosts.items():
            network.add_host(name, front=front)
    except BaseException:
        network.close()
        raise
    return network


@contextmanager
def network(hosts: dict[str, bool]) -> Iterator[Network]:
    """``build_network`` torn down however the block ends."""
    net = build_network(hosts)
    try:
        yield net
    finally:
        net.close()

